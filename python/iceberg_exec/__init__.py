"""iceberg-exec for Python: Apache Iceberg tables on Apache DataFusion, in bounded memory.

    from iceberg_exec import Session

    s = Session("lake", memory_limit="1GiB")       # a catalog of your .pyiceberg.yaml
    s.sql("DELETE FROM db.events WHERE id < 100")   # merge-on-read when the table says so
    reader = s.sql("SELECT * FROM db.events").to_reader()   # pyarrow.RecordBatchReader, streamed

Results cross to pyarrow, polars, pandas and DuckDB through the Arrow PyCapsule interface
(`__arrow_c_stream__`), without copies.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from . import _native
from .errors import CommitConflict, IcebergExecError, InvalidInput, TableNotFound
from .expressions import column, literal, quote, to_sql

if TYPE_CHECKING:
    import pandas
    import polars
    import pyarrow

__all__ = [
    "Session",
    "Result",
    "UpsertResult",
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


@dataclass(frozen=True)
class UpsertResult:
    """What `Session.upsert` did, as pyiceberg's `UpsertResult` says it."""

    rows_updated: int = 0
    rows_inserted: int = 0


_inputs = itertools.count()


def _is_pyiceberg_table(table: Any) -> bool:
    return hasattr(table, "metadata_location") and hasattr(table, "metadata") and callable(getattr(table, "name", None))


def _alias(base: str, columns: Sequence[str]) -> str:
    """`base`, or `base_1`, `base_2`, ...: the first that is no column's name (any case)."""
    taken = {c.lower() for c in columns}
    for n in itertools.count():
        name = base if n == 0 else f"{base}_{n}"
        if name not in taken:
            return name
    raise AssertionError("unreachable")


def _check_datafusion() -> None:
    """Refuses a datafusion-python of another DataFusion major: structures passed across the FFI
    differ between majors, and mixing them crashes."""
    try:
        import datafusion
    except ImportError as e:
        raise ImportError(f"datafusion-python is not installed: pip install 'datafusion=={_native.DATAFUSION_MAJOR}.*'") from e
    version = getattr(datafusion, "__version__", "0")
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else -1
    if major != _native.DATAFUSION_MAJOR:
        raise ImportError(
            f"datafusion {version} is installed; iceberg-exec is built on DataFusion {_native.DATAFUSION_MAJOR}: "
            f"install datafusion {_native.DATAFUSION_MAJOR}.x"
        )


