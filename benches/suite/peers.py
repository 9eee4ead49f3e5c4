"""The Python peers of the benchmark suite (benches/compare.py runs one command per process).

Every command prints one JSON document on stdout: {"seconds": <timed part>, "answer": [first row
as text]} or {"unsupported": "<why>"} when the engine cannot run the scenario. `seconds` covers
what the engine does for the statement, including loading the table's metadata, and not the
interpreter's start or imports.

  duckdb          --metadata M --sql SQL            DuckDB iceberg_scan; {t} is the table
  duckdb-rest     --catalog JSON --table T --sql SQL  DuckDB ATTACHed to a REST catalog (S3)
  pyiceberg-scan  (--metadata M | --catalog JSON --table T) [--filter F] --aggs JSON
  rest-register   --catalog JSON --table T --metadata M   (setup: register a metadata file)
  pyiceberg-delete --warehouse W --table T --filter F
  pyiceberg-append --warehouse W --table T --rows N --sort-by COL
  pyiceberg-read  --warehouse W --table T [--filter F] [--stream] --aggs JSON   every column
                                                    to pyarrow (or streamed batch by batch)
  pyiceberg-upsert --warehouse W --table T --rows N --changes C   pyiceberg's `upsert`
  py-read / py-delete / py-upsert   the same through iceberg-exec's Python package
                                                    (`iceberg_exec.Session`), [--memory-limit M]
  pyarrow-read    --files LISTFILE [--stream] --aggs JSON   pyarrow's reader over bare files
  delta-create    --path P --files LISTFILE         (setup, untimed answer)
  delta-scan      --path P --aggs JSON
  delta-delete    --path P --predicate SQL
  delta-append    --path P --rows N --sort-by COL
  tpch-gen        --sf SF --out DIR                 (setup) TPC-H tables as parquet, with DuckDB's
                                                    dbgen; its 22 queries and official answers
  duckdb-tables   --table NAME=SOURCE.. --sql SQL   DuckDB over several tables: SOURCE is an
                                                    Iceberg metadata file (iceberg_scan) or a
                                                    list file of parquet files; every row answered
  duckdb-native   --db FILE [--load NAME=PARQUET].. --sql SQL   DuckDB over its own database
                                                    file (loading, untimed, makes the tables);
                                                    every row answered
  pyiceberg-load  --warehouse W --namespace NS --table NAME=PARQUET..   (setup) tables written
                                                    by pyiceberg into its SqlCatalog (SQLite)
  chart           --report JSON --out PNG
  tpch-chart      --report JSON --out PNG           benches/tpch.py's report as a chart
"""

import argparse
import glob
import json
import os
import sys
import time

THREADS = 2


def text(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def duckdb_connection(extensions=("avro", "iceberg")):
    import duckdb

    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    # The extensions come from PyPI wheels (duckdb-extension-avro / -iceberg), pinned to duckdb.
    import importlib

    for ext in extensions:
        module_name = f"duckdb_extension_{ext}"
        mod = importlib.import_module(module_name)
        hits = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", f"{ext}.duckdb_extension"))
        if not hits:
            raise RuntimeError(f"{ext}.duckdb_extension not found in {module_name}")
        con.execute(f"LOAD '{hits[0]}'")
    con.execute(f"SET threads = {THREADS}")
    return con


def cmd_duckdb(a) -> dict:
    con = duckdb_connection()
    query = a.sql.replace("{t}", f"iceberg_scan('{os.path.abspath(a.metadata)}')")
    query = query.replace("{m}", f"'{os.path.abspath(a.metadata)}'")
    start = time.perf_counter()
    row = con.execute(query).fetchone()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "answer": [text(v) for v in row]}


