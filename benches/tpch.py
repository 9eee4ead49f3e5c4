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
limit and DuckDB-bare read the Iceberg tables' data files. Times are the median of the runs as
each engine reports the statement (planning and execution, not process start); the report
gives each engine's time over ours and the geometric means, in target/bench-report/tpch.{md,json}.
"""

import argparse
import glob
import json
import math
import os
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
    if got == want or (got == "NULL" and want == ""):
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", type=float, help="scale factor (default 1; 0.01 with --quick)")
    p.add_argument("--quick", action="store_true", help="sf 0.01, debug build, one run")
    p.add_argument("--runs", type=int, help="runs per engine (default 3; 1 with --quick)")
    p.add_argument("--cap", type=float, default=600.0, help="seconds before a run is killed")
    p.add_argument("--queries", help="comma-separated query numbers (default all 22)")
    p.add_argument("--memory-limit", help="iceberg-exec's and the limit's memory pool, e.g. 256MiB")
    p.add_argument("--out", default=os.path.join(compare.REPO, "target", "bench-report"))
    p.add_argument("--venv", default=os.environ.get("ICEBERG_EXEC_VENV") or os.path.expanduser("~/.cache/iceberg-exec-venv"))
    args = p.parse_args()
    sf = args.sf or (0.01 if args.quick else 1.0)
    args.runs = args.runs or (1 if args.quick else 3)
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
    wh = os.path.join(args.work, "warehouse")
    stamp = os.path.join(wh, "loaded")
    if not os.path.exists(stamp):
        log("loading the tables through iceberg-exec (CREATE TABLE ... AS SELECT)")
        sources = []
        for t in TABLES:
            listfile = os.path.join(args.work, f"source-{t}.txt")
            open(listfile, "w").write(os.path.join(data, f"{t}.parquet") + "\n")
            sources += ["--parquet", f"{t}={listfile}"]
        s.engine_json("sql", "--warehouse", wh, "--sql", "CREATE SCHEMA IF NOT EXISTS tpch")
        for t in TABLES:
            t0 = time.monotonic()
            s.engine_json("sql", "--warehouse", wh, *sources, "--sql",
                          f"CREATE TABLE tpch.{t} AS SELECT * FROM bare.public.{t}")
            log(f"  tpch.{t}: {time.monotonic() - t0:.1f} s")
        open(stamp, "w").write("ok")

    # The tables' metadata files and data files (freshly created: every file in data/ is live).
    con = sqlite3.connect(os.path.join(wh, "catalog.db"))
    try:
        metadata = {
            name: loc.removeprefix("file://")
            for name, loc in con.execute(
                "SELECT table_name, metadata_location FROM iceberg_tables WHERE table_namespace = 'tpch'"
            ).fetchall()
        }
    finally:
        con.close()
    lists = {}
    for t in TABLES:
        files = sorted(glob.glob(os.path.join(wh, "tpch", t, "data", "*.parquet")))
        lists[t] = os.path.join(args.work, f"files-{t}.txt")
        open(lists[t], "w").write("\n".join(files) + "\n")
    bare = [a for t in TABLES for a in ("--parquet", f"{t}={lists[t]}")]
    pool = ["--memory-limit", args.memory_limit] if args.memory_limit else []

    wanted = [int(q) for q in args.queries.split(",")] if args.queries else list(range(1, 23))
    for n in wanted:
        q = open(os.path.join(data, "queries", f"q{n}.sql")).read()
        answer_file = os.path.join(data, "answers", f"q{n}.json")
        official = json.load(open(answer_file)) if os.path.exists(answer_file) else None
        engines = [
            (OURS, [E, "sql", "--warehouse", wh, "--set", "datafusion.catalog.default_schema=tpch", *pool,
                    "--sql", q]),
            (LIMIT, [E, "datafusion", *bare, *pool, "--sql", q]),
            (DUCKDB, s.peers("duckdb-tables", *[a for t in TABLES for a in ("--table", f"{t}={metadata[t]}")],
                             "--sql", q)),
            (DUCKDB_BARE, s.peers("duckdb-tables", *[a for t in TABLES for a in ("--table", f"{t}={lists[t]}")],
                                  "--sql", q)),
        ]
        # Each run's rows against the official answer; the verdict is what is compared.
        s.scenario(
            f"tpch_q{n}", f"TPC-H Q{n}, sf {sf:g}", "within 1.05x of the limit",
            engines,
            expected=lambda e: ["ok"] if official is not None else None,
            after_each=lambda e, run: [verdict(run.doc.get("rows"), official) if official is not None else "ok"],
        )

    report = {"sf": sf, "machine": compare.machine(), "memory_limit": args.memory_limit,
              "seconds": round(time.monotonic() - started), "queries": s.scenarios}
    md = markdown(report)
    json.dump(report, open(os.path.join(args.out, "tpch.json"), "w"), indent=1)
    open(os.path.join(args.out, "tpch.md"), "w").write(md)
    print(md)
    wrong = [sc["name"] for sc in s.scenarios for r in sc["engines"] if r["engine"] == OURS and r["status"] != "ok"]
    if wrong:
        log(f"iceberg-exec did not answer right: {wrong}")
        return 1
    return 0


def markdown(report: dict) -> str:
    engines = [OURS, LIMIT, DUCKDB, DUCKDB_BARE]
    lines = [
        f"# TPC-H sf {report['sf']:g}" + (f" under --memory-limit {report['memory_limit']}" if report["memory_limit"] else ""),
        "",
        f"Machine: {report['machine']}. Median seconds per engine (statement only); the ratio is "
        "iceberg-exec's time over the engine's (below 1: iceberg-exec faster). Every answer checked "
        "against TPC-H's official one.",
        "",
        "| query | " + " | ".join(engines) + " | ours / limit | ours / DuckDB | peak RSS ours (MiB) |",
        "|---|" + "---|" * (len(engines) + 3),
    ]
    ratios = {LIMIT: [], DUCKDB: []}
    for sc in report["queries"]:
        rows = {r["engine"]: r for r in sc["engines"]}
        cells = []
        for e in engines:
            r = rows.get(e, {})
            cells.append(f"{r['median_s']:.3f}" if r.get("status") == "ok" else f"{r.get('status')}: {r.get('detail', '')[:60]}")
        ours = rows.get(OURS, {})
        out = []
        for e in (LIMIT, DUCKDB):
            ratio = rows.get(e, {}).get("ours_over_engine")
            if ratio is not None:
                ratios[e].append(ratio)
            out.append(f"{ratio:.2f}x" if ratio is not None else "-")
        rss = f"{ours['rss_mib']:.0f}" if ours.get("rss_mib") else "-"
        lines.append(f"| {sc['name'].removeprefix('tpch_').upper()} | " + " | ".join(cells) + f" | {out[0]} | {out[1]} | {rss} |")
    geo = [f"{math.exp(sum(map(math.log, v)) / len(v)):.2f}x" if v else "-" for v in ratios.values()]
    lines.append("| geometric mean | " + " | ".join("" for _ in engines) + f" | {geo[0]} | {geo[1]} | |")
    lines.append("")
    lines.append(f"Whole run: {report['seconds']} s.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
