#!/usr/bin/env python3
"""Python side of the iceberg-exec object-storage tests: pyiceberg and DuckDB against tables in
S3 (a SeaweedFS server on loopback). Prints exactly one JSON document on stdout; errors go to
stderr with a non-zero exit status.

Every subcommand takes --catalog JSON: pyiceberg catalog properties (type, uri, warehouse,
s3.endpoint, s3.access-key-id, ...), exactly as they would stand in .pyiceberg.yaml; or
--catalog @NAME: the catalog NAME from pyiceberg's own configuration ($PYICEBERG_HOME/.pyiceberg.yaml
and PYICEBERG_CATALOG__* variables).

Subcommands:
  create --catalog JSON --table NS.NAME    a partitioned table (region identity, 4 appends, NULLs)
  read --catalog JSON --table NS.NAME      the table's rows, sorted
  append --catalog JSON --table NS.NAME --ids 1,2,3
  metadata --catalog JSON --table NS.NAME  the current metadata location and snapshot count
  duckdb-read --catalog JSON --metadata S3_URI   DuckDB (httpfs + iceberg) on a metadata file
  duckdb-rest --catalog JSON --sql SQL [--sql SQL]..   DuckDB ATTACHed to the REST catalog (as
      `lake`) runs the statements in order; the last one's rows
"""

from __future__ import annotations

import argparse
import json
import sys
from urllib.parse import urlparse

from pyiceberg_tool import ToolError, _duckdb_extension_path, arrow_to_rows, norm, sort_rows

APPENDS = 4
ROWS_PER_APPEND = 10
REGIONS = ["eu", "us", None]


def load(args):
    from pyiceberg.catalog import load_catalog

    if args.catalog.startswith("@"):
        return load_catalog(args.catalog[1:])
    props = json.loads(args.catalog)
    return load_catalog("test", **props)


def row(i: int) -> dict:
    return {
        "id": i,
        "region": REGIONS[i % 3],
        "name": None if i % 4 == 0 else f"name-{i}",
        "amount": None if i % 5 == 0 else i * 1.5,
    }


def arrow_rows(ids):
    import pyarrow as pa

    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("region", pa.string()),
            pa.field("name", pa.string()),
            pa.field("amount", pa.float64()),
        ]
    )
    rows = [row(i) for i in ids]
    return pa.Table.from_pylist(rows, schema=schema)


def cmd_create(args) -> dict:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    cat = load(args)
    ns, name = args.table.split(".")
    if (ns,) not in cat.list_namespaces():
        cat.create_namespace(ns)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "name", StringType(), required=False),
        NestedField(4, "amount", DoubleType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
    table = cat.create_table(args.table, schema=schema, partition_spec=spec)
    for a in range(APPENDS):
        ids = range(a * ROWS_PER_APPEND + 1, (a + 1) * ROWS_PER_APPEND + 1)
        table.append(arrow_rows(ids))
    table = cat.load_table(args.table)
    names, rows = arrow_to_rows(table.scan().to_arrow())
    return {"columns": names, "rows": sort_rows(rows), "metadata": table.metadata_location}


def cmd_read(args) -> dict:
    cat = load(args)
    table = cat.load_table(args.table)
    names, rows = arrow_to_rows(table.scan().to_arrow())
    return {"columns": names, "rows": sort_rows(rows)}


def cmd_append(args) -> dict:
    cat = load(args)
    table = cat.load_table(args.table)
    ids = [int(x) for x in args.ids.split(",") if x]
    table.append(arrow_rows(ids))
    return {"appended": len(ids)}


def cmd_metadata(args) -> dict:
    cat = load(args)
    table = cat.load_table(args.table)
    return {
        "metadata": table.metadata_location,
        "snapshots": len(table.metadata.snapshots),
        "files": sorted(str(f) for f in table.inspect.files().column("file_path").to_pylist()),
    }


def duckdb_with_s3(props: dict):
    """A DuckDB connection with httpfs, avro and iceberg loaded and an S3 secret for the
    catalog's storage."""
    import duckdb

    endpoint = urlparse(props["s3.endpoint"])
    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    try:
        for module_name, ext in (
            ("duckdb_extension_httpfs", "httpfs"),
            ("duckdb_extension_avro", "avro"),
            ("duckdb_extension_iceberg", "iceberg"),
        ):
            con.execute(f"LOAD '{_duckdb_extension_path(module_name, ext)}'")
        con.execute(
            "CREATE SECRET s3 (TYPE S3, KEY_ID ?, SECRET ?, ENDPOINT ?, REGION ?, URL_STYLE 'path', USE_SSL ?)",
            [
                props["s3.access-key-id"],
                props["s3.secret-access-key"],
                endpoint.netloc,
                props.get("s3.region", "us-east-1"),
                endpoint.scheme == "https",
            ],
        )
    except Exception:
        con.close()
        raise
    return con


def cmd_duckdb_read(args) -> dict:
    con = duckdb_with_s3(json.loads(args.catalog))
    try:
        cur = con.execute("SELECT * FROM iceberg_scan(?)", [args.metadata])
        names = [d[0] for d in cur.description]
        rows = [[norm(v) for v in r] for r in cur.fetchall()]
    finally:
        con.close()
    return {"columns": names, "rows": sort_rows(rows)}


def cmd_duckdb_rest(args) -> dict:
    props = json.loads(args.catalog)
    con = duckdb_with_s3(props)
    try:
        client_id, client_secret = props["credential"].split(":", 1)
        uri = props["uri"].rstrip("/")
        con.execute(
            "CREATE SECRET rest (TYPE iceberg, CLIENT_ID ?, CLIENT_SECRET ?, OAUTH2_SERVER_URI ?)",
            [client_id, client_secret, f"{uri}/v1/oauth/tokens"],
        )
        # The warehouse by its bucket name (DuckDB attaches 's3://bucket/' read-only).
        warehouse = urlparse(props["warehouse"]).netloc or props["warehouse"]
        con.execute(f"ATTACH '{warehouse}' AS lake (TYPE iceberg, ENDPOINT '{uri}', SECRET rest)")
        names, rows = [], []
        for statement in args.sql:
            cur = con.execute(statement)
            names = [d[0] for d in cur.description] if cur.description else []
            rows = [[norm(v) for v in r] for r in cur.fetchall()] if cur.description else []
    finally:
        con.close()
    return {"columns": names, "rows": sort_rows(rows)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, fn in (("create", cmd_create), ("read", cmd_read), ("append", cmd_append), ("metadata", cmd_metadata)):
        s = sub.add_parser(name)
        s.add_argument("--catalog", required=True)
        s.add_argument("--table", required=True)
        if name == "append":
            s.add_argument("--ids", required=True)
        s.set_defaults(fn=fn)
    d = sub.add_parser("duckdb-read")
    d.add_argument("--catalog", required=True)
    d.add_argument("--metadata", required=True)
    d.set_defaults(fn=cmd_duckdb_read)
    r = sub.add_parser("duckdb-rest")
    r.add_argument("--catalog", required=True)
    r.add_argument("--sql", action="append", required=True)
    r.set_defaults(fn=cmd_duckdb_rest)
    args = p.parse_args(argv)
    try:
        out = args.fn(args)
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
