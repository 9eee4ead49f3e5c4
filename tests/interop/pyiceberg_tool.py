#!/usr/bin/env python3
"""Python side of the iceberg-exec interop tests.

Drives pyiceberg's SqlCatalog (SQLite, JDBC table layout) and, optionally,
DuckDB's iceberg extension, and prints exactly one JSON document on stdout.
Errors go to stderr with a non-zero exit status.

Subcommands:
  create-warehouse --warehouse DIR [--overwrite]
  read --warehouse DIR --table NS.NAME [--catalog-uri URI] [--catalog-name NAME]
  list --warehouse DIR [--catalog-uri URI] [--catalog-name NAME]
  evolve --warehouse DIR   (pyns.evolved: schema and partition evolution across appends)
  types --warehouse DIR    (pyns.types: every primitive type, one row all NULL)
  nested --warehouse DIR   (pyns.nested: struct, list, map; pyns.nested_renamed: a struct field renamed)
  schema --warehouse DIR --table NS.NAME   (the current schema as pyiceberg reads it)
  duckdb-read --metadata PATH
  inspect-files --warehouse DIR --table NS.NAME   (inspect.files / all_files / all_manifests)

Value normalisation (shared by every subcommand): ints as ints, floats as
floats (NaN/Infinity as the strings "NaN"/"Infinity"/"-Infinity"), strings,
NULL as null, timestamps as ISO 'YYYY-MM-DDTHH:MM:SS[.ffffff]' (tz-aware ones
get their '+00:00' offset), dates 'YYYY-MM-DD', times 'HH:MM:SS[.ffffff]',
decimals as strings, binary as lowercase hex, UUIDs as strings, lists/structs
recursively. Rows from read/duckdb-read are sorted by all columns, null first.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import decimal
import glob
import json
import math
import os
import shutil
import sys
import uuid

CATALOG_NAME = "default"


# ---------------------------------------------------------------------------
# helpers


class ToolError(Exception):
    pass


def abs_dir(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path)).rstrip("/") or "/"


def default_catalog_uri(warehouse: str) -> str:
    # sqlite:/// + absolute path => four slashes.
    return "sqlite:///" + os.path.join(warehouse, "catalog.db")


def warehouse_uri(warehouse: str) -> str:
    return "file://" + warehouse


def load_catalog(warehouse: str, catalog_uri: str | None = None, name: str = CATALOG_NAME):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        name,
        uri=catalog_uri or default_catalog_uri(warehouse),
        warehouse=warehouse_uri(warehouse),
    )


def norm(v):
    """Normalise one value into a JSON-friendly Python value."""
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, str):
        return v
    if isinstance(v, dt.datetime):  # before date: datetime is a date subclass
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, dict):
        return {str(k): norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    # numpy scalars and anything else with .item()
    if hasattr(v, "item"):
        return norm(v.item())
    return str(v)


def _sort_key_value(v):
    if v is None:
        return (0, 0, "")
    if isinstance(v, bool):
        return (1, 0, int(v))
    if isinstance(v, (int, float)):
        return (1, 0, v)
    if isinstance(v, str):
        return (1, 1, v)
    return (1, 2, json.dumps(v, sort_keys=True))


def sort_rows(rows: list[list]) -> list[list]:
    return sorted(rows, key=lambda r: tuple(_sort_key_value(v) for v in r))


def arrow_to_rows(table) -> tuple[list[str], list[list]]:
    names = list(table.column_names)
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows = [[norm(c[i]) for c in cols] for i in range(table.num_rows)]
    return names, rows


# ---------------------------------------------------------------------------
# deterministic test data

EVENTS_BATCH_SIZE = 25
EVENTS_BATCHES = 4
SIMPLE_ROWS = 10
BASE_TS = dt.datetime(2024, 1, 1, 0, 0, 0)
BASE_DAY = dt.date(2024, 1, 1)


def events_row(i: int) -> list:
    """Row i (id = i, 1-based) of pyns.events in schema column order."""
    name = None if i % 7 == 0 else f"name_{i % 5}"
    if i % 25 == 0:
        ts = None  # exercises the null partition of day(ts)
    else:
        ts = BASE_TS + dt.timedelta(hours=7 * i, seconds=i)
        if i % 4 == 0:
            ts += dt.timedelta(microseconds=1000 * i + 7)
    amount = None if i % 6 == 0 else i * 1.25 - 10.0
    day = BASE_DAY + dt.timedelta(days=i % 30)
    return [i, name, ts, amount, day]


def simple_row(i: int) -> list:
    return [i, f"label-{i}"]


# ---------------------------------------------------------------------------
# subcommands


def cmd_create_warehouse(args) -> dict:
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, DayTransform
    from pyiceberg.types import (
        DateType,
        DoubleType,
        LongType,
        NestedField,
        StringType,
        TimestampType,
    )

    warehouse = abs_dir(args.warehouse)
    db_path = os.path.join(warehouse, "catalog.db")
    if args.overwrite:
        for p in (db_path, db_path + "-journal", db_path + "-wal", db_path + "-shm"):
            if os.path.exists(p):
                os.remove(p)
        shutil.rmtree(os.path.join(warehouse, "pyns"), ignore_errors=True)
    elif os.path.exists(db_path):
        raise ToolError(f"{db_path} already exists (use --overwrite)")
    os.makedirs(warehouse, exist_ok=True)

    catalog = load_catalog(warehouse)
    catalog.create_namespace("pyns")

    # --- pyns.events: partitioned by day(ts), bucket(4, id) ---------------
    events_schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "ts", TimestampType(), required=False),
        NestedField(4, "amount", DoubleType(), required=False),
        NestedField(5, "day", DateType(), required=False),
    )
    events_spec = PartitionSpec(
        PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=1, field_id=1001, transform=BucketTransform(4), name="id_bucket"),
    )
    events = catalog.create_table("pyns.events", schema=events_schema, partition_spec=events_spec)
    events_pa_schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string(), nullable=True),
            pa.field("ts", pa.timestamp("us"), nullable=True),
            pa.field("amount", pa.float64(), nullable=True),
            pa.field("day", pa.date32(), nullable=True),
        ]
    )
    all_events = []
    for b in range(EVENTS_BATCHES):
        rows = [events_row(i) for i in range(b * EVENTS_BATCH_SIZE + 1, (b + 1) * EVENTS_BATCH_SIZE + 1)]
        all_events.extend(rows)
        cols = list(zip(*rows))
        batch = pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, events_pa_schema)], schema=events_pa_schema)
        events.append(batch)

    # --- pyns.simple: unpartitioned --------------------------------------
    simple_schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "label", StringType(), required=False),
    )
    simple = catalog.create_table("pyns.simple", schema=simple_schema)
    simple_pa_schema = pa.schema([pa.field("id", pa.int64()), pa.field("label", pa.string())])
    simple_rows = [simple_row(i) for i in range(1, SIMPLE_ROWS + 1)]
    cols = list(zip(*simple_rows))
    simple.append(pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(cols, simple_pa_schema)], schema=simple_pa_schema))

    metadata_locations = {
        ident: catalog.load_table(ident).metadata_location for ident in ("pyns.events", "pyns.simple")
    }
    catalog.close()
    return {
        "tables": {
            "pyns.events": [norm(r) for r in sorted(all_events, key=lambda r: r[0])],
            "pyns.simple": [norm(r) for r in sorted(simple_rows, key=lambda r: r[0])],
        },
        "metadata_locations": metadata_locations,
    }


def cmd_evolve(args) -> dict:
    """Creates pyns.evolved in an existing warehouse and evolves it between appends:
    promote int->long and float->double, rename, drop, re-add a dropped name with a new id,
    add a column, and change the partition spec (identity(cat) -> + bucket(2, id))."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, IdentityTransform
    from pyiceberg.types import FloatType, IntegerType, LongType, NestedField, StringType, DoubleType

    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        catalog.create_namespace("pyns")
    except Exception:  # noqa: BLE001 - already there
        pass
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=False),
        NestedField(2, "b", StringType(), required=False),
        NestedField(3, "c", FloatType(), required=False),
        NestedField(4, "cat", StringType(), required=False),
    )
    t = catalog.create_table("pyns.evolved", schema=schema)
    with t.update_spec() as spec:
        spec.add_field("cat", IdentityTransform(), "cat")
    t = catalog.load_table("pyns.evolved")
    t.append(pa.table({
        "id": pa.array([1, 2, 3], pa.int32()),
        "b": ["x", None, "z"],
        "c": pa.array([1.5, 2.5, None], pa.float32()),
        "cat": ["p", "q", "p"],
    }))
    with t.update_schema() as u:
        u.update_column("id", LongType())
        u.update_column("c", DoubleType())
        u.rename_column("b", "bb")
    t = catalog.load_table("pyns.evolved")
    t.append(pa.table({
        "id": pa.array([4], pa.int64()),
        "bb": ["w"],
        "c": pa.array([4.25], pa.float64()),
        "cat": ["q"],
    }))
    with t.update_schema() as u:
        u.delete_column("c")
    t = catalog.load_table("pyns.evolved")
    with t.update_schema() as u:
        u.add_column("c", StringType())
        u.add_column("extra", LongType())
    t = catalog.load_table("pyns.evolved")
    with t.update_spec() as spec:
        spec.add_field("id", BucketTransform(2), "id_bucket")
    t = catalog.load_table("pyns.evolved")
    t.append(pa.table({
        "id": pa.array([5, 6], pa.int64()),
        "bb": ["v", None],
        "cat": ["p", "r"],
        "c": ["new-c", None],
        "extra": pa.array([50, 60], pa.int64()),
    }))
    t = catalog.load_table("pyns.evolved")
    names, rows = arrow_to_rows(t.scan().to_arrow())
    catalog.close()
    return {"columns": names, "rows": sort_rows(rows)}