def cmd_duckdb_rest(a) -> dict:
    """DuckDB with httpfs + iceberg, the catalog ATTACHed as `lake` (the connection, secrets and
    ATTACH are not timed, like iceberg-exec's session; the statement, with its metadata and
    manifest reads, is)."""
    from urllib.parse import urlparse

    props = json.loads(a.catalog)
    con = duckdb_connection(("httpfs", "avro", "iceberg"))
    endpoint = urlparse(props["s3.endpoint"])
    con.execute(
        "CREATE SECRET s3 (TYPE S3, KEY_ID ?, SECRET ?, ENDPOINT ?, REGION ?, URL_STYLE 'path', USE_SSL ?)",
        [props["s3.access-key-id"], props["s3.secret-access-key"], endpoint.netloc,
         props.get("s3.region", "us-east-1"), endpoint.scheme == "https"],
    )
    client_id, client_secret = props["credential"].split(":", 1)
    con.execute(
        "CREATE SECRET rest (TYPE ICEBERG, CLIENT_ID ?, CLIENT_SECRET ?, OAUTH2_SERVER_URI ?)",
        [client_id, client_secret, props["uri"].rstrip("/") + "/v1/oauth/tokens"],
    )
    warehouse = urlparse(props["warehouse"]).netloc
    con.execute(f"ATTACH '{warehouse}' AS lake (TYPE ICEBERG, ENDPOINT '{props['uri']}', SECRET rest)")
    query = a.sql.replace("{t}", f"lake.{a.table}")
    start = time.perf_counter()
    rows = con.execute(query).fetchall()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "answer": [text(v) for v in rows[0]] if rows else []}


def rest_catalog(catalog_json: str):
    from pyiceberg.catalog import load_catalog

    props = json.loads(catalog_json)
    return load_catalog("bench", **props)


def cmd_rest_register(a) -> dict:
    table = rest_catalog(a.catalog).register_table(a.table, a.metadata)
    return {"seconds": 0.0, "answer": [table.metadata_location]}


def aggregate(table, aggs) -> list:
    """The aggregates of `aggs` ([["count"], ["sum", col], ["min", col], ["max", col]]) over an
    Arrow table, as DataFusion prints them."""
    import pyarrow.compute as pc

    out = []
    for agg in aggs:
        if agg[0] == "count":
            out.append(str(table.num_rows))
            continue
        fn = {"sum": pc.sum, "min": pc.min, "max": pc.max}[agg[0]]
        out.append(text(fn(table[agg[1]]).as_py()))
    return out


def agg_columns(aggs) -> list:
    cols = []
    for agg in aggs:
        if len(agg) > 1 and agg[1] not in cols:
            cols.append(agg[1])
    return cols


def pyiceberg_refusal(read):
    """(None, what `read()` gives), or ({"unsupported": why}, None) when pyiceberg refuses the
    table (equality deletes, say)."""
    try:
        return None, read()
    except NotImplementedError as e:
        return {"unsupported": f"pyiceberg: {e}"}, None
    except ValueError as e:
        if "equality" in str(e).lower():
            return {"unsupported": f"pyiceberg: {e}"}, None
        raise


def cmd_pyiceberg_scan(a) -> dict:
    from pyiceberg.table import StaticTable

    aggs = json.loads(a.aggs)
    cols = agg_columns(aggs) or ["id"]
    start = time.perf_counter()
    if a.catalog:
        table = rest_catalog(a.catalog).load_table(a.table)
    else:
        table = StaticTable.from_metadata(os.path.abspath(a.metadata))
    scan = table.scan(row_filter=a.filter or "True", selected_fields=tuple(cols))
    refused, arrow = pyiceberg_refusal(scan.to_arrow)
    if refused:
        return refused
    answer = aggregate(arrow, aggs)
    return {"seconds": time.perf_counter() - start, "answer": answer}


def load_catalog(warehouse: str):
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = os.path.abspath(warehouse)
    return SqlCatalog(
        "default",
        uri=f"sqlite:///{warehouse}/catalog.db",
        warehouse=f"file://{warehouse}",
    )


def cmd_pyiceberg_delete(a) -> dict:
    imported_pyiceberg()
    start = time.perf_counter()
    table = load_catalog(a.warehouse).load_table(a.table)
    table.delete(delete_filter=a.filter)
    return {"seconds": time.perf_counter() - start, "answer": []}


