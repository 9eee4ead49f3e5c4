"""The user guide's Python examples (docs/python.md) run as written: against a catalog named
`lake` in a pyiceberg configuration (a SQLite catalog in a temporary directory) that holds the
table `db.events` they use."""

import pathlib
import re

import pyarrow as pa

from iceberg_exec import Session

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def python_blocks():
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), re.S | re.M)


def test_the_guides_python_examples_run_as_written(tmp_path, monkeypatch):
    wh = tmp_path / "wh"
    wh.mkdir()
    # Only this configuration: no ~/.pyiceberg.yaml of the machine's.
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    (tmp_path / ".pyiceberg.yaml").write_text(
        f"catalog:\n  lake:\n    uri: sqlite:///{wh}/catalog.db\n    warehouse: file://{wh}\n"
    )
    setup = Session("lake")
    setup.sql("CREATE SCHEMA db")
    setup.sql("CREATE TABLE db.events AS SELECT value AS id FROM generate_series(1, 200)")

    blocks = python_blocks()
    assert blocks, "no python block in docs/python.md"
    scope = {}
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), scope)

    # The example deleted the rows with id < 100 and left a streaming reader of the rest.
    reader = scope["reader"]
    assert isinstance(reader, pa.RecordBatchReader)
    assert sorted(reader.read_all().column("id").to_pylist()) == list(range(100, 201))
    again = Session("lake").sql("SELECT count(*) AS n FROM db.events").to_arrow()
    assert again.column("n").to_pylist() == [101]