def cmd_types(args) -> dict:
    """Creates pyns.types holding every primitive type pyiceberg writes, and returns its rows."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType, BooleanType, DateType, DecimalType, DoubleType, FixedType, FloatType,
        IntegerType, LongType, NestedField, StringType, TimestampType, TimestamptzType, TimeType,
        UUIDType,
    )

    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        catalog.create_namespace("pyns")
    except Exception:  # noqa: BLE001 - already there
        pass
    fields = [
        ("id", LongType(), pa.int64()),
        ("b", BooleanType(), pa.bool_()),
        ("i", IntegerType(), pa.int32()),
        ("f", FloatType(), pa.float32()),
        ("d", DoubleType(), pa.float64()),
        ("dec", DecimalType(10, 3), pa.decimal128(10, 3)),
        ("s", StringType(), pa.string()),
        ("bin", BinaryType(), pa.binary()),
        ("fx", FixedType(3), pa.binary(3)),
        ("u", UUIDType(), pa.uuid()),
        ("dt", DateType(), pa.date32()),
        ("tm", TimeType(), pa.time64("us")),
        ("ts", TimestampType(), pa.timestamp("us")),
        ("tstz", TimestamptzType(), pa.timestamp("us", tz="UTC")),
    ]
    schema = Schema(*[NestedField(i + 1, n, t, required=False) for i, (n, t, _) in enumerate(fields)])
    t = catalog.create_table("pyns.types", schema=schema)
    rows = [
        [1, True, -7, 1.5, -2.25, decimal.Decimal("123.456"), "héllo", b"\x00\xff", b"abc",
         uuid.UUID("12345678-1234-5678-1234-567812345678"), dt.date(2024, 2, 29),
         dt.time(23, 59, 58, 123456), dt.datetime(2024, 2, 29, 12, 0, 1, 500000),
         dt.datetime(2024, 2, 29, 12, 0, 1, tzinfo=dt.timezone.utc)],
        [2, False, 2147483647, -0.0, 1e300, decimal.Decimal("-0.001"), "", b"", b"xyz",
         uuid.UUID("00000000-0000-0000-0000-000000000001"), dt.date(1970, 1, 1),
         dt.time(0, 0, 0), dt.datetime(1969, 12, 31, 23, 59, 59),
         dt.datetime(2000, 1, 1, 0, 0, 0, tzinfo=dt.timezone.utc)],
        [3] + [None] * (len(fields) - 1),
    ]
    arrays = []
    for col, (_, _, pa_type) in enumerate(fields):
        values = [r[col] for r in rows]
        if pa_type == pa.uuid():
            arrays.append(pa.array([v.bytes if v else None for v in values], pa.binary(16)).cast(pa.uuid()))
        else:
            arrays.append(pa.array(values, pa_type))
    t.append(pa.table(arrays, names=[n for n, _, _ in fields]))
    t = catalog.load_table("pyns.types")
    names, out = arrow_to_rows(t.scan().to_arrow())
    catalog.close()
    return {"columns": names, "rows": sort_rows(out)}


def cmd_nested(args) -> dict:
    """Creates pyns.nested (struct, list, map columns) and pyns.nested_renamed (a struct field
    renamed after the data was written); returns pyns.nested's rows."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, ListType, LongType, MapType, NestedField, StringType, StructType

    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        catalog.create_namespace("pyns")
    except Exception:  # noqa: BLE001 - already there
        pass
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "s", StructType(
            NestedField(3, "x", IntegerType(), required=False),
            NestedField(4, "y", StringType(), required=False),
        ), required=False),
        NestedField(5, "l", ListType(6, LongType(), element_required=False), required=False),
        NestedField(7, "m", MapType(8, StringType(), 9, LongType(), value_required=False), required=False),
    )
    arrow_schema = pa.schema([
        pa.field("id", pa.int64()),
        pa.field("s", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.string())])),
        pa.field("l", pa.list_(pa.int64())),
        pa.field("m", pa.map_(pa.string(), pa.int64())),
    ])
    data = pa.Table.from_pylist([
        {"id": 1, "s": {"x": 10, "y": "a"}, "l": [1, 2, None], "m": [("k1", 5), ("k2", None)]},
        {"id": 2, "s": {"x": None, "y": "b"}, "l": [], "m": []},
        {"id": 3, "s": None, "l": None, "m": None},
    ], schema=arrow_schema)
    for name in ("pyns.nested", "pyns.nested_renamed"):
        t = catalog.create_table(name, schema=schema)
        t.append(data)
    t = catalog.load_table("pyns.nested_renamed")
    with t.update_schema() as u:
        u.rename_column("s.x", "xx")
    t = catalog.load_table("pyns.nested")
    rows = t.scan(selected_fields=("id", "s", "l")).to_arrow()
    names, out = arrow_to_rows(rows)
    catalog.close()
    return {"columns": names, "rows": sort_rows(out)}


