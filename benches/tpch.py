#!/usr/bin/env python3
"""TPC-H on Iceberg tables: the 22 queries through iceberg-exec, side by side in one run with
DataFusion over the same parquet files (the limit), DuckDB 1.5.5 over the Iceberg tables
(`iceberg_scan`) and DuckDB over the bare files; every answer checked against TPC-H's official
one (DuckDB's tpch extension ships them for scale factors 0.01, 0.1 and 1).

    python3 benches/tpch.py                      # sf 1, release build, 3 runs per engine
    python3 benches/tpch.py --sf 10              # if the disk allows
    python3 benches/tpch.py --quick              # sf 0.01, debug build, one run (a smoke test)
    python3 benches/tpch.py --memory-limit 256MiB --queries 18,21

From nothing, it creates the venv of the suite (benches/compare.py), builds `bench-engine`,
generates the tables with DuckDB's dbgen (parquet), loads them into Iceberg tables through
iceberg-exec's own commit path (`CREATE TABLE tpch.<t> AS SELECT * FROM <the parquet files>`),
then runs each query in a fresh process per engine, engines alternating, `--runs` times. The
limit and DuckDB-bare read the Iceberg tables' data files. The same tables written by pyiceberg
(its SqlCatalog) are queried too. Where TPC-H ships no official answer (sf 10), DuckDB's answer
over the same files is the reference.

Then, per write mode (`--modes`), fresh tables go through `--rounds` rounds of the refresh
functions RF1 and RF2 (see `refresh_functions`), timed statement by statement against DuckDB
running the same statements on its native tables; the queries run before the rounds, after
them and after `rewrite_data_files`, their rows checked against DuckDB's native tables.

Times are the median of the runs as each engine reports the statement (planning and execution,
not process start); the report gives each engine's time over ours and the geometric means, in
target/bench-report/tpch.{md,json,png}.
"""

import argparse
import glob
import json
import math
import os
import shutil
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
from compare import DUCKDB, LIMIT, OURS, Suite, log, target_dir  # noqa: E402

DUCKDB_BARE = "DuckDB 1.5.5, bare parquet"
TABLES = ["nation", "region", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]


def close(got: str, want: str) -> bool:
    """Equal as text, or as numbers to the official answers' precision (they print averages
    with more digits than a decimal result holds)."""
    got, want = got.strip(), want.strip()
    if got == want or {got, want} == {"NULL", ""}:
        return True
    try:
        g, w = float(got), float(want)
    except ValueError:
        return False
    return abs(g - w) <= max(0.01, 1e-9 * abs(w))


def verdict(rows, want) -> str:
    if rows is None:
        return "no rows reported"
    if len(rows) != len(want):
        return f"{len(rows)} rows, official {len(want)}"
    for i, (r, w) in enumerate(zip(rows, want)):
        if len(r) != len(w) or not all(close(str(g), x) for g, x in zip(r, w)):
            return f"row {i}: {r} != official {w}"
    return "ok"


DUCKDB_NATIVE = "DuckDB 1.5.5, native tables"
OURS_PYICEBERG = "iceberg-exec, tables written by pyiceberg"
OURS_BEFORE = "iceberg-exec, before the rounds"
MODES = ("copy-on-write", "merge-on-read")
ORDERS = ["o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate", "o_orderpriority",
          "o_clerk", "o_shippriority", "o_comment"]
LINEITEM = ["l_orderkey", "l_partkey", "l_suppkey", "l_linenumber", "l_quantity", "l_extendedprice",
            "l_discount", "l_tax", "l_returnflag", "l_linestatus", "l_shipdate", "l_commitdate",
            "l_receiptdate", "l_shipinstruct", "l_shipmode", "l_comment"]


