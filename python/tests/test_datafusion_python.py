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