def cmd_read(args) -> dict:
    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse, args.catalog_uri, args.catalog_name)
    try:
        table = catalog.load_table(args.table)
        snapshot_id = None
        if args.ref:
            snapshot = table.snapshot_by_name(args.ref)
            if snapshot is None:
                raise ValueError(f"no branch or tag {args.ref}")
            snapshot_id = snapshot.snapshot_id
        arrow = table.scan(snapshot_id=snapshot_id).to_arrow()
        location = table.metadata_location
    finally:
        catalog.close()
    names, rows = arrow_to_rows(arrow)
    return {"columns": names, "rows": sort_rows(rows), "metadata_location": location}


def cmd_schema(args) -> dict:
    """The table's current schema as pyiceberg reads it: [id, dotted name, type, required,
    doc] for every field, depth first; identifier field ids; last column id."""
    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        table = catalog.load_table(args.table)
        from pyiceberg.schema import index_by_id

        schema = table.schema()
        fields = []
        by_id = index_by_id(schema)
        for fid in sorted(by_id):
            f = by_id[fid]
            fields.append([fid, schema.find_column_name(fid), str(f.field_type), f.required, f.doc])
        return {
            "schema_id": schema.schema_id,
            "fields": fields,
            "identifier_field_ids": list(schema.identifier_field_ids),
            "last_column_id": table.metadata.last_column_id,
            "schemas": len(table.metadata.schemas),
            "spec": [[f.field_id, f.name, f.source_id, str(f.transform)] for f in table.spec().fields],
            "sort_order": [[f.source_id, str(f.transform), str(f.direction), str(f.null_order)]
                           for f in table.sort_order().fields],
        }
    finally:
        catalog.close()