class Session:
    """A session on one Iceberg catalog.

    `catalog` names a catalog of pyiceberg's configuration (`.pyiceberg.yaml` in
    `$PYICEBERG_HOME` or the home directory, and `PYICEBERG_CATALOG__<NAME>__<KEY>` variables);
    its `uri` picks a REST (`http(s)://`) or SQL (`sqlite://`, `postgresql://`) catalog. Or give
    `uri` and `warehouse` directly; with neither, the embedded SQLite warehouse `./warehouse`.
    `properties` (Iceberg's names: `s3.endpoint`, `s3.access-key-id`, ...) override the
    configuration's. `memory_limit` (bytes, or text such as `"512MiB"`) bounds what statements
    hold in memory, spilling beyond it; by default the `execution: memory-limit` of
    `.pyiceberg.yaml`, else unbounded. `catalog_name` is the catalog's name in its database
    (pyiceberg's SqlCatalog name; `default` unless chosen by pyiceberg's configuration).

    The verbs (`scan`, `delete`, `append`, `overwrite`, `dynamic_partition_overwrite`, `upsert`,
    maintenance) take a table as pyiceberg
    names it: a pyiceberg `Table`, an identifier tuple, or `"ns.table"`. A pyiceberg `Table` is
    read and changed through its own catalog: this session's (same name, same table UUID), or
    another SQL or REST catalog, opened on first use with this session's memory limit. A table
    of any other catalog (Glue, Hive, a `StaticTable`, ...) is read from its metadata file with
    its FileIO properties, and writes to it are refused.
    """

    @classmethod
    def for_catalog(cls, catalog: Any, *, memory_limit: int | str | None = None) -> "Session":
        """A session on the catalog of a pyiceberg `Catalog` (SQL or REST): same database or
        server, same name, same properties, so commits go through it."""
        props = dict(catalog.properties)
        uri = props.pop("uri", None)
        if uri is None:
            raise InvalidInput(f"catalog '{catalog.name}' has no uri: only SQL and REST catalogs can be opened")
        scheme, _, rest = uri.partition(":")
        if "+" in scheme:  # SQLAlchemy's driver suffix: sqlite+pysqlite, postgresql+psycopg2
            uri = scheme.split("+", 1)[0] + ":" + rest
        warehouse = props.pop("warehouse", None)
        if warehouse is not None and warehouse.startswith("file://"):
            warehouse = warehouse.removeprefix("file://")
        return cls(uri=uri, warehouse=warehouse, properties=props, memory_limit=memory_limit,
                   catalog_name=catalog.name)

    @staticmethod
    def _name(table: Any) -> str:
        if isinstance(table, str):
            parts = table.split(".")
        elif isinstance(table, (tuple, list)):
            parts = list(table)
        elif hasattr(table, "name") and callable(table.name):
            parts = list(table.name())  # a pyiceberg Table: its identifier
        else:
            raise InvalidInput(f"not a table: {table!r} (a pyiceberg Table, an identifier tuple or 'ns.table')")
        if not parts or any(not p for p in parts):
            raise InvalidInput(f"not a table name: {table!r}")
        return ".".join(quote(p) for p in parts)

    def _holds(self, table: Any) -> bool:
        """Whether this session's catalog holds the pyiceberg `Table` (same name, same UUID)."""
        ident = [str(p) for p in table.name()]
        try:
            uuid = self._native.table_uuid(ident)
        except TableNotFound:  # e.g. a namespace the catalog does not have
            return False
        return uuid == str(table.metadata.table_uuid)

    def _resolve(self, table: Any, *, write: bool) -> "tuple[Session, str | None]":
        """The session that holds `table` and its SQL name there, each catalog asked once: this
        session; for a pyiceberg `Table` of another SQL or REST catalog, a session opened on
        that catalog (kept, same memory limit). `(self, None)` for a pyiceberg `Table` no such
        catalog holds, which is read from its metadata file; writes to it are refused."""
        if not _is_pyiceberg_table(table) or self._holds(table):
            return self, self._name(table)
        catalog = getattr(table, "catalog", None)
        uri = str(dict(getattr(catalog, "properties", {}) or {}).get("uri", ""))
        if uri.split(":", 1)[0].split("+", 1)[0] in ("sqlite", "postgresql", "http", "https"):
            key = (str(catalog.name), uri)
            other = self._others.get(key)
            if other is None:
                other = Session.for_catalog(catalog, memory_limit=self._memory_limit)
                self._others[key] = other
            if other._holds(table):
                return other, other._name(table)
        if write:
            raise InvalidInput(
                f"table {'.'.join(str(p) for p in table.name())} is read-only here: its catalog is neither "
                f"this session's ('{self.catalog_name}') nor a SQL or REST catalog")
        return self, None

    @staticmethod
    def _file_io(table: Any) -> dict:
        """A pyiceberg `Table`'s FileIO properties, as text."""
        props = dict(getattr(table.io, "properties", {}) or {})
        return {str(k): str(v) for k, v in props.items() if isinstance(v, (str, int, float, bool))}

    def _count(self, query: str) -> int:
        """The number the statement `query` answers with (a count, or the rows it changed)."""
        got = self.sql(query).to_arrow()
        return int(got.column(0)[0].as_py() or 0) if got.num_rows else 0

    def scan(
        self,
        table: Any,
        row_filter: Any = "",
        selected_fields: Sequence[str] = ("*",),
        snapshot_id: int | None = None,
        limit: int | None = None,
    ) -> "pyarrow.RecordBatchReader":
        """pyiceberg's `Table.scan(...).to_arrow_batch_reader()`, by this engine: deletes of every
        kind applied, streamed in bounded memory. `row_filter` is a pyiceberg
        `BooleanExpression` or its string form."""
        session, source = self._resolve(table, write=False)
        read_only = None
        if source is None:
            read_only = f"table_{next(_inputs)}"
            source = f"python.readonly.{read_only}"
        elif snapshot_id is not None:
            plain = source.replace('"', "")
            source = f"iceberg_scan({literal(plain)}, 'snapshot_id', {int(snapshot_id)})"
        fields = "*" if tuple(selected_fields) == ("*",) else ", ".join(column(f) for f in selected_fields)
        query = f"SELECT {fields} FROM {source}"
        if row_filter not in ("", None):
            query += f" WHERE {to_sql(row_filter)}"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        if read_only is None:
            return session.sql(query).to_reader()
        pin = None if snapshot_id is None else int(snapshot_id)
        native = self._native.sql_on_metadata(query, read_only, table.metadata_location, self._file_io(table), pin)
        return Result(native).to_reader()

    def delete(self, table: Any, delete_filter: Any) -> int:
        """pyiceberg's `Table.delete(delete_filter)`: in the table's write mode
        (`write.delete.mode`, merge-on-read or copy-on-write). Returns the rows deleted."""
        session, target = self._resolve(table, write=True)
        return session._count(f"DELETE FROM {target} WHERE {to_sql(delete_filter)}")

    def append(self, table: Any, data: object) -> int:
        """pyiceberg's `Table.append(df)` for any Arrow data (a pyarrow Table or
        RecordBatchReader, a polars frame, ...): read once as a stream and written in bounded
        memory, sorted and partitioned as the table says. Returns the rows written."""
        session, target = self._resolve(table, write=True)
        name = f"append_{next(_inputs)}"
        src = session.register_arrow(name, data)
        try:
            return session._count(f"INSERT INTO {target} SELECT * FROM {src}")
        finally:
            session.deregister_arrow(name)

    def overwrite(self, table: Any, df: object, overwrite_filter: Any = "TRUE") -> int:
        """pyiceberg's `Table.overwrite(df, overwrite_filter)` as one snapshot: the rows
        `overwrite_filter` selects (a pyiceberg `BooleanExpression` or its string form; every
        row by default) are replaced by `df`'s. Files whose every row matches go whole, files
        that match in part are rewritten without the matching rows; a row of `df` outside the
        filter is refused and nothing changes. Returns the rows written."""
        session, target = self._resolve(table, write=True)
        name = f"overwrite_{next(_inputs)}"
        src = session.register_arrow(name, df)
        try:
            condition = "TRUE" if overwrite_filter in ("", None) else to_sql(overwrite_filter)
            return session._count(f"INSERT INTO {target} REPLACE WHERE {condition} SELECT * FROM {src}")
        finally:
            session.deregister_arrow(name)

    def dynamic_partition_overwrite(self, table: Any, df: object) -> int:
        """pyiceberg's `Table.dynamic_partition_overwrite(df)` as one snapshot: the partitions
        (of the table's current spec) that `df`'s rows fall into are replaced by them; an
        unpartitioned table is replaced whole. Returns the rows written."""
        session, target = self._resolve(table, write=True)
        name = f"overwrite_{next(_inputs)}"
        src = session.register_arrow(name, df)
        try:
            return session._native.dynamic_overwrite(target, f"SELECT * FROM {src}")
        finally:
            session.deregister_arrow(name)

    def upsert(self, table: Any, df: object, join_cols: Sequence[str] | None = None) -> UpsertResult:
        """pyiceberg's `Table.upsert(df, join_cols)` as one MERGE (one commit): rows of `df`
        whose keys match a row of the table update it when a column differs, the others are
        inserted. `join_cols` defaults to the table's identifier fields (a pyiceberg Table's
        schema). Duplicate keys in `df` are refused and nothing changes; NULL keys never match.

        The MERGE counts the rows it changed; the inserted ones are counted just before it,
        on the snapshot it starts from."""
        if join_cols is None:
            schema = getattr(table, "schema", None)
            ids = list(schema().identifier_field_names()) if callable(schema) else []
            if not ids:
                raise InvalidInput("upsert: give join_cols (the table has no identifier fields)")
            join_cols = sorted(ids)
        if not join_cols:
            raise InvalidInput("upsert: join_cols is empty")
        session, target = self._resolve(table, write=True)
        return session._upsert(target, df, join_cols)

    def _upsert(self, target: str, df: object, join_cols: Sequence[str]) -> UpsertResult:
        name = f"upsert_{next(_inputs)}"
        src = self.register_arrow(name, df, once=False)
        try:
            cols = self.sql(f"SELECT * FROM {src} LIMIT 0").column_names
            missing = [c for c in join_cols if c not in cols]
            if missing:
                raise InvalidInput(f"upsert: join column(s) {missing} not in the data")
            keys = ", ".join(column(c) for c in join_cols)
            if self._count(f"SELECT count(*) FROM (SELECT {keys} FROM {src} GROUP BY {keys} HAVING count(*) > 1)"):
                raise InvalidInput("Duplicate rows found in source dataset based on the key columns. No upsert executed")
            # Aliases no column is named: in the NOT EXISTS below, a qualifier that is also a
            # column of the inner table would be read as that column (a field access).
            t, s = _alias("t", cols), _alias("s", cols)
            on = " AND ".join(f"{t}.{column(c)} = {s}.{column(c)}" for c in join_cols)
            others = [c for c in cols if c not in join_cols]
            differs = " OR ".join(f"({t}.{column(c)} IS DISTINCT FROM {s}.{column(c)})" for c in others) or "FALSE"
            inserted = self._count(
                f"SELECT count(*) FROM {src} {s} WHERE NOT EXISTS (SELECT 1 FROM {target} {t} WHERE {on})")
            sets = ", ".join(f"{column(c)} = {s}.{column(c)}" for c in others)
            names = ", ".join(column(c) for c in cols)
            values = ", ".join(f"{s}.{column(c)}" for c in cols)
            merge = f"MERGE INTO {target} AS {t} USING {src} AS {s} ON {on} "
            if others:
                merge += f"WHEN MATCHED AND ({differs}) THEN UPDATE SET {sets} "
            merge += f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
            # The MERGE's count is the rows updated plus the rows inserted.
            changed = self._count(merge)
            return UpsertResult(rows_updated=changed - inserted, rows_inserted=inserted)
        finally:
            self.deregister_arrow(name)

    def rewrite_data_files(self, table: Any, **options: Any) -> dict:
        """Compaction (`CALL system.rewrite_data_files`), Spark's options as keywords (dashes as
        underscores): e.g. `delete_file_threshold=1`. Returns Spark's result columns."""
        return self._call("rewrite_data_files", table, options=options)

    def expire_snapshots(self, table: Any, older_than: Any = None, retain_last: int | None = None) -> dict:
        """`CALL system.expire_snapshots`: snapshots older than `older_than` (a datetime;
        default 5 days ago) beyond the newest `retain_last`, and the files only they reach."""
        args = {}
        if older_than is not None:
            args["older_than"] = literal(older_than)
        if retain_last is not None:
            args["retain_last"] = str(int(retain_last))
        return self._call("expire_snapshots", table, args=args)

    def remove_orphan_files(self, table: Any, older_than: Any = None, dry_run: bool = False) -> "pyarrow.Table":
        """`CALL system.remove_orphan_files`: files under the table's location nothing reaches."""
        args = {"dry_run": literal(bool(dry_run))}
        if older_than is not None:
            args["older_than"] = literal(older_than)
        session, target = self._resolve(table, write=True)
        return session.sql(self._call_sql("remove_orphan_files", target, args, {})).to_arrow()

    @staticmethod
    def _call_sql(procedure: str, target: str, args: dict, options: dict) -> str:
        plain = target.replace('"', "")
        parts = [f"table => {literal(plain)}"] + [f"{k} => {v}" for k, v in args.items()]
        if options:
            pairs = ", ".join(f"{literal(k.replace('_', '-'))}, {literal(str(v))}" for k, v in options.items())
            parts.append(f"options => map({pairs})")
        return f"CALL system.{procedure}({', '.join(parts)})"

    def _call(self, procedure: str, table: Any, args: dict | None = None, options: dict | None = None) -> dict:
        session, target = self._resolve(table, write=True)
        got = session.sql(self._call_sql(procedure, target, args or {}, options or {})).to_arrow()
        return {name: got.column(name)[0].as_py() for name in got.column_names} if got.num_rows else {}


    def __init__(
        self,
        catalog: str | None = None,
        *,
        uri: str | None = None,
        warehouse: str | None = None,
        properties: Mapping[str, str] | None = None,
        memory_limit: int | str | None = None,
        catalog_name: str | None = None,
    ) -> None:
        self._memory_limit = memory_limit
        # Sessions on the catalogs of pyiceberg Tables given to the verbs (see `_resolve`).
        self._others: dict[tuple[str, str], Session] = {}
        self._native = _native.Session(
            catalog,
            catalog_name=catalog_name,
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

    def catalog_provider(self) -> object:
        """This session's Iceberg catalog for datafusion-python (the `datafusion` package of the
        same DataFusion major): `ctx.register_catalog_provider("lake", s.catalog_provider())`.
        Through it, SELECT and INSERT; DELETE, UPDATE and MERGE go through `Session.sql`."""
        _check_datafusion()
        return self._native.catalog_provider()

    def table_provider(self, table: Any) -> object:
        """One Iceberg table for datafusion-python: `ctx.register_table("t", s.table_provider(t))`."""
        _check_datafusion()
        session, name = self._resolve(table, write=False)
        if name is None:
            return self._native.metadata_table_provider(table.metadata_location, self._file_io(table))
        return session._native.table_provider(name)

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