def refresh_functions(r: int, sf: float, spread: bool) -> list:
    """Round `r` (from 1) of TPC-H's refresh functions, in SQL both engines run as written.

    Order keys come in groups of 32 of which 8 are used, so 1,500 x SF orders (a refresh set of
    the specification) span 6,000 x SF keys. RF2 deletes, as dbgen's delete sets do, the oldest
    orders: round r the r-th block of 6,000 x SF keys from the start, first their lineitems (a
    subquery: the specification's delete set is a list of order keys), then the orders. With
    `spread`, it deletes 1/1000 of the orders spread over the whole key range instead (every
    group whose number is r modulo 1000), so every data file has deleted rows. RF1 inserts as
    many new orders with their lineitems: copies of another block (the middle of the key range)
    under new keys (+ r x 10^8) and, so that no copy ties with its original in an ORDER BY, an
    order date r days later."""
    width = max(32, int(6000 * sf))
    off = 100_000_000 * r
    src_lo = int(3_000_000 * sf) + (r - 1) * width + 1
    source = lambda k: f"{k} BETWEEN {src_lo} AND {src_lo + width - 1}"  # noqa: E731
    if spread:
        gone = lambda k: f"{k} % 32000 BETWEEN {32 * r} AND {32 * r + 31}"  # noqa: E731
    else:
        lo = (r - 1) * width + 1
        gone = lambda k: f"{k} BETWEEN {lo} AND {lo + width - 1}"  # noqa: E731

    def copy(table, cols, changed):
        select = ", ".join(changed.get(c, c) for c in cols)
        return f"INSERT INTO {table} SELECT {select} FROM {table} WHERE {source(cols[0])}"

    return [
        ("RF1", copy("orders", ORDERS, {"o_orderkey": f"o_orderkey + {off}",
                                        "o_orderdate": f"o_orderdate + INTERVAL '{r} days'"})),
        ("RF1", copy("lineitem", LINEITEM, {"l_orderkey": f"l_orderkey + {off}"})),
        ("RF2", f"DELETE FROM lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM orders WHERE {gone('o_orderkey')})"),
        ("RF2", f"DELETE FROM orders WHERE {gone('o_orderkey')}"),
    ]


def load(s, data: str, wh: str, work: str) -> None:
    """The tables loaded through iceberg-exec's own commit path: `CREATE TABLE tpch.<t> AS SELECT`
    from the generated files."""
    sources = []
    for t in TABLES:
        listfile = os.path.join(work, f"source-{t}.txt")
        open(listfile, "w").write(os.path.join(data, f"{t}.parquet") + "\n")
        sources += ["--parquet", f"{t}={listfile}"]
    s.engine_json("sql", "--warehouse", wh, "--sql", "CREATE SCHEMA IF NOT EXISTS tpch")
    for t in TABLES:
        t0 = time.monotonic()
        s.engine_json("sql", "--warehouse", wh, *sources, "--sql",
                      f"CREATE TABLE tpch.{t} AS SELECT * FROM bare.public.{t}")
        log(f"  {os.path.basename(wh)} tpch.{t}: {time.monotonic() - t0:.1f} s")


def metadata_locations(wh: str) -> dict:
    con = sqlite3.connect(os.path.join(wh, "catalog.db"))
    try:
        return {
            name: loc.removeprefix("file://")
            for name, loc in con.execute(
                "SELECT table_name, metadata_location FROM iceberg_tables WHERE table_namespace = 'tpch'"
            ).fetchall()
        }
    finally:
        con.close()