def _walk_namespaces(catalog, parent=()):
    out = []
    for ns in sorted(catalog.list_namespaces(parent) if parent else catalog.list_namespaces()):
        ns = tuple(ns)
        out.append(ns)
        with contextlib.suppress(Exception):
            out.extend(x for x in _walk_namespaces(catalog, ns) if x != ns)
    return out


def cmd_list(args) -> dict:
    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse, args.catalog_uri, args.catalog_name)
    try:
        namespaces = _walk_namespaces(catalog)
        tables = []
        for ns in namespaces:
            tables.extend(".".join(t) for t in catalog.list_tables(ns))
    finally:
        catalog.close()
    return {
        "namespaces": sorted(".".join(ns) for ns in set(namespaces)),
        "tables": sorted(set(tables)),
    }


def _duckdb_extension_path(module_name: str, ext: str) -> str:
    import importlib

    mod = importlib.import_module(module_name)
    hits = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", f"{ext}.duckdb_extension"))
    if not hits:
        raise ToolError(f"{ext}.duckdb_extension not found in package {module_name}")
    return hits[0]


def cmd_duckdb_read(args) -> dict:
    import duckdb

    metadata = args.metadata
    if metadata.startswith("file://"):
        metadata = metadata[len("file://"):]
    metadata = os.path.abspath(metadata)
    if not os.path.exists(metadata):
        raise ToolError(f"metadata file not found: {metadata}")

    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    try:
        # iceberg needs avro to read manifests; both come from PyPI wheels
        # (duckdb-extension-avro / duckdb-extension-iceberg, pinned to duckdb).
        for module_name, ext in (("duckdb_extension_avro", "avro"), ("duckdb_extension_iceberg", "iceberg")):
            path = _duckdb_extension_path(module_name, ext)
            con.execute(f"LOAD '{path}'")
        # A select list of plain column names (the row lineage columns among them, which
        # DuckDB exposes as virtual columns of v3 tables); every column by default.
        select = args.select or "*"
        if not all(c.strip().isidentifier() for c in select.split(",")) and select != "*":
            raise ToolError(f"--select takes column names: {select}")
        cur = con.execute(f"SELECT {select} FROM iceberg_scan(?)", [metadata])
        names = [d[0] for d in cur.description]
        rows = [[norm(v) for v in r] for r in cur.fetchall()]
    finally:
        con.close()
    return {"columns": names, "rows": sort_rows(rows)}