def generated(rows: int, sort_by: str | None):
    """The suite's rows 0..rows-1 (id, k, value, s) as an Arrow table, sorted by `sort_by`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.arange(rows, dtype=np.int64)
    table = pa.table(
        {
            "id": ids,
            "k": ids * 7919 % 1000003,
            "value": ids % 1000,
            "s": pc.binary_join_element_wise("str-", pc.cast(pa.array(ids % 5000), pa.string()), ""),
        }
    )
    if sort_by:
        table = table.sort_by(sort_by)
    return table


def cmd_pyiceberg_append(a) -> dict:
    start = time.perf_counter()
    data = generated(a.rows, a.sort_by)
    table = load_catalog(a.warehouse).load_table(a.table)
    # The table's schema types (nullable longs, string) and the generated columns match.
    data = data.cast(table.schema().as_arrow())
    table.append(data)
    return {"seconds": time.perf_counter() - start, "answer": []}


def aggregate_stream(batches, aggs) -> tuple[list, float]:
    """`aggregate` over a stream of record batches, holding one batch at a time; also the
    seconds spent aggregating (not the engine's: the caller takes them off its time)."""
    import pyarrow.compute as pc

    acc = [None] * len(aggs)
    rows = 0
    spent = 0.0
    for batch in batches:
        started = time.perf_counter()
        rows += batch.num_rows
        for i, agg in enumerate(aggs):
            if agg[0] == "count":
                continue
            v = {"sum": pc.sum, "min": pc.min, "max": pc.max}[agg[0]](batch.column(agg[1])).as_py()
            if v is None:
                continue
            old = acc[i]
            acc[i] = v if old is None else {"sum": old + v, "min": min(old, v), "max": max(old, v)}[agg[0]]
        spent += time.perf_counter() - started
    return [str(rows) if agg[0] == "count" else text(acc[i]) for i, agg in enumerate(aggs)], spent


def timed_read(start: float, read, a) -> dict:
    """The engine's time for `read()` (a pyarrow Table, or with --stream a stream of batches
    aggregated as they come), from `start`; the answer's aggregates are not timed."""
    aggs = json.loads(a.aggs)
    if a.stream:
        answer, spent = aggregate_stream(read(), aggs)
        return {"seconds": time.perf_counter() - start - spent, "answer": answer}
    table = read()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "answer": aggregate(table, aggs)}


def imported_pyiceberg() -> None:
    """pyiceberg's catalog and pyarrow, imported before a timed part (imports are not timed)."""
    import pyarrow  # noqa: F401
    import pyiceberg.catalog.sql  # noqa: F401


def imported_package() -> None:
    """iceberg-exec's Python package and pyarrow, imported before a timed part."""
    import iceberg_exec  # noqa: F401
    import pyarrow  # noqa: F401


def cmd_pyiceberg_read(a) -> dict:
    imported_pyiceberg()
    start = time.perf_counter()
    table = load_catalog(a.warehouse).load_table(a.table)
    scan = table.scan(row_filter=a.filter or "True")
    refused, doc = pyiceberg_refusal(
        lambda: timed_read(start, scan.to_arrow_batch_reader if a.stream else scan.to_arrow, a))
    return refused or doc


def cmd_pyarrow_read(a) -> dict:
    """The floor of a scan to pyarrow: pyarrow's own reader over the bare data files (no
    metadata, no deletes applied)."""
    import pyarrow.compute  # noqa: F401
    import pyarrow.dataset as ds

    files = [f.removeprefix("file://") for f in open(a.files).read().split() if f]
    start = time.perf_counter()
    dataset = ds.dataset(files, format="parquet")
    return timed_read(start, dataset.to_batches if a.stream else dataset.to_table, a)


def python_session(a):
    from iceberg_exec import Session

    return Session(warehouse=os.path.abspath(a.warehouse), memory_limit=a.memory_limit)