def phase(s, args, data, wanted, label, title, goal, engines_for, reference) -> list:
    """One scenario per query; every run's rows checked against `reference(n, q)`, rows or a
    function of the engine giving them (None: not checked). Returns the phase's scenarios."""
    before = len(s.scenarios)
    for n in wanted:
        q = open(os.path.join(data, "queries", f"q{n}.sql")).read()
        ref = reference(n, q)
        want = ref if callable(ref) else (lambda e, ref=ref: ref)
        s.scenario(
            f"{label}q{n}", f"TPC-H Q{n}, {title}", goal, engines_for(q),
            expected=lambda e, want=want: ["ok"] if want(e) is not None else None,
            after_each=lambda e, run, want=want: [verdict(run.doc.get("rows"), want(e)) if want(e) is not None else "ok"],
        )
    return s.scenarios[before:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", type=float, help="scale factor (default 1; 0.01 with --quick)")
    p.add_argument("--quick", action="store_true", help="sf 0.01, debug build, one run, 2 refresh rounds")
    p.add_argument("--runs", type=int, help="runs per engine (default 3; 1 with --quick)")
    p.add_argument("--cap", type=float, default=600.0, help="seconds before a run is killed")
    p.add_argument("--queries", help="comma-separated query numbers (default all 22)")
    p.add_argument("--memory-limit", help="iceberg-exec's and the limit's memory pool, e.g. 256MiB")
    p.add_argument("--cold-limit", action="store_true",
                   help="the limit's clock covers registering its files too (DataFusion reads every footer "
                        "for the schema), as ours covers reading the catalog, metadata and manifests")
    p.add_argument("--rounds", type=int, help="refresh rounds (RF1 + RF2) per write mode (default 10; 2 "
                   "with --quick; 0: none)")
    p.add_argument("--modes", default=",".join(MODES), help="write modes of the refresh rounds")
    p.add_argument("--spread-deletes", action="store_true",
                   help="RF2 deletes orders spread over the key range (every data file), not the oldest")
    p.add_argument("--refresh-only", action="store_true", help="skip the queries over the loaded tables")
    p.add_argument("--no-pyiceberg", action="store_true", help="skip the queries over tables pyiceberg wrote")
    p.add_argument("--out", default=os.path.join(compare.REPO, "target", "bench-report"))
    p.add_argument("--venv", default=os.environ.get("ICEBERG_EXEC_VENV") or os.path.expanduser("~/.cache/iceberg-exec-venv"))
    args = p.parse_args()
    sf = args.sf or (0.01 if args.quick else 1.0)
    args.sf_value = sf
    args.runs = args.runs or (1 if args.quick else 3)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 10)
    modes = [m for m in args.modes.split(",") if m] if rounds else []
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"--modes: {m} is not one of {', '.join(MODES)}")
    # What compare.py's Suite reads.
    args.no_build_peers, args.distributed, args.scenarios = True, False, None
    args.work = os.path.join(target_dir(), "bench-work", f"tpch-sf{sf:g}")
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    s = Suite(args)
    E = s.engine
    started = time.monotonic()

    data = os.path.join(args.work, "data")
    if not os.path.exists(os.path.join(data, "queries", "q22.sql")):
        log(f"generating TPC-H sf {sf:g} (DuckDB dbgen)")
        s_gen = compare.run_process(s.peers("tpch-gen", "--sf", str(sf), "--out", data), 3600)
        if s_gen.status != "ok":
            raise SystemExit(f"tpch-gen: {s_gen.status} {s_gen.detail}")
    parquet = {t: os.path.join(data, f"{t}.parquet") for t in TABLES}
    wh = os.path.join(args.work, "warehouse")
    stamp = os.path.join(wh, "loaded")
    if not os.path.exists(stamp):
        log("loading the tables through iceberg-exec (CREATE TABLE ... AS SELECT)")
        shutil.rmtree(wh, ignore_errors=True)
        os.makedirs(wh)
        load(s, data, wh, args.work)
        open(stamp, "w").write("ok")
    py_wh = os.path.join(args.work, "warehouse-pyiceberg")
    if not args.no_pyiceberg and not os.path.exists(os.path.join(py_wh, "loaded")):
        log("loading the tables through pyiceberg (its SqlCatalog, append)")
        shutil.rmtree(py_wh, ignore_errors=True)
        os.makedirs(py_wh)
        run = compare.run_process(s.peers("pyiceberg-load", "--warehouse", py_wh, "--namespace", "tpch",
                                          *[a for t in TABLES for a in ("--table", f"{t}={parquet[t]}")]), 3600)
        if run.status != "ok":
            raise SystemExit(f"pyiceberg-load: {run.status} {run.detail}")
        open(os.path.join(py_wh, "loaded"), "w").write("ok")

    # The tables' metadata files and data files (freshly created: every file in data/ is live).
    metadata = metadata_locations(wh)
    lists = {}
    for t in TABLES:
        files = sorted(glob.glob(os.path.join(wh, "tpch", t, "data", "*.parquet")))
        lists[t] = os.path.join(args.work, f"files-{t}.txt")
        open(lists[t], "w").write("\n".join(files) + "\n")
    bare = [a for t in TABLES for a in ("--parquet", f"{t}={lists[t]}")]
    pool = ["--memory-limit", args.memory_limit] if args.memory_limit else []

    def ours(warehouse):
        return [E, "sql", "--warehouse", warehouse, "--set", "datafusion.catalog.default_schema=tpch", *pool]

    def duckdb_iceberg(warehouse):
        m = metadata_locations(warehouse)
        return s.peers("duckdb-tables", *[a for t in TABLES for a in ("--table", f"{t}={m[t]}")])

    def official(n, q):
        """TPC-H's answer (shipped for sf 0.01, 0.1 and 1); at other scale factors, DuckDB's
        over the same files (one untimed run)."""
        answer_file = os.path.join(data, "answers", f"q{n}.json")
        if os.path.exists(answer_file):
            return json.load(open(answer_file))
        run = compare.run_process(
            s.peers("duckdb-tables", *[a for t in TABLES for a in ("--table", f"{t}={lists[t]}")], "--sql", q),
            args.cap)
        if run.status != "ok":
            raise SystemExit(f"DuckDB over the files, Q{n} (the reference at sf {sf:g}): {run.status} {run.detail}")
        return run.doc["rows"]

    wanted = [int(q) for q in args.queries.split(",")] if args.queries else list(range(1, 23))
    pyiceberg = [] if args.no_pyiceberg else [(OURS_PYICEBERG, ours(py_wh))]
    queries = [] if args.refresh_only else phase(
        s, args, data, wanted, "tpch_", f"sf {sf:g}", "within 1.05x of the limit",
        lambda q: [
            (OURS, [*ours(wh), "--sql", q]),
            (LIMIT, [E, "datafusion", *bare, *pool, *(["--cold"] if args.cold_limit else []), "--sql", q]),
            (DUCKDB, [*duckdb_iceberg(wh), "--sql", q]),
            (DUCKDB_BARE, s.peers("duckdb-tables", *[a for t in TABLES for a in ("--table", f"{t}={lists[t]}")],
                                  "--sql", q)),
            *[(e, [*argv, "--sql", q]) for e, argv in pyiceberg],
        ],
        official,
    )

    refresh = {}
    for mode in modes:
        refresh[mode] = refresh_rounds(s, args, data, wanted, parquet, mode, rounds, ours, duckdb_iceberg, wh,
                                       official)

    report = {"sf": sf, "machine": compare.machine(), "memory_limit": args.memory_limit,
              "cold_limit": args.cold_limit,
              "seconds": round(time.monotonic() - started), "queries": queries, "rounds": rounds,
              "refresh": refresh}
    md = markdown(report)
    json.dump(report, open(os.path.join(args.out, "tpch.json"), "w"), indent=1)
    open(os.path.join(args.out, "tpch.md"), "w").write(md)
    chart = compare.run_process(s.peers("tpch-chart", "--report", os.path.join(args.out, "tpch.json"),
                                        "--out", os.path.join(args.out, "tpch.png")), 300)
    if chart.status != "ok":
        log(f"no chart: {chart.status} {chart.detail}")
    print(md)
    wrong = [sc["name"] for sc in queries for r in sc["engines"]
             if r["engine"] in (OURS, OURS_PYICEBERG) and r["status"] != "ok"]
    for mode, doc in refresh.items():
        wrong += [f"{mode} {st['sql'][:40]}" for st in doc["statements"] if st["ours"]["status"] != "ok"]
        for ph in ("after", "compacted"):
            wrong += [f"{mode} {sc['name']} ({r['engine']})" for sc in doc[ph] for r in sc["engines"]
                      if r["engine"] in (OURS, OURS_BEFORE) and r["status"] != "ok"]
    if wrong:
        log(f"iceberg-exec did not answer right: {wrong}")
        return 1
    return 0