def cmd_duckdb_bench(args) -> dict:
    """Times a query over iceberg_scan('<metadata>') (written {t} in the query): median of runs."""
    import statistics
    import time

    import duckdb

    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    try:
        for module_name, ext in (("duckdb_extension_avro", "avro"), ("duckdb_extension_iceberg", "iceberg")):
            con.execute(f"LOAD '{_duckdb_extension_path(module_name, ext)}'")
        con.execute(f"SET threads = {args.threads}")
        query = args.query.replace("{t}", f"iceberg_scan('{os.path.abspath(args.metadata)}')")
        times, result = [], None
        for _ in range(args.runs):
            start = time.perf_counter()
            result = [[norm(v) for v in r] for r in con.execute(query).fetchall()]
            times.append(time.perf_counter() - start)
    finally:
        con.close()
    return {"median_s": statistics.median(times), "times_s": times, "rows": result}


def cmd_write_pos_deletes(args) -> dict:
    """A position delete file as pyarrow writes it: file_path as large_string, with or without
    the Arrow schema in the footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    deletes = json.loads(args.deletes)
    schema = pa.schema(
        [
            pa.field("file_path", pa.large_string(), nullable=False, metadata={b"PARQUET:field_id": b"2147483546"}),
            pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": b"2147483545"}),
        ]
    )
    table = pa.table(
        {
            "file_path": pa.array([d[0] for d in deletes], pa.large_string()),
            "pos": pa.array([d[1] for d in deletes], pa.int64()),
        },
        schema=schema,
    )
    pq.write_table(table, args.out, store_schema=not args.no_arrow_schema)
    return {"size": os.path.getsize(args.out), "rows": len(deletes)}


def cmd_delete_files(args) -> dict:
    """The live delete entries of a table's current snapshot, as pyiceberg reads its manifests,
    with its format version and next row id."""
    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        table = catalog.load_table(args.table)
        snapshot = table.current_snapshot()
        from pyiceberg.avro.file import AvroFile
        from pyiceberg.manifest import (
            MANIFEST_ENTRY_SCHEMAS,
            DataFile,
            DataFileContent,
            FileFormat,
            ManifestEntry,
            ManifestEntryStatus,
        )

        # Read with the v3 entry schema: pyiceberg's own reading stops at v2's fields.
        entries = []
        for manifest in snapshot.manifests(table.io) if snapshot else []:
            with AvroFile[ManifestEntry](
                table.io.new_input(manifest.manifest_path),
                MANIFEST_ENTRY_SCHEMAS[3],
                read_types={-1: ManifestEntry, 2: DataFile},
                read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
            ) as reader:
                read = [e for e in reader if e.status != ManifestEntryStatus.DELETED]
            # The record holds the v3 fields by position (its names stop at v2's).
            names = [fld.name for fld in MANIFEST_ENTRY_SCHEMAS[3].find_field("data_file").field_type.fields]
            for entry in read:
                f = entry.data_file
                if f.content.value == 0:
                    continue
                entries.append(
                    {
                        "content": f.content.value,
                        "file_path": f.file_path,
                        "file_format": str(f.file_format.value).lower(),
                        "record_count": f.record_count,
                        "referenced_data_file": f[names.index("referenced_data_file")],
                        "content_offset": f[names.index("content_offset")],
                        "content_size_in_bytes": f[names.index("content_size_in_bytes")],
                    }
                )
        version = table.metadata.format_version
        next_row_id = getattr(table.metadata, "next_row_id", None)
    finally:
        catalog.close()
    return {"entries": entries, "format_version": version, "next_row_id": next_row_id}


def cmd_inspect_files(args) -> dict:
    """What pyiceberg says a table references: live files of the current snapshot, files and
    manifests of every snapshot, manifest lists, metadata files."""
    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        table = catalog.load_table(args.table)
        files = table.inspect.files().column("file_path").to_pylist()
        all_files = table.inspect.all_files().column("file_path").to_pylist()
        all_manifests = table.inspect.all_manifests().column("path").to_pylist()
        lists = [s.manifest_list for s in table.metadata.snapshots]
        metadata = [table.metadata_location] + [m.metadata_file for m in table.metadata.metadata_log]
    finally:
        catalog.close()
    return {
        "files": sorted(set(files)),
        "all_files": sorted(set(all_files)),
        "all_manifests": sorted(set(all_manifests)),
        "manifest_lists": sorted(lists),
        "metadata": sorted(set(metadata)),
    }


def _plain(v):
    """A value of a pyarrow row as JSON compares it: times as epoch milliseconds, dates as ISO
    text, bytes as hex, maps as their keys and values in key order."""
    import datetime
    import decimal

    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return int(v.timestamp() * 1000)
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            pairs = sorted(v, key=lambda kv: kv[0])
            return {"keys": [_plain(k) for k, _ in pairs], "values": [_plain(x) for _, x in pairs]}
        return [_plain(x) for x in v]
    return v


def cmd_manage(args) -> dict:
    """Branches, tags and rollbacks made by pyiceberg: `branch` makes branch NAME at main's head
    and appends ROWS ([[id, v], ..]) to it; `tag` makes tag NAME at main's head; `rollback`
    rolls main back to SNAPSHOT_ID. Answers the table's refs, {name: snapshot id}."""
    import pyarrow as pa

    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        table = catalog.load_table(args.table)
        head = table.current_snapshot().snapshot_id
        if args.action == "branch":
            with table.manage_snapshots() as ms:
                ms.create_branch(snapshot_id=head, branch_name=args.name)
            table = catalog.load_table(args.table)
            rows = json.loads(args.rows)
            data = pa.table(
                {
                    "id": pa.array([r[0] for r in rows], pa.int64()),
                    "v": pa.array([r[1] for r in rows], pa.string()),
                }
            )
            table.append(data, branch=args.name)
        elif args.action == "tag":
            with table.manage_snapshots() as ms:
                ms.create_tag(snapshot_id=head, tag_name=args.name)
        elif args.action == "rollback":
            with table.manage_snapshots() as ms:
                ms.rollback_to_snapshot(int(args.snapshot_id))
        else:
            raise ValueError(f"unknown action {args.action}")
        table = catalog.load_table(args.table)
        refs = {name: ref.snapshot_id for name, ref in table.metadata.refs.items()}
    finally:
        catalog.close()
    return {"refs": refs}


