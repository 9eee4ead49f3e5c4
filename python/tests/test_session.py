"""The Session and its results, on a real embedded warehouse (SQLite catalog, local files)."""

import os

import pyarrow as pa
import pytest

from iceberg_exec import CommitConflict, IcebergExecError, InvalidInput, Result, Session, TableNotFound


@pytest.fixture()
def session(tmp_path):
    s = Session(warehouse=str(tmp_path / "wh"))
    s.sql("CREATE SCHEMA db")
    s.sql("CREATE TABLE db.t (id BIGINT NOT NULL, name VARCHAR, price DOUBLE)")
    s.sql("INSERT INTO db.t VALUES (1, 'a', 1.5), (2, 'b', 2.5), (3, NULL, 3.5)")
    return s


def test_a_query_streams_to_pyarrow_and_reads_the_table(session):
    res = session.sql("SELECT id, name, price FROM db.t ORDER BY id")
    assert isinstance(res, Result)
    assert not res.executed
    assert res.column_names == ["id", "name", "price"]
    reader = res.to_reader()
    assert isinstance(reader, pa.RecordBatchReader)
    table = reader.read_all()
    assert table.column("id").to_pylist() == [1, 2, 3]
    assert table.column("name").to_pylist() == ["a", "b", None]
    # Read again: the query runs again on the same snapshot, with the same rows.
    assert res.to_arrow().column("price").to_pylist() == [1.5, 2.5, 3.5]
    # Strings come as pyiceberg hands them, cast inside the plan (beside the scan), not batch
    # by batch on the reading thread.
    assert table.schema.field("name").type == pa.large_string()
    assert "CAST(" in res.explain() and "LargeUtf8" in res.explain()


def test_a_reader_dropped_half_way_stops_its_query(tmp_path):
    s = Session(warehouse=str(tmp_path / "wh"), memory_limit="64MiB")
    s.sql("CREATE SCHEMA db")
    s.sql("CREATE TABLE db.big AS SELECT value AS id, concat('s', value) AS s FROM generate_series(1, 400000)")
    reader = s.sql("SELECT id, s FROM db.big ORDER BY s DESC").to_reader()
    first = reader.read_next_batch()
    assert first.num_rows > 0 and first.schema.field("s").type == pa.large_string()
    del reader
    # The query's task ran ahead of the reader; dropped, it gives its memory back.
    import time

    for _ in range(100):
        if s.reserved_memory == 0:
            break
        time.sleep(0.05)
    assert s.reserved_memory == 0


def test_statements_that_change_something_run_at_once(session):
    res = session.sql("DELETE FROM db.t WHERE id = 2")
    assert res.executed
    assert res.to_arrow().column(0).to_pylist() == [1]
    assert session.sql("SELECT count(*) AS n FROM db.t").to_arrow().column("n").to_pylist() == [2]
    with pytest.raises(ValueError, match="has run already"):
        res.explain()


def test_pandas_polars_and_duckdb_read_through_the_capsule(session):
    res = session.sql("SELECT id, name FROM db.t ORDER BY id")
    assert res.to_pandas()["id"].tolist() == [1, 2, 3]
    polars = pytest.importorskip("polars")
    frame = polars.from_arrow(pa.RecordBatchReader.from_stream(res))
    assert frame["id"].to_list() == [1, 2, 3]
    assert res.to_polars()["name"].to_list() == ["a", "b", None]
    duckdb = pytest.importorskip("duckdb")
    arrow_reader = res.to_reader()  # noqa: F841 (read by name below)
    got = duckdb.sql("SELECT sum(id) FROM arrow_reader").fetchone()[0]
    assert got == 6


def test_python_data_is_inserted_through_a_registered_stream(session):
    data = pa.table({"id": pa.array([10, 11], pa.int64()), "name": ["x", "y"], "price": [0.5, 0.25]})
    name = session.register_arrow("rows", data)
    assert name == "python.input.rows"
    assert session.sql(f"INSERT INTO db.t SELECT * FROM {name}").to_arrow().column(0).to_pylist() == [2]
    got = session.sql("SELECT id FROM db.t WHERE id >= 10 ORDER BY id").to_arrow()
    assert got.column("id").to_pylist() == [10, 11]
    # A stream is read once; a second scan says so, and changes nothing.
    with pytest.raises(IcebergExecError, match="read already"):
        session.sql(f"INSERT INTO db.t SELECT * FROM {name}")
    assert session.sql("SELECT count(*) AS n FROM db.t").to_arrow().column("n").to_pylist() == [5]
    # Kept data can be scanned again.
    session.register_arrow("kept", data, once=False)
    for _ in range(2):
        assert session.sql("SELECT count(*) AS n FROM python.input.kept").to_arrow().column("n").to_pylist() == [2]
    session.deregister_arrow("kept")
    with pytest.raises(TableNotFound):
        session.sql("SELECT * FROM python.input.kept")


def test_bad_input_raises_and_changes_nothing(session, tmp_path):
    with pytest.raises(TableNotFound) as e:
        session.sql("SELECT * FROM db.missing")
    assert isinstance(e.value, KeyError)
    assert "missing" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InvalidInput) as e:
        session.sql("DELETE FROM db.t WHERE no_such_column = 1")
    assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError):
        session.sql("SELEC 1")
    assert session.sql("SELECT count(*) AS n FROM db.t").to_arrow().column("n").to_pylist() == [3]
    with pytest.raises(ValueError, match="memory"):
        Session(warehouse=str(tmp_path / "other"), memory_limit="lots")
    with pytest.raises(ValueError, match="positive"):
        Session(warehouse=str(tmp_path / "other"), memory_limit=-1)
    with pytest.raises(ValueError):
        session.register_arrow("../escape", pa.table({"a": [1]}))
    with pytest.raises(ValueError, match="PyCapsule"):
        session.register_arrow("x", object())
    assert not os.path.exists(tmp_path / "other" / "catalog.db")


def test_explain_shows_the_iceberg_scan(session):
    text = session.sql("SELECT * FROM db.t WHERE id > 1").explain()
    assert "IcebergScanExec" in text
    analyzed = session.sql("SELECT * FROM db.t WHERE id > 1").explain(analyze=True)
    assert "output_rows" in analyzed


def test_a_memory_limit_bounds_the_session_and_is_released(tmp_path):
    s = Session(warehouse=str(tmp_path / "wh"), memory_limit="64MiB")
    s.sql("CREATE SCHEMA db")
    s.sql("CREATE TABLE db.big AS SELECT value AS id, value % 97 AS k FROM range(0, 2000000)")
    got = s.sql("SELECT k, count(*) AS n FROM db.big GROUP BY k ORDER BY k").to_arrow()
    assert got.num_rows == 97 and sum(got.column("n").to_pylist()) == 2_000_000
    assert s.reserved_memory == 0


def test_the_exceptions_form_a_hierarchy():
    assert issubclass(CommitConflict, IcebergExecError)
    assert issubclass(TableNotFound, KeyError)
    assert issubclass(InvalidInput, ValueError)