def refresh_rounds(s, args, data, wanted, parquet, mode, rounds, ours, duckdb_iceberg, base_wh, official) -> dict:
    """Fresh tables in `mode` (ours through our commit path, DuckDB's native ones from the same
    files), `rounds` rounds of RF1 + RF2 (each statement in a fresh process per engine, the rows
    changed compared), the queries, compaction, the queries again. Each query runs side by side
    with iceberg-exec over the untouched tables of the first part (the same files as these
    before the rounds), so that the ratio to before is measured at the same moment, not minutes
    apart on a machine whose speed drifts. Rows are checked against DuckDB's native tables in
    the same state (and, before the rounds, against the official answers)."""
    log(f"refresh rounds, {mode}")
    wh = os.path.join(args.work, f"refresh-{mode}")
    db = os.path.join(args.work, f"refresh-{mode}.duckdb")
    shutil.rmtree(wh, ignore_errors=True)
    os.makedirs(wh)
    for f in (db, db + ".wal"):
        if os.path.exists(f):
            os.remove(f)
    load(s, data, wh, args.work)
    for t in ("orders", "lineitem"):
        props = ", ".join(f"'write.{op}.mode' = '{mode}'" for op in ("delete", "update", "merge"))
        s.engine_json("sql", "--warehouse", wh, "--sql", f"ALTER TABLE tpch.{t} SET TBLPROPERTIES ({props})")
    run = compare.run_process(s.peers("duckdb-native", "--db", db,
                                      *[a for t in TABLES for a in ("--load", f"{t}={parquet[t]}")],
                                      "--sql", "SELECT count(*) FROM lineitem"), 3600)
    if run.status != "ok":
        raise SystemExit(f"duckdb-native load: {run.status} {run.detail}")

    def native(q):
        return s.peers("duckdb-native", "--db", db, "--sql", q)

    refs = {}

    def reference(n, q):
        if n not in refs:
            run = compare.run_process(native(q), args.cap)
            if run.status != "ok":
                raise SystemExit(f"DuckDB's native tables, Q{n}: {run.status} {run.detail}")
            refs[n] = run.doc["rows"]
        before = official(n, q)
        return lambda e: before if e == OURS_BEFORE else refs[n]

    doc = {"statements": [], "spread": args.spread_deletes}
    for r in range(1, rounds + 1):
        for kind, sql in refresh_functions(r, args.sf_value, args.spread_deletes):
            row = {"round": r, "kind": kind, "sql": sql}
            for key, argv in (("ours", [*ours(wh), "--sql", sql]), ("duckdb", native(sql))):
                run = compare.run_process(argv, args.cap)
                row[key] = {"status": run.status, "seconds": run.seconds, "rss_mib": run.rss_mib,
                            "answer": run.answer, "detail": run.detail}
            if row["ours"]["status"] == "ok" and row["duckdb"]["status"] == "ok" and \
                    row["ours"]["answer"] != row["duckdb"]["answer"]:
                row["ours"]["status"] = "wrong"
                row["ours"]["detail"] = f"changed {row['ours']['answer']} rows, DuckDB {row['duckdb']['answer']}"
            log(f"  round {r} {kind}: ours {row['ours']['status']} {row['ours']['seconds']} "
                f"DuckDB {row['duckdb']['status']} {row['duckdb']['seconds']} rows {row['ours']['answer']} "
                f"{row['ours']['detail']}")
            doc["statements"].append(row)
    goal = {"copy-on-write": "within 1.1x of before", "merge-on-read": "within 1.3x of before"}[mode]
    doc["after"] = phase(s, args, data, wanted, f"{mode}_after_", f"{mode}, after {rounds} refresh rounds", goal,
                         lambda q: [(OURS, [*ours(wh), "--sql", q]), (OURS_BEFORE, [*ours(base_wh), "--sql", q]),
                                    (DUCKDB, [*duckdb_iceberg(wh), "--sql", q]), (DUCKDB_NATIVE, native(q))],
                         reference)
    doc["compaction"] = []
    for t in ("orders", "lineitem"):
        sql = (f"CALL system.rewrite_data_files(table => 'tpch.{t}', options => "
               "map('delete-file-threshold', '1', 'remove-dangling-deletes', 'true'))")
        run = compare.run_process([*ours(wh), "--sql", sql], args.cap)
        if run.status != "ok":
            raise SystemExit(f"{mode} compaction of {t}: {run.status} {run.detail}")
        doc["compaction"].append({"table": t, "seconds": run.seconds, "answer": run.answer})
        log(f"  compaction of {t}: {run.seconds:.2f} s {run.answer}")
    doc["compacted"] = phase(s, args, data, wanted, f"{mode}_compacted_", f"{mode}, after compaction", goal,
                             lambda q: [(OURS, [*ours(wh), "--sql", q]), (OURS_BEFORE, [*ours(base_wh), "--sql", q]),
                                        (DUCKDB, [*duckdb_iceberg(wh), "--sql", q])],
                             reference)
    return doc