def cmd_write_parquet(args) -> dict:
    """Parquet files written by pyarrow, without field ids: under OUT/hive, `k=a/` and `k=b/`
    directories (the files lack `k`); under OUT/flat, two files. Columns id (int64), v (string,
    a null), x (double). Answers the files written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = abs_dir(args.out)
    written = []

    def write(path, ids, vs, xs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "v": pa.array(vs, pa.string()),
                "x": pa.array(xs, pa.float64()),
            }
        )
        pq.write_table(table, path)
        written.append(path)

    write(os.path.join(out, "hive", "k=a", "part-0.parquet"), [1, 2], ["p", None], [1.5, -2.0])
    write(os.path.join(out, "hive", "k=b", "part-0.parquet"), [3], ["q"], [0.25])
    write(os.path.join(out, "flat", "one.parquet"), [10, 11, 12], ["a", "b", None], [1.0, None, 3.5])
    write(os.path.join(out, "flat", "two.parquet"), [20], ["zz"], [-7.25])
    return {"files": written}


def cmd_add_files(args) -> dict:
    """pyiceberg's add_files of FILES (a JSON list) into TABLE."""
    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        table = catalog.load_table(args.table)
        table.add_files(file_paths=json.loads(args.files))
    finally:
        catalog.close()
    return {"added": len(json.loads(args.files))}


