"""The pyiceberg-shaped verbs on tables of a real pyiceberg SqlCatalog (SQLite): pyiceberg
writes and reads back, the engine scans, deletes, appends and upserts in between."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("pyiceberg")
from pyiceberg.catalog.sql import SqlCatalog  # noqa: E402
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, IsNull, LessThan, Not  # noqa: E402
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.types import LongType, NestedField, StringType  # noqa: E402

from iceberg_exec import InvalidInput, Session, TableNotFound, UpsertResult  # noqa: E402

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "v", LongType(), required=False),
    identifier_field_ids=[1],
)


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"n{i % 13}" for i in ids], pa.large_string()),
            "v": pa.array([i * 10 for i in ids], pa.int64()),
        },
        schema=SCHEMA.as_arrow(),
    )


@pytest.fixture()
def lake(tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA, properties={"write.delete.mode": "merge-on-read"})
    table.append(rows(1000))
    table.append(rows(500, start=1000))
    return catalog, table


def sorted_by_id(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def test_scan_matches_pyiceberg_for_expression_and_string_filters(lake):
    catalog, table = lake
    s = Session.for_catalog(catalog)
    for flt in [
        And(GreaterThanOrEqual("id", 100), LessThan("id", 1200)),
        Not(In("name", {"n1", "n2"})),
        IsNull("name"),
        "id < 50 or name = 'n3'",
        EqualTo("name", "it's"),
    ]:
        want = sorted_by_id(table.scan(row_filter=flt).to_arrow())
        got = sorted_by_id(s.scan(table, row_filter=flt).read_all())
        assert got.column("id").to_pylist() == want.column("id").to_pylist(), flt
        assert got.column("name").to_pylist() == want.column("name").to_pylist(), flt
    got = s.scan(table, selected_fields=("id", "v"), limit=7).read_all()
    assert got.column_names == ["id", "v"] and got.num_rows == 7
    with pytest.raises(InvalidInput):
        s.scan(table, row_filter="id <<< 3")
    with pytest.raises(TableNotFound):
        s.scan("db.nope")


def test_merge_on_read_delete_is_read_back_by_pyiceberg(lake):
    catalog, table = lake
    s = Session.for_catalog(catalog, memory_limit="32MiB")
    before = table.current_snapshot().snapshot_id
    assert s.delete(table, "id >= 100 and id < 300") == 200
    table = catalog.load_table("db.t")
    snap = table.current_snapshot()
    assert snap.snapshot_id != before
    assert snap.summary.get("added-position-delete-files") or snap.summary.get("added-delete-files")
    got = table.scan().to_arrow()
    assert got.num_rows == 1300
    assert pc.sum(pc.and_(pc.greater_equal(got["id"], 100), pc.less(got["id"], 300))).as_py() in (0, None)
    # Time travel to before the delete sees every row.
    assert s.scan(table, snapshot_id=before).read_all().num_rows == 1500
    assert s.reserved_memory == 0


def test_append_streams_python_data_into_the_table(lake):
    catalog, table = lake
    s = Session.for_catalog(catalog)
    reader = pa.RecordBatchReader.from_batches(SCHEMA.as_arrow(), rows(300, start=5000).to_batches(max_chunksize=64))
    assert s.append(table, reader) == 300
    table = catalog.load_table("db.t")
    assert table.scan(row_filter="id >= 5000").to_arrow().num_rows == 300


def test_upsert_does_what_pyiceberg_upsert_does(lake, tmp_path):
    catalog, table = lake
    # The same table twice: pyiceberg upserts into one, the engine into the other.
    twin = catalog.create_table("db.twin", schema=SCHEMA)
    twin.append(table.scan().to_arrow())
    changes = rows(40, start=1480)  # 20 existing keys (1480..1499), 20 new
    changes = changes.set_column(2, "v", pa.array([7 if i % 2 else i * 10 for i in range(1480, 1520)], pa.int64()))
    want = twin.upsert(changes)
    got = Session.for_catalog(catalog).upsert(table, changes)
    assert isinstance(got, UpsertResult)
    assert (got.rows_updated, got.rows_inserted) == (want.rows_updated, want.rows_inserted)
    a = sorted_by_id(catalog.load_table("db.t").scan().to_arrow())
    b = sorted_by_id(catalog.load_table("db.twin").scan().to_arrow())
    assert a.column("id").to_pylist() == b.column("id").to_pylist()
    assert a.column("v").to_pylist() == b.column("v").to_pylist()
    assert a.column("name").to_pylist() == b.column("name").to_pylist()


def test_upsert_refuses_duplicate_keys_and_changes_nothing(lake):
    catalog, table = lake
    s = Session.for_catalog(catalog)
    dup = pa.concat_tables([rows(2, start=10), rows(1, start=10)])
    snapshot = table.current_snapshot().snapshot_id
    with pytest.raises(ValueError, match="Duplicate rows"):
        s.upsert(table, dup)
    assert catalog.load_table("db.t").current_snapshot().snapshot_id == snapshot
    # NULL keys never match: such rows are inserted (here: a key column that may be NULL).
    s.sql("CREATE TABLE db.nullable (k BIGINT, v BIGINT)")
    s.sql("INSERT INTO db.nullable VALUES (1, 1), (NULL, 2)")
    res = s.upsert("db.nullable", pa.table({"k": pa.array([None, 1], pa.int64()), "v": [3, 4]}), join_cols=["k"])
    assert (res.rows_updated, res.rows_inserted) == (1, 1)
    got = s.sql("SELECT k, v FROM db.nullable ORDER BY v").to_arrow().to_pylist()
    assert got == [{"k": None, "v": 2}, {"k": None, "v": 3}, {"k": 1, "v": 4}]


def test_upsert_of_columns_named_like_the_statement_aliases(lake):
    catalog, _ = lake
    s = Session.for_catalog(catalog)
    s.sql("CREATE TABLE db.aliases (t BIGINT, s VARCHAR, s_1 BIGINT)")
    s.sql("INSERT INTO db.aliases VALUES (1, 'a', 10), (2, 'b', 20)")
    df = pa.table({"t": pa.array([2, 3], pa.int64()), "s": ["B", "c"], "s_1": pa.array([20, 30], pa.int64())})
    res = s.upsert("db.aliases", df, join_cols=["t"])
    assert (res.rows_updated, res.rows_inserted) == (1, 1)
    got = s.sql("SELECT t, s, s_1 FROM db.aliases ORDER BY t").to_arrow().to_pylist()
    assert got == [{"t": 1, "s": "a", "s_1": 10}, {"t": 2, "s": "B", "s_1": 20}, {"t": 3, "s": "c", "s_1": 30}]


def test_tables_of_other_catalogs_go_through_their_own_catalogs_or_are_read_only(lake, tmp_path):
    catalog, table = lake
    # A second catalog the session is not on, holding a table of the same name with other rows,
    # and a delete pyiceberg made (a rewrite: the first snapshot still has every row).
    other_wh = tmp_path / "other"
    other_wh.mkdir()
    other = SqlCatalog("other", uri=f"sqlite:///{other_wh}/catalog.db", warehouse=f"file://{other_wh}")
    other.create_namespace("db")
    foreign = other.create_table("db.t", schema=SCHEMA)
    foreign.append(rows(100, start=7000))
    first = foreign.current_snapshot().snapshot_id
    foreign.delete("id < 7010")
    foreign = other.load_table("db.t")

    s = Session.for_catalog(catalog)
    got = sorted_by_id(s.scan(foreign).read_all())
    assert got.column("id").to_pylist() == list(range(7010, 7100))
    assert s.scan(foreign, row_filter="id >= 7090", selected_fields=("id",)).read_all().num_rows == 10
    assert s.scan(foreign, snapshot_id=first).read_all().num_rows == 100
    # The session's own db.t (same name, other UUID) is untouched by any of it.
    assert s.sql("SELECT count(*) AS n FROM db.t").to_arrow().column("n")[0].as_py() == 1500
    # Writes go through the table's own (SQL) catalog, which pyiceberg then reads.
    assert s.delete(foreign, "id >= 7090") == 10
    assert s.append(foreign, rows(5, start=8000)) == 5
    assert other.load_table("db.t").scan().to_arrow().num_rows == 85
    assert s.sql("SELECT count(*) AS n FROM db.t").to_arrow().column("n")[0].as_py() == 1500

    # A StaticTable (a metadata file, no catalog) is read from its file, and only read.
    from pyiceberg.table import StaticTable

    static = StaticTable.from_metadata(foreign.metadata_location)
    assert sorted_by_id(s.scan(static).read_all()).column("id").to_pylist() == list(range(7010, 7100))
    datafusion = pytest.importorskip("datafusion")
    ctx = datafusion.SessionContext()
    ctx.register_table("static", s.table_provider(static))
    assert ctx.sql("SELECT count(*) AS n FROM static").to_arrow_table().to_pylist() == [{"n": 90}]
    snapshot = other.load_table("db.t").current_snapshot().snapshot_id
    for write in (
        lambda: s.delete(static, "id > 7050"),
        lambda: s.append(static, rows(1, start=9000)),
        lambda: s.upsert(static, rows(1, start=9000)),
        lambda: s.rewrite_data_files(static),
    ):
        with pytest.raises(InvalidInput, match="read-only here"):
            write()
    assert other.load_table("db.t").current_snapshot().snapshot_id == snapshot
    assert s.reserved_memory == 0


def test_compaction_folds_the_deletes_in(lake):
    catalog, table = lake
    s = Session.for_catalog(catalog)
    s.delete(table, "id < 10")
    out = s.rewrite_data_files(table, delete_file_threshold=1)
    assert out["rewritten_data_files_count"] >= 1
    table = catalog.load_table("db.t")
    assert table.scan().to_arrow().num_rows == 1490
    assert table.inspect.delete_files().num_rows == 0


def test_equality_deletes_as_flink_writes_them_read_right_where_pyiceberg_raises(lake):
    from flink_like import upsert_with_equality_deletes

    catalog, table = lake
    # New versions of keys 10..29 (v = -id), committed with an equality delete of those keys.
    new = rows(20, start=10)
    new = new.set_column(2, "v", pa.array([-i for i in range(10, 30)], pa.int64()))
    upsert_with_equality_deletes(catalog, "db.t", new, "id")
    table = catalog.load_table("db.t")
    with pytest.raises(Exception) as refused:
        table.scan().to_arrow()  # pyiceberg 0.12 refuses equality deletes
    assert "equality" in str(refused.value).lower(), refused.value
    # The oracle: the rows before, the old versions of the keys replaced by the new ones.
    old = rows(1000).to_pylist() + rows(500, start=1000).to_pylist()
    want = {r["id"]: r["v"] for r in old}
    want.update({i: -i for i in range(10, 30)})
    s = Session.for_catalog(catalog, memory_limit="32MiB")
    got = s.scan(table).read_all()
    assert got.num_rows == 1500
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) == want
    n = s.sql('SELECT count(*) AS n, sum(v) AS v FROM db.t WHERE id BETWEEN 10 AND 29').to_arrow().to_pylist()
    assert n == [{"n": 20, "v": -sum(range(10, 30))}]
    assert s.reserved_memory == 0
    # datafusion-python, through the session's catalog, reads the same rows.
    datafusion = pytest.importorskip("datafusion")
    ctx = datafusion.SessionContext()
    ctx.register_catalog_provider("lake", s.catalog_provider())
    got = ctx.sql("SELECT id, v FROM lake.db.t").to_arrow_table()
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) == want


def test_overwrite_does_what_pyiceberg_overwrite_does(lake):
    catalog, table = lake
    # The same table twice: pyiceberg overwrites one, the engine the other.
    twin = catalog.create_table("db.twin", schema=SCHEMA)
    twin.append(table.scan().to_arrow())
    new = rows(30, start=200)
    flt = And(GreaterThanOrEqual("id", 200), LessThan("id", 260))
    twin.overwrite(new, overwrite_filter=flt)
    s = Session.for_catalog(catalog, memory_limit="32MiB")
    assert s.overwrite(table, new, overwrite_filter=flt) == 30
    a = sorted_by_id(catalog.load_table("db.t").scan().to_arrow())
    b = sorted_by_id(catalog.load_table("db.twin").scan().to_arrow())
    assert a.num_rows == 1500 - 60 + 30
    for c in ("id", "name", "v"):
        assert a.column(c).to_pylist() == b.column(c).to_pylist(), c
    snap = catalog.load_table("db.t").current_snapshot()
    assert snap.summary.operation.value == "overwrite"

    # A row outside the filter: refused, nothing changes.
    with pytest.raises(Exception, match="does not match the overwrite filter"):
        s.overwrite(table, rows(2, start=0), overwrite_filter="id >= 9000")
    assert catalog.load_table("db.t").current_snapshot().snapshot_id == snap.snapshot_id

    # The default filter: every row.
    assert s.overwrite(table, rows(5, start=9000)) == 5
    assert catalog.load_table("db.t").scan().to_arrow().column("id").to_pylist() == list(range(9000, 9005))


def test_dynamic_partition_overwrite_does_what_pyiceberg_does(tmp_path):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    wh = tmp_path / "wh"
    wh.mkdir()
    catalog = SqlCatalog("lake", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    catalog.create_namespace("db")
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="name"))
    ours = catalog.create_table("db.t", schema=SCHEMA, partition_spec=spec)
    theirs = catalog.create_table("db.twin", schema=SCHEMA, partition_spec=spec)
    for t in (ours, theirs):
        t.append(rows(400))
    # New rows in a few partitions, the NULL one among them.
    new = rows(400, start=1000)
    new = new.filter(pc.or_kleene(pc.is_null(new.column("name")), pc.is_in(new.column("name"), pa.array(["n1", "n2"]))))
    assert new.num_rows > 0
    theirs.dynamic_partition_overwrite(new)
    s = Session.for_catalog(catalog)
    assert s.dynamic_partition_overwrite(ours, new) == new.num_rows
    a = sorted_by_id(catalog.load_table("db.t").scan().to_arrow())
    b = sorted_by_id(catalog.load_table("db.twin").scan().to_arrow())
    for c in ("id", "name", "v"):
        assert a.column(c).to_pylist() == b.column(c).to_pylist(), c
    summary = catalog.load_table("db.t").current_snapshot().summary
    assert summary.operation.value == "overwrite" and summary["replace-partitions"] == "true"


def test_branches_audited_and_published_alike_in_pyiceberg(lake):
    """Write-audit-publish from Python: a branch written through the session, read by pyiceberg at
    the branch, main untouched until fast_forward publishes it."""
    catalog, table = lake
    s = Session.for_catalog(catalog)
    s.sql("ALTER TABLE db.t CREATE BRANCH audit")
    s.sql("DELETE FROM db.t.branch_audit WHERE id < 100")
    audited = s.sql("SELECT count(*) AS n FROM db.t VERSION AS OF 'audit'").to_arrow()
    assert audited.column("n").to_pylist() == [1400]
    table = catalog.load_table("db.t")
    at_branch = table.scan(snapshot_id=table.snapshot_by_name("audit").snapshot_id).to_arrow()
    assert at_branch.num_rows == 1400
    assert table.scan().to_arrow().num_rows == 1500
    s.sql("CALL system.fast_forward('db.t', 'main', 'audit')")
    assert catalog.load_table("db.t").scan().to_arrow().num_rows == 1400
    files = s.sql("SELECT count(*) AS n FROM db.t.files WHERE content = 1").to_arrow()
    assert files.column("n").to_pylist()[0] >= 1