def geomean(values) -> str:
    values = [v for v in values if v]
    return f"{math.exp(sum(map(math.log, values)) / len(values)):.2f}x" if values else "-"


def cell(r: dict) -> str:
    if r.get("status") == "ok":
        return f"{r['median_s']:.3f}"
    return f"{r.get('status')}: {r.get('detail', '')[:60]}" if r else "-"


def markdown(report: dict) -> str:
    engines = [OURS, LIMIT, DUCKDB, DUCKDB_BARE]
    py = any(r["engine"] == OURS_PYICEBERG for sc in report["queries"] for r in sc["engines"])
    lines = [
        f"# TPC-H sf {report['sf']:g}" + (f" under --memory-limit {report['memory_limit']}" if report["memory_limit"] else ""),
        "",
        f"Machine: {report['machine']}. Median seconds per engine (statement only); the ratio is "
        "iceberg-exec's time over the engine's (below 1: iceberg-exec faster). Every answer checked "
        "against TPC-H's official one."
        + (" The limit's time includes registering its files (reading every footer), as ours includes "
           "reading the catalog, metadata and manifests." if report.get("cold_limit") else "")
        + (f" The last time column is iceberg-exec over the same data in tables pyiceberg wrote "
           "(its SqlCatalog, `append`)." if py else ""),
        "",
        "| query | " + " | ".join(engines) + " | ours / limit | ours / DuckDB | peak RSS ours (MiB) |"
        + (" iceberg-exec, pyiceberg's tables |" if py else ""),
        "|---|" + "---|" * (len(engines) + 3 + py),
    ]
    ratios = {LIMIT: [], DUCKDB: []}
    for sc in report["queries"]:
        rows = {r["engine"]: r for r in sc["engines"]}
        cells = [cell(rows.get(e, {})) for e in engines]
        ours = rows.get(OURS, {})
        out = []
        for e in (LIMIT, DUCKDB):
            ratio = rows.get(e, {}).get("ours_over_engine")
            ratios[e].append(ratio)
            out.append(f"{ratio:.2f}x" if ratio is not None else "-")
        rss = f"{ours['rss_mib']:.0f}" if ours.get("rss_mib") else "-"
        extra = f" {cell(rows.get(OURS_PYICEBERG, {}))} |" if py else ""
        lines.append(f"| {sc['name'].removeprefix('tpch_').upper()} | " + " | ".join(cells)
                     + f" | {out[0]} | {out[1]} | {rss} |" + extra)
    lines.append("| geometric mean | " + " | ".join("" for _ in engines)
                 + f" | {geomean(ratios[LIMIT])} | {geomean(ratios[DUCKDB])} | |" + (" |" if py else ""))
    if not report["queries"]:
        lines = lines[:2]
    for mode, doc in report.get("refresh", {}).items():
        lines += refresh_markdown(report, mode, doc)
    lines.append("")
    lines.append(f"Whole run: {report['seconds']} s.")
    return "\n".join(lines) + "\n"