def cmd_inspect(args) -> dict:
    """A metadata table of a table as pyiceberg's `inspect` answers it, row by row; a map column
    as its keys and values in key order (a missing map as an empty one)."""
    import pyarrow as pa

    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        table = catalog.load_table(args.table)
        answer = getattr(table.inspect, args.kind)()
        maps = {f.name for f in answer.schema if pa.types.is_map(f.type)}
        rows = []
        for row in answer.to_pylist():
            out = {}
            for k, v in row.items():
                if k in maps:
                    pairs = sorted(v or [], key=lambda kv: kv[0])
                    out[k] = {"keys": [_plain(a) for a, _ in pairs], "values": [_plain(b) for _, b in pairs]}
                else:
                    out[k] = _plain(v)
            rows.append(out)
    finally:
        catalog.close()
    return {"columns": answer.column_names, "rows": rows}


# ---------------------------------------------------------------------------


def cmd_decimal_evolve(args) -> dict:
    """Creates pyns.dec partitioned by identity(d) on a decimal(6, 2) column, appends, widens d
    to decimal(8, 2) (older manifests keep their 3-byte partition values) and appends again."""
    import decimal as dec
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DecimalType, IntegerType, NestedField

    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        catalog.create_namespace("pyns")
    except Exception:  # noqa: BLE001 - already there
        pass
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=False),
        NestedField(2, "d", DecimalType(6, 2), required=False),
    )
    t = catalog.create_table("pyns.dec", schema=schema)
    with t.update_spec() as spec:
        spec.add_field("d", IdentityTransform(), "d")
    t = catalog.load_table("pyns.dec")
    t.append(pa.table({
        "id": pa.array([1, 2, 3], pa.int32()),
        "d": pa.array([dec.Decimal("1234.56"), dec.Decimal("-0.01"), None], pa.decimal128(6, 2)),
    }))
    with t.update_schema() as u:
        u.update_column("d", DecimalType(8, 2))
    t = catalog.load_table("pyns.dec")
    t.append(pa.table({
        "id": pa.array([4], pa.int32()),
        "d": pa.array([dec.Decimal("123456.78")], pa.decimal128(8, 2)),
    }))
    t = catalog.load_table("pyns.dec")
    arrow = t.scan().to_arrow()
    names, rows = arrow_to_rows(arrow)
    return {"columns": names, "rows": sort_rows(rows)}


