"""datafusion-python (the `datafusion` package, DataFusion 55) reads and appends to Iceberg
tables through the session's catalog and table providers, across its FFI."""

import pyarrow as pa
import pytest

datafusion = pytest.importorskip("datafusion")

from iceberg_exec import Session  # noqa: E402


@pytest.fixture()
def session(tmp_path):
    s = Session(warehouse=str(tmp_path / "wh"))
    s.sql("CREATE SCHEMA db")
    s.sql("CREATE TABLE db.orders (id BIGINT, customer BIGINT, amount DOUBLE)")
    s.sql("CREATE TABLE db.customers (id BIGINT, name VARCHAR)")
    s.sql("INSERT INTO db.customers VALUES (1, 'ann'), (2, 'bob'), (3, 'cy')")
    s.sql("INSERT INTO db.orders VALUES (10, 1, 5.0), (11, 1, 7.5), (12, 2, 1.0), (13, 9, 2.0)")
    # A merge-on-read delete: datafusion-python reads through the engine's delete join, which
    # its own optimizer must not take apart.
    s.sql("ALTER TABLE db.orders SET TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
    s.sql("DELETE FROM db.orders WHERE id = 12")
    return s


def test_register_the_catalog_join_two_tables_and_insert(session):
    ctx = datafusion.SessionContext()
    ctx.register_catalog_provider("lake", session.catalog_provider())
    got = ctx.sql(
        "SELECT c.name, sum(o.amount) AS total FROM lake.db.orders o JOIN lake.db.customers c "
        "ON o.customer = c.id GROUP BY c.name ORDER BY c.name"
    ).to_arrow_table()
    assert got.to_pylist() == [{"name": "ann", "total": 12.5}]
    ctx.sql("INSERT INTO lake.db.orders VALUES (14, 3, 4.0)").collect()
    # The engine's own session sees the row datafusion-python committed.
    back = session.sql("SELECT id FROM db.orders ORDER BY id").to_arrow().column("id").to_pylist()
    assert back == [10, 11, 13, 14]


def test_plans_run_in_the_sessions_memory_pool(tmp_path):
    s = Session(warehouse=str(tmp_path / "wh"), memory_limit="64MiB")
    s.sql("CREATE SCHEMA db")
    s.sql("CREATE TABLE db.big (id BIGINT, v VARCHAR)")
    s.sql("INSERT INTO db.big SELECT value, 'x' || value FROM generate_series(1, 200000)")
    s.sql("ALTER TABLE db.big SET TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')")
    s.sql("DELETE FROM db.big WHERE id % 3 = 0")
    ctx = datafusion.SessionContext()
    ctx.register_catalog_provider("lake", s.catalog_provider())
    # One node for the engine's plan: the receiver's optimizer leaves the delete join whole.
    shown = ctx.sql("SELECT id FROM lake.db.big").execution_plan().display_indent()
    assert "IcebergExec, number_of_children=0" in shown, shown
    stream = iter(ctx.sql("SELECT id FROM lake.db.big").execute_stream())
    first = next(stream)
    # Mid-stream, the delete join holds its reservation in the session's pool, not in a
    # default pool of the receiver's.
    assert s.reserved_memory > 0
    rows = first.to_pyarrow().num_rows + sum(b.to_pyarrow().num_rows for b in stream)
    assert rows == 200000 - 200000 // 3
    assert s.reserved_memory == 0


def test_register_one_table(session):
    ctx = datafusion.SessionContext()
    ctx.register_table("orders", session.table_provider("db.orders"))
    got = ctx.sql("SELECT count(*) AS n, sum(amount) AS s FROM orders WHERE amount > 1").to_arrow_table()
    assert got.to_pylist() == [{"n": 3, "s": 14.5}]


def test_another_datafusion_major_is_refused(session, monkeypatch):
    monkeypatch.setattr(datafusion, "__version__", "54.1.0")
    with pytest.raises(ImportError, match="DataFusion 55"):
        session.catalog_provider()
    with pytest.raises(ImportError, match="install datafusion 55"):
        session.table_provider("db.orders")


def test_the_capsule_is_checked(session):
    export = session.catalog_provider()
    with pytest.raises((ValueError, TypeError)):
        export.__datafusion_catalog_provider__(pa.table({"a": [1]}))
