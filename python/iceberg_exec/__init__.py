"""iceberg-exec for Python: Apache Iceberg tables on Apache DataFusion, in bounded memory.

    from iceberg_exec import Session

    s = Session("lake", memory_limit="1GiB")       # a catalog of your .pyiceberg.yaml
    s.sql("DELETE FROM db.events WHERE id < 100")   # merge-on-read when the table says so
    reader = s.sql("SELECT * FROM db.events").to_reader()   # pyarrow.RecordBatchReader, streamed

Results cross to pyarrow, polars, pandas and DuckDB through the Arrow PyCapsule interface
(`__arrow_c_stream__`), without copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from . import _native
from .errors import CommitConflict, IcebergExecError, InvalidInput, TableNotFound

if TYPE_CHECKING:
    import pandas
    import polars
    import pyarrow

__all__ = [
    "Session",
    "Result",
    "IcebergExecError",
    "CommitConflict",
    "TableNotFound",
    "InvalidInput",
    "__version__",
]

__version__: str = _native.__version__


class Result:
    """What a statement gives back. A query runs when its rows are read (each read runs it
    again, on the same table snapshot); a statement that changed something (DML, DDL, CALL)
    has run already and holds the rows it returned (e.g. the count of rows changed)."""

    def __init__(self, native: "_native.Result") -> None:
        self._native = native

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The rows as an Arrow C stream capsule (the Arrow PyCapsule interface)."""
        return self._native.__arrow_c_stream__(requested_schema)

    def to_reader(self) -> "pyarrow.RecordBatchReader":
        """The rows as a `pyarrow.RecordBatchReader` that streams: memory is bounded by the
        session's pool, not by the size of the result."""
        import pyarrow as pa

        return pa.RecordBatchReader.from_stream(self._native)

    def to_arrow(self) -> "pyarrow.Table":
        """All rows as a `pyarrow.Table`."""
        return self.to_reader().read_all()

    def to_pandas(self, **kwargs: Any) -> "pandas.DataFrame":
        """All rows as a pandas DataFrame (through pyarrow; `kwargs` go to `to_pandas`)."""
        return self.to_arrow().to_pandas(**kwargs)

    def to_polars(self) -> "polars.DataFrame":
        """All rows as a polars DataFrame (polars must be installed)."""
        try:
            import polars as pl
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("to_polars() needs polars: pip install polars") from e
        return pl.from_arrow(self.to_arrow())

    def explain(self, analyze: bool = False) -> str:
        """The query's plan as text; with `analyze`, run it and show what each operator did."""
        return self._native.explain(analyze)

    @property
    def column_names(self) -> list[str]:
        """The result's column names."""
        return self._native.column_names

    @property
    def executed(self) -> bool:
        """Whether the statement has run already (it changed something)."""
        return self._native.executed

    def __repr__(self) -> str:
        return repr(self._native)


class Session:
    """A session on one Iceberg catalog.

    `catalog` names a catalog of pyiceberg's configuration (`.pyiceberg.yaml` in
    `$PYICEBERG_HOME` or the home directory, and `PYICEBERG_CATALOG__<NAME>__<KEY>` variables);
    its `uri` picks a REST (`http(s)://`) or SQL (`sqlite://`, `postgresql://`) catalog. Or give
    `uri` and `warehouse` directly; with neither, the embedded SQLite warehouse `./warehouse`.
    `properties` (Iceberg's names: `s3.endpoint`, `s3.access-key-id`, ...) override the
    configuration's. `memory_limit` (bytes, or text such as `"512MiB"`) bounds what statements
    hold in memory, spilling beyond it; by default the `execution: memory-limit` of
    `.pyiceberg.yaml`, else unbounded.
    """

    def __init__(
        self,
        catalog: str | None = None,
        *,
        uri: str | None = None,
        warehouse: str | None = None,
        properties: Mapping[str, str] | None = None,
        memory_limit: int | str | None = None,
    ) -> None:
        self._native = _native.Session(
            catalog,
            uri=uri,
            warehouse=warehouse,
            properties=dict(properties) if properties is not None else None,
            memory_limit=memory_limit,
        )

    def sql(self, query: str) -> Result:
        """Runs any statement the engine runs: SELECT, INSERT, DELETE, UPDATE, MERGE, DDL, CALL."""
        return Result(self._native.sql(query))

    def register_arrow(self, name: str, data: object, *, once: bool = True) -> str:
        """Makes `data` (a pyarrow Table or RecordBatchReader, or anything with
        `__arrow_c_stream__`) readable by statements as `python.input.<name>`; returns that
        name. With `once`, a stream read once, when a statement scans it; else read now and
        kept, for statements that scan it more than once."""
        self._native.register_arrow(name, data, once)
        return f"python.input.{name}"

    def deregister_arrow(self, name: str) -> None:
        """Forgets the input `name`."""
        self._native.deregister_arrow(name)

    @property
    def reserved_memory(self) -> int:
        """Bytes the memory pool holds now (0 between statements)."""
        return self._native.reserved_memory()

    @property
    def catalog_name(self) -> str:
        """The catalog's name."""
        return self._native.catalog_name

    def __repr__(self) -> str:
        return repr(self._native)