def cmd_py_read(a) -> dict:
    imported_package()
    start = time.perf_counter()
    reader = python_session(a).scan(a.table, row_filter=a.filter or "")
    return timed_read(start, (lambda: reader) if a.stream else reader.read_all, a)


def cmd_py_delete(a) -> dict:
    imported_package()
    start = time.perf_counter()
    deleted = python_session(a).delete(a.table, a.filter)
    return {"seconds": time.perf_counter() - start, "answer": [str(deleted)]}


def upsert_source(rows: int, changes: int, schema):
    """`changes` rows for an upsert into the suite's table of `rows` rows: half update the rows
    whose id is a multiple of 20 (spread over every file; value + 1, the other columns as they
    are), half are new ids after the last. Same formulas as the generator."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    half = changes // 2
    ids = np.concatenate([np.arange(half, dtype=np.int64) * 20, rows + np.arange(changes - half, dtype=np.int64)])
    data = pa.table(
        {
            "id": ids,
            "k": ids * 7919 % 1000003,
            "value": ids % 1000 + 1,
            "s": pc.binary_join_element_wise("str-", pc.cast(pa.array(ids % 5000), pa.string()), ""),
        }
    )
    return data.cast(schema)


def cmd_pyiceberg_upsert(a) -> dict:
    table = load_catalog(a.warehouse).load_table(a.table)
    data = upsert_source(a.rows, a.changes, table.schema().as_arrow())
    start = time.perf_counter()
    table = load_catalog(a.warehouse).load_table(a.table)
    got = table.upsert(data, join_cols=["id"])
    return {"seconds": time.perf_counter() - start, "answer": [str(got.rows_updated), str(got.rows_inserted)]}


def cmd_py_upsert(a) -> dict:
    # The same input, built as pyiceberg's is (untimed; the table's Arrow schema from the
    # engine: pyiceberg is not imported), and handed over as a pyarrow Table.
    session = python_session(a)
    schema = session.sql(f"SELECT * FROM {a.table} LIMIT 0").to_arrow().schema
    data = upsert_source(a.rows, a.changes, schema)
    start = time.perf_counter()
    got = python_session(a).upsert(a.table, data, join_cols=["id"])
    return {"seconds": time.perf_counter() - start, "answer": [str(got.rows_updated), str(got.rows_inserted)]}


def cmd_delta_create(a) -> dict:
    import pyarrow.dataset as ds
    from deltalake import WriterProperties, write_deltalake

    files = [line for line in open(a.files).read().splitlines() if line]
    # deltalake's default codec, or the Iceberg tables' (zstd level 3) for inputs of the same bytes.
    props = WriterProperties(compression="ZSTD", compression_level=3) if a.zstd else None
    if a.one_per_file:
        # One Delta data file per source file, as the Iceberg table has them.
        for i, f in enumerate(files):
            table = ds.dataset([f], format="parquet").to_table()
            write_deltalake(a.path, table, mode="overwrite" if i == 0 else "append", writer_properties=props)
    else:
        write_deltalake(a.path, ds.dataset(files, format="parquet").to_table(), mode="overwrite",
                        writer_properties=props)
    return {"seconds": 0.0, "answer": []}


def cmd_delta_scan(a) -> dict:
    from deltalake import DeltaTable

    aggs = json.loads(a.aggs)
    start = time.perf_counter()
    arrow = DeltaTable(a.path).to_pyarrow_table(columns=agg_columns(aggs) or None)
    return {"seconds": time.perf_counter() - start, "answer": aggregate(arrow, aggs)}


def cmd_delta_delete(a) -> dict:
    from deltalake import DeltaTable

    start = time.perf_counter()
    metrics = DeltaTable(a.path).delete(a.predicate)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "answer": [str(metrics.get("num_deleted_rows"))]}


def cmd_delta_optimize(a) -> dict:
    """Bin-pack compaction of a Delta table into files of --target-size bytes; answers the
    bytes and files it rewrote."""
    from deltalake import DeltaTable

    from deltalake import WriterProperties

    # Its default codec (snappy), or the one Iceberg tables default to (zstd, level 3).
    props = WriterProperties(compression="ZSTD", compression_level=3) if a.zstd else None
    start = time.perf_counter()
    metrics = DeltaTable(a.path).optimize.compact(target_size=a.target_size, writer_properties=props)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "answer": [str(metrics.get("numFilesRemoved")), str(metrics.get("numFilesAdded"))],
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
    }


def cmd_delta_append(a) -> dict:
    from deltalake import write_deltalake

    start = time.perf_counter()
    write_deltalake(a.path, generated(a.rows, a.sort_by), mode="append")
    return {"seconds": time.perf_counter() - start, "answer": []}


def change_set(rows: int, changes: int):
    """The MERGE scenarios' change set: row v (0-based) updates id v * 19 % rows when v is even
    (distinct ids spread over the table) and inserts id rows + v when odd; value = v % 1000."""
    import numpy as np
    import pyarrow as pa

    v = np.arange(changes, dtype=np.int64)
    ids = np.where(v % 2 == 0, v * 19 % rows, rows + v)
    return pa.table({"id": pa.array(ids, pa.int64()), "value": pa.array(v % 1000, pa.int64())})


MERGE_SQL = (
    "MERGE INTO t USING src AS s ON t.id = s.id "
    "WHEN MATCHED THEN UPDATE SET value = s.value "
    "WHEN NOT MATCHED THEN INSERT (id, k, value, s) VALUES (s.id, s.id, s.value, 'new')"
)


def cmd_delta_merge(a) -> dict:
    from deltalake import DeltaTable

    src = change_set(a.rows, a.changes)
    start = time.perf_counter()
    (
        DeltaTable(a.path)
        .merge(source=src, predicate="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update(updates={"value": "s.value"})
        .when_not_matched_insert(updates={"id": "s.id", "k": "s.id", "value": "s.value", "s": "'new'"})
        .execute()
    )
    return {"seconds": time.perf_counter() - start, "answer": []}


def cmd_duckdb_merge(a) -> dict:
    """DuckDB's MERGE into its own native table loaded from the same data files (loading is not
    timed): DuckDB 1.5.5 cannot write Iceberg tables outside a REST catalog."""
    con = duckdb_connection()
    files = [line for line in open(a.files).read().splitlines() if line]
    con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?)", [files])
    src = change_set(a.rows, a.changes)
    con.register("src", src)
    start = time.perf_counter()
    con.execute(MERGE_SQL)
    seconds = time.perf_counter() - start
    row = con.execute("SELECT count(*), sum(value) FROM t").fetchone()
    return {"seconds": seconds, "answer": [text(v) for v in row]}


def cmd_chart(a) -> dict:
    """One panel per scenario: each engine's median time (log scale); capped and failed runs
    are marked, not drawn as numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = json.load(open(a.report))
    scenarios = [s for s in report["scenarios"] if s["engines"]]
    cols = 2
    rows = (len(scenarios) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(13, 2.6 * rows + 0.8), squeeze=False)
    for ax in axes.flat[len(scenarios):]:
        ax.axis("off")
    for ax, s in zip(axes.flat, scenarios):
        names, values, colors, labels = [], [], [], []
        cap = report["cap_s"]
        for e in s["engines"]:
            names.append(e["engine"])
            if e["status"] == "ok":
                values.append(e["median_s"])
                colors.append("#1f77b4" if e["engine"].startswith("iceberg-exec") else "#9e9e9e")
                labels.append(f"{e['median_s']:.3g} s")
            elif e["status"] == "cap":
                values.append(cap)
                colors.append("#d62728")
                labels.append(f"> {cap:g} s (cap)")
            else:
                values.append(None)
                colors.append("#ffffff")
                labels.append(e["status"])
        shown = [v for v in values if v]
        lo = min(shown) / 4 if shown else 1e-3
        hi = max(shown) * 12 if shown else 1.0
        hi = max(hi, lo * 100)  # at least two decades: readable log ticks
        y = list(range(len(names)))
        ax.barh(y, [(v - lo) if v else 0 for v in values], left=lo, color=colors, edgecolor="#444")
        ax.set_yticks(y, names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_xlabel("seconds (log)", fontsize=7)
        ax.set_title(s["title"], fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        for yi, (v, label) in enumerate(zip(values, labels)):
            ax.text((v or lo) * 1.1, yi, label, va="center", fontsize=7)
    fig.suptitle(f"iceberg-exec benchmark suite ({report['scale']} scale, {report['machine']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    return {"seconds": 0.0, "answer": [a.out]}


def cmd_tpch_chart(a) -> dict:
    """TPC-H: per query, iceberg-exec's time over each peer's (1 is parity, below is faster);
    then per write mode, each query's time after the refresh rounds and after compaction over
    its time before them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report = json.load(open(a.report))

    def median(sc, engine):
        r = next((r for r in sc["engines"] if r["engine"] == engine), None)
        return r["median_s"] if r and r["status"] == "ok" else None

    panels = [("iceberg-exec / peer", [sc["name"].rsplit("_", 1)[-1].upper() for sc in report["queries"]],
               {peer: [(median(sc, "iceberg-exec") or 0) / m if (m := median(sc, peer)) else 0
                       for sc in report["queries"]]
                for peer in ("DataFusion, bare parquet (limit)", "DuckDB 1.5.5 iceberg_scan")})]
    for mode, doc in report.get("refresh", {}).items():
        names = [sc["name"].rsplit("_", 1)[-1].upper() for sc in doc["after"]]
        series = {}
        for phase, label in (("after", f"after {report['rounds']} rounds"), ("compacted", "after compaction")):
            series[label] = [
                (median(sc, "iceberg-exec") or 0) / b if (b := median(sc, "iceberg-exec, before the rounds")) else 0
                for sc in doc[phase]
            ]
        panels.append((f"{mode}: time / time before the rounds (measured side by side)", names, series))
    if not report["queries"]:
        panels = panels[1:]
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 3.2 * len(panels) + 0.6), squeeze=False)
    for ax, (title, names, series) in zip(axes.flat, panels):
        width = 0.8 / max(1, len(series))
        for i, (label, values) in enumerate(series.items()):
            ax.bar([x + i * width for x in range(len(names))], values, width, label=label)
        ax.axhline(1.0, color="#444", linewidth=0.8)
        ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(names))], names, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"TPC-H sf {report['sf']:g} ({report['machine']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    return {"seconds": 0.0, "answer": [a.out]}


def cmd_tpch_gen(a) -> dict:
    """TPC-H at scale factor `sf` (DuckDB's dbgen): DIR/<table>.parquet, DIR/queries/qN.sql,
    and DIR/answers/qN.json (the official answer's rows as text) where DuckDB ships one."""
    con = duckdb_connection(extensions=("tpch",))
    start = time.perf_counter()
    con.execute(f"CALL dbgen(sf={a.sf})")
    os.makedirs(os.path.join(a.out, "queries"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "answers"), exist_ok=True)
    tables = [t for (t,) in con.execute("SHOW TABLES").fetchall()]
    for t in tables:
        con.execute(f"COPY {t} TO '{os.path.join(a.out, t + '.parquet')}' (FORMAT parquet)")
    for nr, q in con.execute("SELECT query_nr, query FROM tpch_queries()").fetchall():
        open(os.path.join(a.out, "queries", f"q{nr}.sql"), "w").write(q)
    answered = 0
    for nr, answer in con.execute(
        "SELECT query_nr, answer FROM tpch_answers() WHERE scale_factor = ?", [a.sf]
    ).fetchall():
        # A header line, then one line per row (an empty line is a row of one NULL); the text
        # ends with a newline.
        lines = answer.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        rows = [l.split("|") for l in lines[1:]]
        json.dump(rows, open(os.path.join(a.out, "answers", f"q{nr}.json"), "w"))
        answered += 1
    return {"seconds": time.perf_counter() - start, "answer": [str(len(tables)), str(answered)]}


def cmd_duckdb_tables(a) -> dict:
    con = duckdb_connection()
    for spec in a.table:
        name, source = spec.split("=", 1)
        if source.endswith(".json"):
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM iceberg_scan('{os.path.abspath(source)}')")
        else:
            files = [l for l in open(source).read().splitlines() if l]
            listed = ", ".join(f"'{f}'" for f in files)
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{listed}])")
    start = time.perf_counter()
    rows = con.execute(a.sql).fetchall()
    seconds = time.perf_counter() - start
    rows = [[text(v) for v in r] for r in rows]
    return {"seconds": seconds, "answer": rows[0] if rows else [], "rows": rows}


def cmd_duckdb_native(a) -> dict:
    import duckdb

    con = duckdb.connect(a.db)
    con.execute(f"SET threads = {THREADS}")
    for spec in a.load or []:
        name, source = spec.split("=", 1)
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM read_parquet(?)", [source])
    start = time.perf_counter()
    rows = con.execute(a.sql).fetchall()
    seconds = time.perf_counter() - start
    con.close()
    rows = [[text(v) for v in r] for r in rows]
    return {"seconds": seconds, "answer": rows[0] if rows else [], "rows": rows}


def cmd_pyiceberg_load(a) -> dict:
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "default",
        uri="sqlite:///" + os.path.join(os.path.abspath(a.warehouse), "catalog.db"),
        warehouse="file://" + os.path.abspath(a.warehouse),
    )
    catalog.create_namespace_if_not_exists(a.namespace)
    start = time.perf_counter()
    rows = 0
    for spec in a.table:
        name, source = spec.split("=", 1)
        data = pq.read_table(source)
        table = catalog.create_table(f"{a.namespace}.{name}", schema=data.schema)
        table.append(data)
        rows += data.num_rows
    return {"seconds": time.perf_counter() - start, "answer": [str(rows)]}


def cmd_pyiceberg_inspect(a) -> dict:
    """The row count of one of pyiceberg's metadata tables (`table.inspect.<kind>()`)."""
    imported_pyiceberg()
    start = time.perf_counter()
    table = load_catalog(a.warehouse).load_table(a.table)
    answer = getattr(table.inspect, a.kind)()
    return {"seconds": time.perf_counter() - start, "answer": [str(answer.num_rows)]}


def cmd_write_files(a) -> dict:
    """N parquet files of 100 rows each (the suite's columns), without field ids."""
    import pyarrow.parquet as pq

    os.makedirs(a.out, exist_ok=True)
    rows = generated(100 * a.files, None)
    for i in range(a.files):
        pq.write_table(rows.slice(100 * i, 100), os.path.join(a.out, f"part-{i:06d}.parquet"))
    return {"seconds": 0.0, "answer": [str(a.files)]}


def cmd_pyiceberg_add_files(a) -> dict:
    """pyiceberg's add_files of every parquet file in DIR."""
    imported_pyiceberg()
    start = time.perf_counter()
    table = load_catalog(a.warehouse).load_table(a.table)
    paths = sorted(os.path.join(a.dir, f) for f in os.listdir(a.dir) if f.endswith(".parquet"))
    table.add_files(file_paths=paths)
    return {"seconds": time.perf_counter() - start, "answer": [str(len(paths))]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("duckdb")
    c.add_argument("--metadata", required=True)
    c.add_argument("--sql", required=True)
    c = sub.add_parser("duckdb-rest")
    c.add_argument("--catalog", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--sql", required=True)
    c = sub.add_parser("rest-register")
    c.add_argument("--catalog", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--metadata", required=True)
    c = sub.add_parser("pyiceberg-scan")
    c.add_argument("--metadata")
    c.add_argument("--catalog")
    c.add_argument("--table")
    c.add_argument("--filter")
    c.add_argument("--aggs", required=True)
    c = sub.add_parser("pyiceberg-inspect")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--kind", required=True)
    c = sub.add_parser("write-files")
    c.add_argument("--out", required=True)
    c.add_argument("--files", type=int, required=True)
    c = sub.add_parser("pyiceberg-add-files")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--dir", required=True)
    c = sub.add_parser("pyiceberg-delete")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--filter", required=True)
    c = sub.add_parser("pyiceberg-append")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--rows", type=int, required=True)
    c.add_argument("--sort-by")
    c = sub.add_parser("pyarrow-read")
    c.add_argument("--files", required=True)
    c.add_argument("--stream", action="store_true")
    c.add_argument("--aggs", required=True)
    for name in ("pyiceberg-read", "py-read"):
        c = sub.add_parser(name)
        c.add_argument("--warehouse", required=True)
        c.add_argument("--table", required=True)
        c.add_argument("--filter")
        c.add_argument("--stream", action="store_true")
        c.add_argument("--aggs", required=True)
        c.add_argument("--memory-limit")
    c = sub.add_parser("py-delete")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--filter", required=True)
    c.add_argument("--memory-limit")
    for name in ("pyiceberg-upsert", "py-upsert"):
        c = sub.add_parser(name)
        c.add_argument("--warehouse", required=True)
        c.add_argument("--table", required=True)
        c.add_argument("--rows", type=int, required=True)
        c.add_argument("--changes", type=int, required=True)
        c.add_argument("--memory-limit")
    c = sub.add_parser("delta-create")
    c.add_argument("--path", required=True)
    c.add_argument("--files", required=True)
    c.add_argument("--one-per-file", action="store_true")
    c.add_argument("--zstd", action="store_true", help="write zstd (level 3) instead of deltalake's default")
    c = sub.add_parser("delta-scan")
    c.add_argument("--path", required=True)
    c.add_argument("--aggs", required=True)
    c = sub.add_parser("delta-delete")
    c.add_argument("--path", required=True)
    c.add_argument("--predicate", required=True)
    c = sub.add_parser("delta-optimize")
    c.add_argument("--path", required=True)
    c.add_argument("--target-size", type=int, required=True)
    c.add_argument("--zstd", action="store_true", help="write zstd (level 3) instead of deltalake's default")
    c = sub.add_parser("delta-append")
    c.add_argument("--path", required=True)
    c.add_argument("--rows", type=int, required=True)
    c.add_argument("--sort-by")
    c = sub.add_parser("delta-merge")
    c.add_argument("--path", required=True)
    c.add_argument("--rows", type=int, required=True)
    c.add_argument("--changes", type=int, required=True)
    c = sub.add_parser("duckdb-merge")
    c.add_argument("--files", required=True)
    c.add_argument("--rows", type=int, required=True)
    c.add_argument("--changes", type=int, required=True)
    c = sub.add_parser("tpch-gen")
    c.add_argument("--sf", type=float, required=True)
    c.add_argument("--out", required=True)
    c = sub.add_parser("duckdb-tables")
    c.add_argument("--table", action="append", required=True)
    c.add_argument("--sql", required=True)
    c = sub.add_parser("duckdb-native")
    c.add_argument("--db", required=True)
    c.add_argument("--load", action="append")
    c.add_argument("--sql", required=True)
    c = sub.add_parser("pyiceberg-load")
    c.add_argument("--warehouse", required=True)
    c.add_argument("--namespace", required=True)
    c.add_argument("--table", action="append", required=True)
    c = sub.add_parser("tpch-chart")
    c.add_argument("--report", required=True)
    c.add_argument("--out", required=True)
    c = sub.add_parser("chart")
    c.add_argument("--report", required=True)
    c.add_argument("--out", required=True)
    a = p.parse_args()
    out = globals()["cmd_" + a.command.replace("-", "_")](a)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