def cmd_uuid_partitioned(args) -> dict:
    """Creates pyns.up (id int, u uuid) partitioned by identity(u), written by pyiceberg (whose
    manifests hold the uuid partition values this project's writer cannot encode)."""
    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import IntegerType, NestedField, UUIDType

    warehouse = abs_dir(args.warehouse)
    catalog = load_catalog(warehouse)
    try:
        catalog.create_namespace("pyns")
    except Exception:  # noqa: BLE001 - already there
        pass
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=False),
        NestedField(2, "u", UUIDType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="u"))
    t = catalog.create_table("pyns.up", schema=schema, partition_spec=spec)
    a = uuid.UUID("12345678-1234-5678-1234-567812345678")
    b = uuid.UUID("00000000-0000-0000-0000-000000000001")
    # Fixed-size binary: pyarrow cannot group by its uuid extension type to split partitions.
    t.append(pa.table({
        "id": pa.array([1, 2, 3], pa.int32()),
        "u": pa.array([a.bytes, b.bytes, a.bytes], pa.binary(16)),
    }))
    t = catalog.load_table("pyns.up")
    names, rows = arrow_to_rows(t.scan().to_arrow())
    return {"columns": names, "rows": sort_rows(rows)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("create-warehouse", help="create SqlCatalog + pyns.events + pyns.simple")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--overwrite", action="store_true", help="remove an existing catalog.db and pyns/ first")
    c.set_defaults(func=cmd_create_warehouse)

    r = sub.add_parser("read", help="scan a table through the SqlCatalog")
    r.add_argument("--warehouse", required=True)
    r.add_argument("--table", required=True, help="NS.NAME")
    r.add_argument("--catalog-uri", default=None, help="SQLAlchemy URI (default sqlite:///WAREHOUSE/catalog.db)")
    r.add_argument("--catalog-name", default=CATALOG_NAME)
    r.add_argument("--ref", default=None, help="read this branch or tag (default: main)")
    r.set_defaults(func=cmd_read)

    m = sub.add_parser("manage", help="branches, tags and rollbacks through manage_snapshots()")
    m.add_argument("--warehouse", required=True)
    m.add_argument("--table", required=True, help="NS.NAME")
    m.add_argument("--action", required=True, choices=["branch", "tag", "rollback"])
    m.add_argument("--name", default=None)
    m.add_argument("--rows", default="[]")
    m.add_argument("--snapshot-id", default=None)
    m.set_defaults(func=cmd_manage)

    ls = sub.add_parser("list", help="list namespaces and tables")
    ls.add_argument("--warehouse", required=True)
    ls.add_argument("--catalog-uri", default=None)
    ls.add_argument("--catalog-name", default=CATALOG_NAME)
    ls.set_defaults(func=cmd_list)

    e = sub.add_parser("evolve", help="create pyns.evolved with schema and partition evolution")
    e.add_argument("--warehouse", required=True)
    e.set_defaults(func=cmd_evolve)

    ty = sub.add_parser("types", help="create pyns.types with every primitive type")
    ty.add_argument("--warehouse", required=True)
    ty.set_defaults(func=cmd_types)

    ne = sub.add_parser("nested", help="create pyns.nested and pyns.nested_renamed")
    ne.add_argument("--warehouse", required=True)
    ne.set_defaults(func=cmd_nested)

    de = sub.add_parser("decimal-evolve", help="create pyns.dec and widen its decimal partition column")
    de.add_argument("--warehouse", required=True)
    de.set_defaults(func=cmd_decimal_evolve)

    up = sub.add_parser("uuid-partitioned", help="create pyns.up partitioned by identity(u uuid)")
    up.add_argument("--warehouse", required=True)
    up.set_defaults(func=cmd_uuid_partitioned)

    sc = sub.add_parser("schema", help="the current schema of a table as pyiceberg reads it")
    sc.add_argument("--warehouse", required=True)
    sc.add_argument("--table", required=True)
    sc.set_defaults(func=cmd_schema)

    d = sub.add_parser("duckdb-read", help="scan a metadata.json with DuckDB's iceberg extension")
    d.add_argument("--metadata", required=True)
    d.add_argument("--select", help="comma-separated column names (default: every column)")
    d.set_defaults(func=cmd_duckdb_read)

    b = sub.add_parser("duckdb-bench", help="time a query over iceberg_scan with DuckDB")
    b.add_argument("--metadata", required=True)
    b.add_argument("--query", required=True, help="SQL with {t} for the table")
    b.add_argument("--runs", type=int, default=5)
    b.add_argument("--threads", type=int, default=2)
    b.set_defaults(func=cmd_duckdb_bench)

    df = sub.add_parser("delete-files", help="list the live delete entries of a table")
    df.add_argument("--warehouse", required=True)
    df.add_argument("--table", required=True, help="NS.NAME")
    df.set_defaults(func=cmd_delete_files)

    wp = sub.add_parser("write-parquet", help="parquet files without field ids, flat and Hive-partitioned")
    wp.add_argument("--out", required=True)
    wp.set_defaults(func=cmd_write_parquet)

    af = sub.add_parser("add-files", help="pyiceberg's add_files")
    af.add_argument("--warehouse", required=True)
    af.add_argument("--table", required=True, help="NS.NAME")
    af.add_argument("--files", required=True, help="JSON list of paths")
    af.set_defaults(func=cmd_add_files)

    it = sub.add_parser("inspect", help="a metadata table as pyiceberg's inspect answers it")
    it.add_argument("--warehouse", required=True)
    it.add_argument("--table", required=True, help="NS.NAME")
    it.add_argument("--kind", required=True, help="snapshots, files, manifests, ...")
    it.set_defaults(func=cmd_inspect)

    ins = sub.add_parser("inspect-files", help="files, all_files, all_manifests of a table")
    ins.add_argument("--warehouse", required=True)
    ins.add_argument("--table", required=True, help="NS.NAME")
    ins.set_defaults(func=cmd_inspect_files)

    w = sub.add_parser("write-pos-deletes", help="write a position delete parquet file with pyarrow")
    w.add_argument("--out", required=True)
    w.add_argument("--deletes", required=True, help="JSON list of [file_path, pos]")
    w.add_argument("--no-arrow-schema", action="store_true", help="omit the Arrow schema footer")
    w.set_defaults(func=cmd_write_pos_deletes)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    real_stdout = sys.stdout
    try:
        # Anything a library prints must not corrupt the JSON on stdout.
        with contextlib.redirect_stdout(sys.stderr):
            result = args.func(args)
    except Exception as e:  # noqa: BLE001
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    json.dump(result, real_stdout, allow_nan=False)
    real_stdout.write("\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