def median_of(sc: dict, engine: str):
    r = next((r for r in sc["engines"] if r["engine"] == engine), None)
    return r["median_s"] if r and r["status"] == "ok" else None


def refresh_markdown(report: dict, mode: str, doc: dict) -> list:
    rounds = report["rounds"]
    lines = ["", f"## {mode}: {rounds} refresh rounds", ""]
    deleted = ("1/1000 of the orders spread over the key range" if doc.get("spread")
               else "the oldest 1/1000 of the orders, as dbgen's delete sets")
    lines.append(
        "Each round: RF1 inserts 1/1000 of the orders again with their lineitems under new keys (two "
        f"`INSERT ... SELECT`), RF2 deletes {deleted} (`DELETE FROM lineitem WHERE l_orderkey IN "
        "(SELECT ...)`, then the orders). Each statement runs in a fresh process; DuckDB runs the same "
        "statements on its native tables loaded from the same files. Seconds summed over the rounds, "
        "median round in brackets."
    )
    lines += ["", "| statement | iceberg-exec | DuckDB native | ours / DuckDB |", "|---|---|---|---|"]
    for kind in ("RF1", "RF2"):
        per_round = {}
        for st in doc["statements"]:
            if st["kind"] != kind:
                continue
            agg = per_round.setdefault(st["round"], {"ours": 0.0, "duckdb": 0.0, "ok": True})
            for k in ("ours", "duckdb"):
                if st[k]["status"] == "ok":
                    agg[k] += st[k]["seconds"]
                else:
                    agg["ok"] = False
        ok = [a for a in per_round.values() if a["ok"]]
        if len(ok) != len(per_round) or not ok:
            failed = [st for st in doc["statements"] if st["kind"] == kind and
                      (st["ours"]["status"] != "ok" or st["duckdb"]["status"] != "ok")]
            detail = failed[0]["ours"]["detail"] or failed[0]["duckdb"]["detail"] if failed else ""
            lines.append(f"| {kind} | failed: {detail[:80]} | | |")
            continue
        ours = sum(a["ours"] for a in ok)
        duck = sum(a["duckdb"] for a in ok)
        mo = sorted(a["ours"] for a in ok)[len(ok) // 2]
        md = sorted(a["duckdb"] for a in ok)[len(ok) // 2]
        lines.append(f"| {kind} | {ours:.2f} ({mo:.3f}) | {duck:.2f} ({md:.3f}) | {ours / duck:.2f}x |")
    for c in doc["compaction"]:
        lines.append(f"| rewrite_data_files {c['table']} | {c['seconds']:.2f} | | |")
    lines += [
        "",
        "Queries: iceberg-exec's median seconds after the rounds and after compaction, each measured side "
        "by side with iceberg-exec over the same tables before the rounds (the untouched tables of the "
        "first part, run alternately in the same scenario); the ratios are to that. Rows checked against "
        "DuckDB's native tables in the same state.",
        "",
        f"| query | before | after | after / before | before | compacted | compacted / before | {DUCKDB} after | "
        f"{DUCKDB_NATIVE} after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    after_r, comp_r = [], []
    for a, c in zip(doc["after"], doc["compacted"]):
        ra = next((r.get("ours_over_engine") for r in a["engines"] if r["engine"] == OURS_BEFORE), None)
        rc = next((r.get("ours_over_engine") for r in c["engines"] if r["engine"] == OURS_BEFORE), None)
        after_r.append(ra)
        comp_r.append(rc)
        ra_rows = {r["engine"]: r for r in a["engines"]}
        rc_rows = {r["engine"]: r for r in c["engines"]}
        name = a["name"].rsplit("_", 1)[-1].upper()
        lines.append(
            f"| {name} | {cell(ra_rows.get(OURS_BEFORE, {}))} | {cell(ra_rows.get(OURS, {}))} | "
            f"{f'{ra:.2f}x' if ra else '-'} | {cell(rc_rows.get(OURS_BEFORE, {}))} | {cell(rc_rows.get(OURS, {}))} | "
            f"{f'{rc:.2f}x' if rc else '-'} | {cell(ra_rows.get(DUCKDB, {}))} | {cell(ra_rows.get(DUCKDB_NATIVE, {}))} |"
        )
    lines.append(f"| geometric mean | | | {geomean(after_r)} | | | {geomean(comp_r)} | | |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
