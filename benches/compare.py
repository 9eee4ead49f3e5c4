#!/usr/bin/env python3
"""iceberg-exec's benchmark suite: the same tables, the same statements, every engine a user
would otherwise pick, in one run on this machine; ratios, peak RSS, correctness, and a chart.

    python3 benches/compare.py            # default scale (10M rows; about 20 minutes on 2 cores)
    python3 benches/compare.py --quick    # smoke scale (CI: debug build, one run, no peers built)

From nothing, it
  1. creates a venv with the Python peers (benches/suite/requirements.txt: DuckDB 1.5.5 with its
     iceberg extension, pyiceberg 0.12, deltalake, matplotlib),
  2. builds `bench-engine` (benches/suite/engine.rs; release, or debug with --quick) and, unless
     --quick or --no-build-peers, the iceberg-datafusion 0.10.1 peer (benches/peers/, once:
     about an hour on 2 cores),
  3. generates the tables through iceberg-exec's own commit path and checks them with DuckDB,
  4. runs every scenario: each engine in its own process, engines alternating, `--runs` times;
     wall time as the engine reports it for the statement, peak RSS of the process (wait4), and
     the answer against an oracle (plain DataFusion over the bare data files, with the deletes
     expressed as a condition on the generated ids). A wrong answer is reported, not timed; a
     run over `--cap` seconds is killed and reported as "> cap",
  5. unless --no-s3, starts SeaweedFS (an S3 server with an Iceberg REST catalog, from the venv)
     on loopback, generates tables there through the REST catalog and runs the object-storage
     scenarios (`s3_*`), counting each run's S3 requests at the server,
  6. writes target/bench-report/report.{json,md} and report.png.

Ratios are iceberg-exec's median time over the other engine's: below 1 means iceberg-exec is
faster.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(REPO, "benches", "suite")
sys.path.insert(0, SUITE)
import seaweed  # noqa: E402
import tables  # noqa: E402
OURS = "iceberg-exec"
PEER_ID = "iceberg-datafusion 0.10.1"
DUCKDB = "DuckDB 1.5.5 iceberg_scan"
PYICEBERG = "pyiceberg 0.12"
DELTA = "deltalake (Delta table)"
LIMIT = "DataFusion, bare parquet (limit)"
LIMIT_FREE = "DataFusion, no memory limit (limit)"
OURS_INDEXED = "iceberg-exec, every delete indexed in memory"
OURS_UNLIMITED = "iceberg-exec, no memory limit"
OURS_ONE_PROCESS = "iceberg-exec, one process"
OURS_V2_POSITIONS = "iceberg-exec, v2 position delete files"
DUCKDB_V2_POSITIONS = "DuckDB 1.5.5 iceberg_scan, v2 position delete files"
DUCKDB_NATIVE = "DuckDB 1.5.5 MERGE (native table)"
DUCKDB_REST = "DuckDB 1.5.5 (httpfs + iceberg, ATTACHed to the REST catalog)"
PYICEBERG_REST = "pyiceberg 0.12 (REST catalog)"
PY_OURS = "iceberg-exec Python package"
PY_OURS_MOR = "iceberg-exec Python package, merge-on-read"
PYARROW_LIMIT = "pyarrow, bare parquet files (limit)"
LIMIT_S3 = "DataFusion, bare parquet on S3 (limit)"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- environment


def target_dir() -> str:
    return os.environ.get("CARGO_TARGET_DIR") or os.path.expanduser("~/.cache/iceberg-exec-target")


def venv_python(args) -> str:
    venv = args.venv
    py = os.path.join(venv, "bin", "python")
    reqs = os.path.join(SUITE, "requirements.txt")
    wanted = open(reqs).read() + open(os.path.join(REPO, "tests/interop/requirements.txt")).read()
    stamp = os.path.join(venv, ".iceberg-exec-bench-requirements")
    if os.path.exists(py) and os.path.exists(stamp) and open(stamp).read() == wanted:
        return py
    if not os.path.exists(py):
        log(f"creating venv {venv}")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    log("installing the Python peers (benches/suite/requirements.txt)")
    subprocess.run([py, "-m", "pip", "install", "-q", "-r", reqs], check=True, cwd=SUITE)
    open(stamp, "w").write(wanted)
    return py


def build_engine(args) -> str:
    cmd = ["cargo", "build", "--example", "bench-engine"]
    if not args.quick:
        cmd.append("--release")
    if args.distributed:
        cmd += ["--features", "distributed"]
    log("building: " + " ".join(cmd))
    subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "CARGO_TARGET_DIR": target_dir()})
    return os.path.join(target_dir(), "debug" if args.quick else "release", "examples", "bench-engine")


def peer_binary(args) -> str | None:
    peers_target = os.environ.get("ICEBERG_EXEC_PEERS_TARGET") or os.path.expanduser(
        "~/.cache/iceberg-exec-peers-target"
    )
    binary = os.path.join(peers_target, "release", "iceberg-datafusion-peer")
    if os.path.exists(binary):
        return binary
    if args.quick or args.no_build_peers:
        return None
    manifest = os.path.join(REPO, "benches/peers/iceberg-datafusion/Cargo.toml")
    log("building the iceberg-datafusion 0.10.1 peer (once; about an hour on 2 cores)")
    subprocess.run(
        ["cargo", "build", "--release", "--manifest-path", manifest],
        check=True,
        env={**os.environ, "CARGO_TARGET_DIR": peers_target},
    )
    return binary


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // (1024 * 1024)
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB RAM, {platform.system()} {platform.release()}"


# --------------------------------------------------------------------------- running


class Run:
    """One process: status ok / cap / error / unsupported, time, peak RSS, answer."""

    def __init__(self, status, seconds=None, rss_mib=None, answer=None, detail="", doc=None):
        self.status, self.seconds, self.rss_mib, self.answer, self.detail = status, seconds, rss_mib, answer, detail
        self.doc = doc or {}
        self.requests = None


def run_process(cmd: list, cap: float, env=None) -> Run:
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out_chunks, err_chunks = [], []
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out_chunks)
    sel.register(proc.stderr, selectors.EVENT_READ, err_chunks)
    open_streams = 2
    killed = False
    while open_streams:
        remaining = cap - (time.monotonic() - started)
        if remaining <= 0:
            proc.kill()
            killed = True
            break
        for key, _ in sel.select(timeout=min(remaining, 1.0)):
            data = key.fileobj.read1(65536)
            if not data:
                sel.unregister(key.fileobj)
                open_streams -= 1
            else:
                key.data.append(data)
    _, status, usage = os.wait4(proc.pid, 0)
    rss_mib = usage.ru_maxrss / 1024
    if killed:
        return Run("cap", rss_mib=rss_mib, detail=f"killed after {cap:g} s")
    out = b"".join(out_chunks).decode(errors="replace")
    err = b"".join(err_chunks).decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        return Run("error", rss_mib=rss_mib, detail=(err.strip().splitlines() or ["no output"])[-1][:300])
    try:
        doc = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Run("error", rss_mib=rss_mib, detail=f"no JSON on stdout: {out[-200:]!r}")
    if "unsupported" in doc:
        return Run("unsupported", rss_mib=rss_mib, detail=doc["unsupported"][:300])
    if "seconds" not in doc and "median_s" in doc:
        doc["seconds"] = doc["median_s"]
    return Run("ok", seconds=doc["seconds"], rss_mib=rss_mib, answer=doc.get("answer"), detail="", doc=doc)


def same_answer(got, want) -> bool:
    if got is None or want is None or len(got) != len(want):
        return False
    for g, w in zip(got, want):
        g, w = str(g), str(w)
        if g == w:
            continue
        try:
            gf, wf = float(g), float(w)
        except ValueError:
            return False
        if abs(gf - wf) > 1e-9 * max(1.0, abs(wf)):
            return False
    return True


class Suite:
    def __init__(self, args):
        self.args = args
        self.py = venv_python(args)
        self.engine = build_engine(args)
        self.peer = peer_binary(args)
        self.work = args.work
        self.capped = {}  # engine -> scenario where it exceeded the cap
        self.scenarios = []

    # -- helpers

    def engine_json(self, *argv) -> dict:
        out = subprocess.run([self.engine, *argv], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"bench-engine {argv[0]} failed: {out.stderr.strip()[-500:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def peers(self, *argv) -> list:
        return [self.py, os.path.join(SUITE, "peers.py"), *argv]

    def oracle(self, table: dict, select: str, where: str = "true") -> list:
        listfile = self.file_list(table)
        q = f"SELECT {select} FROM t WHERE ({table['live_where']}) AND ({where})"
        storage = table.get("storage_args", [])
        return self.engine_json("datafusion", *storage, "--parquet", f"t={listfile}", "--sql", q)["answer"]

    def file_list(self, table: dict) -> str:
        # Outside the warehouse: DML runs restore the warehouse from its pristine copy.
        path = table["warehouse"] + ".data-files.txt"
        with open(path, "w") as f:
            f.write("\n".join(table["data_files"]) + "\n")
        return path

    def generate(self, name: str, *options, planning=False, command=None, pristine=True) -> dict:
        """A generated table, kept between runs; `pristine`: with a copy DML runs restore."""
        wh = os.path.join(self.work, name)
        stamp = os.path.join(wh, "generated.json")
        # Tables made by another version of the generator are made again.
        source = open(os.path.join(SUITE, "engine.rs"), "rb").read()
        command = command or ("generate-planning" if planning else "generate")
        want = json.dumps([options, planning, command, hashlib.sha256(source).hexdigest()])
        if os.path.exists(stamp):
            doc = json.load(open(stamp))
            if doc.get("options") == want and (not pristine or os.path.exists(wh + ".pristine")):
                return doc
        for d in (wh, wh + ".pristine"):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(wh)
        log(f"generating {name} {' '.join(options)}")
        started = time.monotonic()
        doc = self.engine_json(command, "--warehouse", wh, *options)
        doc.update(warehouse=wh, options=want, generate_s=round(time.monotonic() - started, 1))
        json.dump(doc, open(stamp, "w"))
        if pristine:
            shutil.copytree(wh, wh + ".pristine")
        return doc

    def restore(self, table: dict) -> None:
        wh = table["warehouse"]
        shutil.rmtree(wh)
        shutil.copytree(wh + ".pristine", wh)
        # The copy on disk before the next run: an engine that syncs what it writes (as
        # iceberg-exec does at commit) would otherwise wait for the copy's writeback too.
        os.sync()

    def current_metadata(self, table: dict) -> str:
        con = sqlite3.connect(os.path.join(table["warehouse"], "catalog.db"))
        try:
            (loc,) = con.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = 'bench' AND table_name = ?",
                (table.get("name", "t"),),
            ).fetchone()
        finally:
            con.close()
        return loc.removeprefix("file://")

    def duckdb_check(self, table: dict, select: str, want: list, label: str) -> None:
        """The generator's table read by DuckDB gives the oracle's answer (before any timing)."""
        q = f"SELECT {select} FROM {{t}}"
        run = run_process(self.peers("duckdb", "--metadata", self.current_metadata(table), "--sql", q), self.args.cap)
        if run.status != "ok" or not same_answer(run.answer, want):
            raise SystemExit(f"generated table {label} fails the DuckDB check: {run.status} {run.answer} != {want} {run.detail}")
        log(f"  {label}: DuckDB reads the oracle's answer {want}")

    # -- one scenario

    def scenario(self, name, title, goal, engines, expected, before_each=None, after_each=None, scale_note="",
                 counter=None, ours=OURS):
        """`engines`: [(engine, argv or None with a reason)]; `after_each(engine, run)` checks a
        statement's effect and returns the answer to compare (default: the run's own);
        `counter()` returns the server's request counts by type, read around each run; `ours`:
        the engine the ratios are taken from (time and peak RSS)."""
        if self.args.scenarios and name not in self.args.scenarios:
            return
        log(f"scenario {name}: {title}")
        results = {e: {"runs": [], "status": None, "detail": ""} for e, _ in engines}
        for e, argv in engines:
            if isinstance(argv, str):
                results[e]["status"], results[e]["detail"] = "n/a", argv
        for rep in range(self.args.runs):
            for e, argv in engines:
                r = results[e]
                if r["status"] is not None:
                    continue
                if e in self.capped and self.capped[e][1] and name in self.capped[e][1]:
                    r["status"], r["detail"] = "cap", f"> cap at the smaller {self.capped[e][0]} (not run again)"
                    continue
                if before_each:
                    before_each(e)
                counted = counter() if counter else None
                run = run_process(argv, self.args.cap)
                if counter:
                    run.requests = seaweed.diff(counter(), counted)
                if run.status == "ok":
                    answer = after_each(e, run) if after_each else run.answer
                    want = expected(e)
                    r["checked"] = want is not None
                    if want is not None and not same_answer(answer, want):
                        r["status"], r["detail"] = "wrong", f"answer {answer}, expected {want}"
                        r["answer"] = answer
                        continue
                    r["runs"].append((run.seconds, run.rss_mib))
                    r.setdefault("requests", []).append(run.requests if counter else None)
                    r["answer"] = answer
                else:
                    r["status"], r["detail"] = run.status, run.detail
                    if run.status == "cap":
                        r["rss_mib"] = run.rss_mib
                log(f"  run {rep + 1} {e}: {run.status} {run.seconds if run.seconds is not None else ''} "
                    f"{'' if run.rss_mib is None else f'{run.rss_mib:.0f} MiB'} {run.detail}")
        rows = []
        for e, _ in engines:
            r = results[e]
            row = {"engine": e, "status": r["status"] or "ok", "detail": r["detail"], "answer": r.get("answer"),
                   "checked": r.get("checked", False)}
            if r["runs"] and row["status"] == "ok":
                row["median_s"] = statistics.median(t for t, _ in r["runs"])
                row["times_s"] = [round(t, 4) for t, _ in r["runs"]]
                row["rss_mib"] = round(max(m for _, m in r["runs"]), 1)
                if counter:
                    # The median run's requests (runs of one engine differ little, if at all).
                    counts = sorted(r["requests"], key=lambda c: c.get("GET", 0))
                    row["requests"] = counts[len(counts) // 2]
            elif row["status"] == "ok":
                row["status"] = "error"
            rows.append(row)
        mine = ours
        ours = next((r for r in rows if r["engine"] == mine and r["status"] == "ok"), None)
        for row in rows:
            if ours and row["status"] == "ok" and row["engine"] != mine:
                row["ours_over_engine"] = round(ours["median_s"] / row["median_s"], 3)
                row["ours_over_engine_rss"] = round(ours["rss_mib"] / row["rss_mib"], 3)
        for row in rows:
            if ours and "requests" in row and row["engine"] != mine and row["requests"].get("GET"):
                row["ours_over_engine_gets"] = round(ours.get("requests", {}).get("GET", 0) / row["requests"]["GET"], 3)
        self.scenarios.append({"name": name, "title": title, "goal": goal, "note": scale_note, "engines": rows,
                               "counted": counter is not None, "ours": mine})

    def mark_capped(self, engine_names, scenario, later):
        for s in self.scenarios:
            if s["name"] == scenario:
                for row in s["engines"]:
                    if row["engine"] in engine_names and row["status"] == "cap":
                        self.capped[row["engine"]] = (scenario, later)


# --------------------------------------------------------------------------- scenarios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke scale: small tables, one run, debug build, no peer build")
    p.add_argument("--runs", type=int, help="runs per engine (default 3; 1 with --quick)")
    p.add_argument("--cap", type=float, help="seconds before a run is killed (default 300; 60 with --quick)")
    p.add_argument("--rows", type=int, help="rows of the generated tables (default 10M; 200K with --quick)")
    p.add_argument("--scenarios", help="comma-separated subset")
    p.add_argument("--out", default=os.path.join(REPO, "target", "bench-report"))
    p.add_argument("--work", help="where tables are generated (kept between runs of the same scale)")
    p.add_argument("--venv", default=os.environ.get("ICEBERG_EXEC_VENV") or os.path.expanduser("~/.cache/iceberg-exec-venv"))
    p.add_argument("--no-build-peers", action="store_true", help="skip the iceberg-datafusion peer when not built")
    p.add_argument("--no-s3", action="store_true", help="skip the object-storage scenarios (SeaweedFS)")
    p.add_argument("--distributed", action="store_true",
                   help="build bench-engine with the distributed feature and run the distributed scenarios")
    args = p.parse_args()
    quick = args.quick
    args.runs = args.runs or (1 if quick else 3)
    args.cap = args.cap or (60.0 if quick else 300.0)
    rows = args.rows or (200_000 if quick else 10_000_000)
    files = 4 if quick else 20
    rows -= rows % (files * 1000)
    eq_keys = rows // 100
    eq_big = rows // 10
    planning_deletes = 2_000 if quick else 200_000
    scale = "quick" if quick else "default"
    args.work = args.work or os.path.join(target_dir(), "bench-work", f"{scale}-{rows}")
    args.scenarios = set(args.scenarios.split(",")) if args.scenarios else None
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    s = Suite(args)
    E = s.engine

    # Tables (kept between runs with the same options).
    plain = s.generate("plain", "--rows", str(rows), "--files", str(files))
    mor = s.generate("mor", "--rows", str(rows), "--files", str(files), "--pos-every", "10", "--eq-keys", str(eq_keys))
    q_full = "SELECT count(*), sum(value), min(k), max(s) FROM {t}"
    aggs_full = [["count"], ["sum", "value"], ["min", "k"], ["max", "s"]]
    full_aggs_sql = "count(*), sum(value), min(k), max(s)"
    if args.scenarios and all(n.startswith("py_") for n in args.scenarios):
        # The Python package's scenarios alone: none of the other tables.
        python_scenarios(s, rows, files, plain, mor, aggs_full, full_aggs_sql)
        return finish(s, args, scale, rows, files, started)
    eqbig = s.generate("eq-big", "--rows", str(rows), "--files", str(files), "--eq-keys", str(eq_big))
    planning = s.generate("planning", "--delete-files", str(planning_deletes), planning=True)
    small = max(rows // 50 - (rows // 50) % (files * 1000), files * 1000)
    check_mor = s.generate("check-mor", "--rows", str(small), "--files", str(files), "--pos-every", "10", "--eq-keys", str(small // 100))
    check_eq = s.generate("check-eq", "--rows", str(small), "--files", str(files), "--eq-keys", str(small // 10))
    agg = "count(*), sum(value)"
    s.duckdb_check(plain, agg, s.oracle(plain, agg), f"plain ({rows} rows)")
    # DuckDB applies equality deletes at O(rows x keys): the delete-carrying generators are
    # checked at 1/50 of the rows, same options otherwise.
    s.duckdb_check(check_mor, agg, s.oracle(check_mor, agg), f"mor generator at {small} rows")
    s.duckdb_check(check_eq, agg, s.oracle(check_eq, agg), f"eq-big generator at {small} rows")

    def iceberg_engines(table, query, aggs, pyfilter=None, pool=None):
        t = table
        ours = [E, "sql", "--warehouse", t["warehouse"], "--sql", query.replace("{t}", "bench.t")]
        if pool:
            ours += ["--memory-limit", pool]
        peer = [s.peer, t["metadata"], query, "1"] if s.peer else "not built (benches/peers/iceberg-datafusion; skipped with --quick / --no-build-peers)"
        py = s.peers("pyiceberg-scan", "--metadata", t["metadata"], "--aggs", json.dumps(aggs))
        if pyfilter:
            py += ["--filter", pyfilter]
        limit = [E, "datafusion", "--parquet", f"t={s.file_list(t)}", "--sql", query.replace("{t}", "t")]
        if pool:
            limit += ["--memory-limit", pool]
        return [
            (OURS, ours),
            (PEER_ID, peer),
            (DUCKDB, s.peers("duckdb", "--metadata", t["metadata"], "--sql", query)),
            (PYICEBERG, py),
            (LIMIT, limit),
        ]

    def expect(want, limit_ignores_deletes=False):
        return lambda e: None if (e == LIMIT and limit_ignores_deletes) else want

    s.scenario(
        "full_scan", f"Full scan, {rows:,} rows in {files} files", "within 1.1x of the limit; >= 2x faster than iceberg-datafusion",
        iceberg_engines(plain, q_full, aggs_full), expect(s.oracle(plain, "count(*), sum(value), min(k), max(s)")),
    )
    lo, hi = rows // 5, rows // 5 + rows // 100 - 1
    sel_range = (lo, hi)
    q_sel = f"SELECT count(*), sum(value) FROM {{t}} WHERE id BETWEEN {lo} AND {hi}"
    s.scenario(
        "selective_scan", f"Selective scan (1% of ids, one file), {rows:,} rows", "within 1.1x of the limit",
        iceberg_engines(plain, q_sel, [["count"], ["sum", "value"]], pyfilter=f"id >= {lo} and id <= {hi}"),
        expect(s.oracle(plain, agg, f"id BETWEEN {lo} AND {hi}")),
    )
    # A lookup by a bucket-partitioned key spread over every file: column bounds prune nothing
    # (each append's k values span the whole range), the bucket values prune all but one
    # bucket's files.
    if not args.scenarios or "bucket_lookup" in args.scenarios:
        bucketed = s.generate("bucketed", "--rows", str(rows), "--files", str(files),
                              "--partitioning", "bucket(16, k)")
        key = (rows // 3) * 7919 % 1000003
        q_key = f"SELECT count(*), sum(value) FROM {{t}} WHERE k = {key}"
        s.scenario(
            "bucket_lookup", f"Lookup by a bucket(16, k) key, {rows:,} rows in {files} appends x 16 buckets",
            "reads 1/16 of the files; faster than the limit, which reads them all",
            iceberg_engines(bucketed, q_key, [["count"], ["sum", "value"]], pyfilter=f"k = {key}"),
            expect(s.oracle(bucketed, agg, f"k = {key}")),
            scale_note="Every file's bounds of k span the key; only the partition's bucket value rules files out.",
        )
    q_mor = "SELECT count(*), sum(value) FROM {t}"
    s.scenario(
        "mor_scan", f"Merge-on-read scan: 10% position-deleted, {eq_keys:,} equality-deleted keys",
        "at least as fast as DuckDB; within 1.5x of position-only and 1.3x of the bare scan",
        iceberg_engines(mor, q_mor, [["count"], ["sum", "value"]]), expect(s.oracle(mor, agg), limit_ignores_deletes=True),
        scale_note="The limit reads the data files and ignores the deletes.",
    )
    s.mark_capped({PEER_ID, DUCKDB}, "mor_scan", {"eq_big_64mib"})
    # The same 10% of rows deleted as format v3 deletion vectors (one per data file, all in one
    # Puffin file) and as v2 position delete files (one per data file).
    if not args.scenarios or "dv_scan" in args.scenarios:
        pos_v2 = s.generate("pos-v2", "--rows", str(rows), "--files", str(files), "--pos-every", "10")
        pos_dv = s.generate("pos-dv", "--rows", str(rows), "--files", str(files), "--pos-every", "10",
                            "--format-version", "3")
        aggs_mor = [["count"], ["sum", "value"]]
        dv = dict(iceberg_engines(pos_dv, q_mor, aggs_mor))
        v2 = dict(iceberg_engines(pos_v2, q_mor, aggs_mor))
        s.scenario(
            "dv_scan", f"Merge-on-read scan, 10% deleted: deletion vectors (v3) and position delete files (v2), {rows:,} rows",
            "deletion vectors at least as fast as our v2 path and faster than DuckDB",
            [(OURS, dv[OURS]), (OURS_V2_POSITIONS, v2[OURS]), (DUCKDB, dv[DUCKDB]),
             (DUCKDB_V2_POSITIONS, v2[DUCKDB]), (PYICEBERG, dv[PYICEBERG]), (LIMIT, dv[LIMIT])],
            expect(s.oracle(pos_dv, agg), limit_ignores_deletes=True),
            scale_note="Both tables hold the same rows and delete the same ones; the limit reads the data files and ignores the deletes.",
        )
    # The merge-on-read scan over two worker processes on this machine (loopback), against the
    # same binary in one process: the overhead of distribution where it cannot gain (the workers
    # share the same cores).
    if args.distributed and (not args.scenarios or "distributed_mor_scan" in args.scenarios):
        workers = [subprocess.Popen([E, "worker", "--warehouse", mor["warehouse"]], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL) for _ in range(2)]
        try:
            urls = [json.loads(w.stdout.readline())["listening"] for w in workers]
            one = [E, "sql", "--warehouse", mor["warehouse"], "--sql", q_mor.replace("{t}", "bench.t")]
            s.scenario(
                "distributed_mor_scan", f"Merge-on-read scan (as mor_scan) over 2 workers on this machine",
                "overhead <= 1.3x of one process",
                [(OURS, one + ["--workers", ",".join(urls)]), (OURS_ONE_PROCESS, one)],
                expect(s.oracle(mor, agg)),
                scale_note="Coordinator and both workers share this machine's 2 cores; the workers were started "
                           "before the runs and read the same files.",
            )
        finally:
            for w in workers:
                w.kill()
                w.wait()
    # A copy-on-write DELETE over the same two workers against one process: pass 1 and the
    # rewrite (read, change, write) run in the workers' tasks, the commit here. Each run starts
    # from the pristine table; DuckDB reads the effect back.
    def distributed_delete(name, what, cond, mode="copy-on-write", deleted=rows // 100):
        want_after = s.oracle(plain, agg, f"NOT ({cond})")
        workers = [subprocess.Popen([E, "worker", "--warehouse", plain["warehouse"]], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL) for _ in range(2)]

        def read_back(e, run):
            r = run_process(s.peers("duckdb", "--metadata", s.current_metadata(plain), "--sql", f"SELECT {agg} FROM {{t}}"),
                            args.cap)
            return r.answer if r.status == "ok" else [r.status, r.detail]

        try:
            urls = [json.loads(w.stdout.readline())["listening"] for w in workers]
            one = [E, "sql", "--warehouse", plain["warehouse"], "--set", f"iceberg.delete_mode={mode}",
                   "--sql", f"DELETE FROM bench.t WHERE {cond}"]
            s.scenario(
                name, f"{mode.capitalize()} DELETE of {what} ({deleted:,} rows) over 2 workers on this machine",
                "overhead <= 1.3x of one process",
                [(OURS, one + ["--workers", ",".join(urls)]), (OURS_ONE_PROCESS, one)],
                lambda e: want_after, lambda e: s.restore(plain), read_back,
                scale_note="Coordinator and both workers share this machine's 2 cores.",
            )
        finally:
            for w in workers:
                w.kill()
                w.wait()
        s.restore(plain)

    per_file = rows // files
    lo = 3 * per_file + per_file // 5
    for name, what, cond, mode, deleted in (
        # One file touched: one rewrite task.
        ("distributed_cow_delete", "1% in one file", f"id BETWEEN {lo} AND {lo + rows // 100 - 1}",
         "copy-on-write", rows // 100),
        # Every file rewritten: the rewrite is spread over the tasks.
        ("distributed_cow_delete_spread", "1% of every file", "id % 100 = 7", "copy-on-write", rows // 100),
        # Position delete files for every file, written in the workers' tasks after a shuffle by
        # file.
        ("distributed_mor_delete_spread", "10% of every file", "id % 10 = 3", "merge-on-read", rows // 10),
    ):
        if args.distributed and (not args.scenarios or name in args.scenarios):
            distributed_delete(name, what, cond, mode, deleted)
    s.scenario(
        "eq_big_64mib", f"{eq_big:,} equality-deleted keys, iceberg-exec under a 64 MiB pool",
        "completes; peak RSS <= 350 MB",
        iceberg_engines(eqbig, q_mor, [["count"], ["sum", "value"]], pool="64M"), expect(s.oracle(eqbig, agg), limit_ignores_deletes=True),
        scale_note="An engine over the cap with fewer keys (mor_scan) is not run again.",
    )

    # Compaction of the merge-on-read table: every data file rewritten with its deletes applied
    # into files of one target size, under a 64 MiB pool; deltalake's bin-pack optimize over the
    # same data files as a Delta table (it has no deletes to apply); DataFusion's COPY of the
    # bare files as the floor. Then the scan of the compacted table against the scan before.
    if not args.scenarios or {"compaction_64mib", "compacted_scan"} & args.scenarios:
        target = 64 << 20
        delta_path = os.path.join(args.work, "delta-compaction")
        out_dir = os.path.join(args.work, "copy-out")
        compact_sql = ("CALL system.rewrite_data_files(table => 'bench.t', options => map('rewrite-all', 'true', "
                       f"'target-file-size-bytes', '{target}'))")
        want_mor = s.oracle(mor, agg)
        # Every row of the data files: what the Delta table holds before and after.
        want_all = s.oracle(dict(mor, live_where="true"), agg)
        bytes_in = {}

        ours_snappy, delta_zstd = f"{OURS}, snappy", f"{DELTA}, zstd(3)"

        def before(e):
            s.restore(mor)
            shutil.rmtree(out_dir, ignore_errors=True)
            if e == ours_snappy:
                # deltalake's default codec, for a side-by-side at the same codec.
                s.engine_json("sql", "--warehouse", mor["warehouse"], "--sql",
                              "ALTER TABLE bench.t SET TBLPROPERTIES ('write.parquet.compression-codec' = 'snappy')")
            if e in (DELTA, delta_zstd):
                shutil.rmtree(delta_path, ignore_errors=True)
                subprocess.run(s.peers("delta-create", "--path", delta_path, "--files", s.file_list(mor), "--one-per-file", "--zstd"),
                               check=True, capture_output=True)
                bytes_in[e] = sum(os.path.getsize(os.path.join(delta_path, f)) for f in os.listdir(delta_path) if f.endswith(".parquet"))

        def after(e, run):
            if e == LIMIT:
                return None
            if e in (DELTA, delta_zstd):
                r = run_process(s.peers("delta-scan", "--path", delta_path, "--aggs", json.dumps([["count"], ["sum", "value"]])), args.cap)
                return r.answer if r.status == "ok" else [r.status, r.detail]
            rows_out = run.doc.get("rows") or [[]]
            bytes_in[e] = int(rows_out[0][2]) if len(rows_out[0]) > 2 else 0
            r = run_process(s.peers("duckdb", "--metadata", s.current_metadata(mor), "--sql", f"SELECT {agg} FROM {{t}}"), args.cap)
            return r.answer if r.status == "ok" else [r.status, r.detail]

        engines = [
            (OURS, [E, "sql", "--warehouse", mor["warehouse"], "--memory-limit", "64M", "--sql", compact_sql]),
            (OURS_UNLIMITED, [E, "sql", "--warehouse", mor["warehouse"], "--sql", compact_sql]),
            (DELTA, s.peers("delta-optimize", "--path", delta_path, "--target-size", str(target))),
            (ours_snappy, [E, "sql", "--warehouse", mor["warehouse"], "--memory-limit", "64M", "--sql", compact_sql]),
            (delta_zstd, s.peers("delta-optimize", "--path", delta_path, "--target-size", str(target), "--zstd")),
            (LIMIT, [E, "datafusion", "--parquet", f"t={s.file_list(mor)}", "--memory-limit", "64M", "--sql",
                     f"COPY (SELECT * FROM t) TO '{out_dir}/out.parquet'"]),
            (DUCKDB, "DuckDB 1.5.5's iceberg extension has no rewrite_data_files"),
            (PYICEBERG, "pyiceberg 0.12 has no compaction"),
            (PEER_ID, "iceberg-datafusion 0.10.1 has no compaction"),
        ]
        s.scenario(
            "compaction_64mib", f"Compaction of the merge-on-read table ({rows:,} rows, 10% position-deleted, {eq_keys:,} equality-deleted keys) into {target >> 20} MiB files, 64 MiB pool",
            ">= 1.5x faster than deltalake optimize per byte rewritten; peak RSS <= 400 MB",
            engines, lambda e: None if e == LIMIT else (want_all if e in (DELTA, delta_zstd) else want_mor), before, after,
            "deltalake compacts a Delta table of the same data files (written by delta-create one file per data file: "
            "its own parquet, same rows and codec (zstd level 3), no deletes); the per-byte ratio divides each time by the bytes of the files it rewrote. "
            "The limit is DataFusion's COPY of the bare files (no deletes, no commit) under the same pool. "
            "Codecs differ by default (iceberg-exec writes zstd level 3, the Iceberg default; deltalake snappy), so two "
            "more rows compare at the same codec: iceberg-exec with the table set to snappy, deltalake writing zstd(3).",
        )
        sc = next((x for x in s.scenarios if x["name"] == "compaction_64mib"), None)
        if sc:
            by = {r["engine"]: r for r in sc["engines"]}
            o, d = by.get(OURS), by.get(DELTA)
            if o and d and o["status"] == d["status"] == "ok" and bytes_in.get(OURS) and bytes_in.get(DELTA):
                per_o = o["median_s"] / bytes_in[OURS]
                per_d = d["median_s"] / bytes_in[DELTA]
                sc["note"] += (f" Bytes rewritten: iceberg-exec {bytes_in[OURS]:,}, deltalake {bytes_in[DELTA]:,}; "
                               f"seconds per GB: iceberg-exec {per_o * 1e9:.2f}, deltalake {per_d * 1e9:.2f}; "
                               f"iceberg-exec over deltalake per byte: {per_o / per_d:.3f}.")
        s.restore(mor)

        # The scan after compaction, beside the scan before it (the same rows).
        compacted = {"warehouse": os.path.join(args.work, "mor-compacted"), "data_files": mor["data_files"]}
        if not args.scenarios or "compacted_scan" in args.scenarios:
            shutil.rmtree(compacted["warehouse"], ignore_errors=True)
            shutil.copytree(mor["warehouse"] + ".pristine", compacted["warehouse"])
            s.engine_json("sql", "--warehouse", compacted["warehouse"], "--sql", compact_sql)
            ours_scan = lambda t: [E, "sql", "--warehouse", t["warehouse"], "--sql", q_mor.replace("{t}", "bench.t")]
            s.scenario(
                "compacted_scan", "Merge-on-read scan of the same rows, before and after compaction",
                "the compacted table reads like the bare files",
                [(OURS, ours_scan(compacted)), ("iceberg-exec, before compaction", ours_scan(mor)),
                 (LIMIT, [E, "datafusion", "--parquet", f"t={s.file_list(mor)}", "--sql", q_mor.replace("{t}", "t")])],
                expect(want_mor, limit_ignores_deletes=True),
                scale_note="The limit reads the data files before compaction and ignores the deletes.",
            )

    # Orphan files: a table whose manifests list most of the files under it, and some files no
    # snapshot reaches; a dry run of remove_orphan_files (so every run starts alike) under a
    # 64 MiB pool, the listing anti-joined against every manifest entry.
    if not args.scenarios or "orphans_64mib" in args.scenarios:
        listed = 20_000 if quick else 2_000_000
        orphans_n = 1_000 if quick else 10_000
        orph = s.generate("orphans", "--listed", str(listed), "--orphans", str(orphans_n),
                          command="generate-orphans", pristine=False)
        cutoff = int(time.time() * 1000) + 3_600_000
        call = (f"CALL system.remove_orphan_files(table => 'bench.t', older_than => {cutoff}, "
                "dry_run => true)")

        def orphans_after(e, run):
            return [str(len(run.doc.get("rows", [])))]

        s.scenario(
            "orphans_64mib", f"remove_orphan_files (dry run) over {listed:,} listed files, {orphans_n:,} of them orphans, 64 MiB pool",
            "completes under the pool; peak RSS <= 400 MB",
            [(OURS, [E, "sql", "--warehouse", orph["warehouse"], "--memory-limit", "64M", "--sql", call]),
             (OURS_UNLIMITED, [E, "sql", "--warehouse", orph["warehouse"], "--sql", call]),
             (PYICEBERG, "pyiceberg 0.12 has no orphan file removal"),
             (DUCKDB, "DuckDB 1.5.5's iceberg extension has no orphan file removal")],
            lambda e: [str(orphans_n)], None, orphans_after,
            "The table's manifests list the other files (empty files on disk: only the listing and the manifests are read).",
        )

    # DML: each run starts from the pristine table; the effect is read back by another engine.
    def dml_scenario(name, title, goal, table, lo, hi, mode):
        cond = f"id BETWEEN {lo} AND {hi}"
        per_file = rows // files
        f_lo, f_hi = lo // per_file * per_file, (hi // per_file + 1) * per_file - 1
        delta_path = os.path.join(args.work, "delta-" + name)
        out_dir = os.path.join(args.work, "copy-out")
        want_after = s.oracle(table, agg, f"NOT ({cond})")

        def before(e):
            s.restore(table)
            shutil.rmtree(out_dir, ignore_errors=True)
            if e == DELTA:
                shutil.rmtree(delta_path, ignore_errors=True)
                subprocess.run(s.peers("delta-create", "--path", delta_path, "--files", s.file_list(table)), check=True, capture_output=True)

        def after(e, run):
            if e == LIMIT:
                return None
            if e == DELTA:
                r = run_process(s.peers("delta-scan", "--path", delta_path, "--aggs", json.dumps([["count"], ["sum", "value"]])), args.cap)
            else:
                r = run_process(s.peers("duckdb", "--metadata", s.current_metadata(table), "--sql", f"SELECT {agg} FROM {{t}}"), args.cap)
            return r.answer if r.status == "ok" else [r.status, r.detail]

        ours = [E, "sql", "--warehouse", table["warehouse"], "--memory-limit", "64M", "--set", f"iceberg.delete_mode={mode}",
                "--sql", f"DELETE FROM bench.t WHERE {cond}"]
        if mode == "copy-on-write":
            limit_sql = f"COPY (SELECT * FROM t WHERE id BETWEEN {f_lo} AND {f_hi} AND NOT ({cond})) TO '{out_dir}/out.parquet'"
            limit_note = "COPY of the touched file without the deleted rows"
        else:
            limit_sql = f"SELECT count(*) FROM t WHERE {cond}"
            limit_note = "finding the deleted rows"
        engines = [
            (OURS, ours),
            (PYICEBERG, s.peers("pyiceberg-delete", "--warehouse", table["warehouse"], "--table", "bench.t", "--filter", f"id >= {lo} and id <= {hi}")),
            (DELTA, s.peers("delta-delete", "--path", delta_path, "--predicate", f"id >= {lo} AND id <= {hi}")),
            (LIMIT, [E, "datafusion", "--parquet", f"t={s.file_list(table)}", "--memory-limit", "64M", "--sql", limit_sql]),
            (DUCKDB, "DuckDB 1.5.5 cannot write to Iceberg tables outside a REST catalog"),
            (PEER_ID, "iceberg-datafusion 0.10.1 has no DELETE"),
        ]
        note = f"The limit is {limit_note}. pyiceberg and deltalake delete by copy-on-write."
        s.scenario(name, title, goal, engines, lambda e: None if e == LIMIT else want_after, before, after, note)
        s.restore(table)

    per_file = rows // files
    lo = 3 * per_file + per_file // 5
    dml_scenario("cow_delete_1pct", f"Copy-on-write DELETE of 1% ({rows // 100:,} rows), 64 MiB pool", "close to the COPY limit; bounded memory",
                 plain, lo, lo + rows // 100 - 1, "copy-on-write")
    dml_scenario("mor_delete_0_1pct", f"Merge-on-read DELETE of 0.1% ({rows // 1000:,} rows), 64 MiB pool", "a small fraction of a rewrite",
                 plain, lo, lo + rows // 1000 - 1, "merge-on-read")

    # MERGE of a change set (half updates spread over the table, half inserts) into `plain`.
    changes = rows // 10

    def merge_scenario(name, title, goal, mode, distributed=False):
        delta_path = os.path.join(args.work, "delta-" + name)
        inv = pow(19, -1, rows)
        # Rows the change set updates: id = v * 19 % rows for an even v < changes.
        updated = f"(id * {inv} % {rows}) % 2 = 0 AND id * {inv} % {rows} < {changes}"
        kept = s.oracle(plain, agg, f"NOT ({updated})")
        new_values = sum(v % 1000 for v in range(changes))
        # Every change leaves one row: the new version of an updated row, or an inserted one.
        want = [str(int(kept[0]) + changes), str(int(kept[1]) + new_values)]
        source = (f"SELECT CASE WHEN value % 2 = 0 THEN value * 19 % {rows} ELSE {rows} + value END AS id, "
                  f"value % 1000 AS value FROM generate_series(0, {changes - 1})")
        merge = (f"MERGE INTO bench.t AS t USING ({source}) AS s ON t.id = s.id "
                 "WHEN MATCHED THEN UPDATE SET value = s.value "
                 "WHEN NOT MATCHED THEN INSERT (id, k, value, s) VALUES (s.id, s.id, s.value, 'new')")

        # The limit: copy-on-write must write every row; merge-on-read must join the change set
        # with the target and write its new rows (what DataFusion does alone for both).
        limit_rows = {
            "copy-on-write": "SELECT * FROM t",
            "merge-on-read": f"SELECT s.id, COALESCE(t.k, s.id) AS k, s.value, COALESCE(t.s, 'new') AS s "
                             f"FROM ({source}) AS s LEFT JOIN t ON t.id = s.id",
        }[mode]

        def before(e):
            s.restore(plain)
            shutil.rmtree(os.path.join(args.work, "copy-out"), ignore_errors=True)
            if e == DELTA:
                shutil.rmtree(delta_path, ignore_errors=True)
                subprocess.run(s.peers("delta-create", "--path", delta_path, "--files", s.file_list(plain)), check=True, capture_output=True)

        def after(e, run):
            if e == LIMIT:
                return None
            if e == DUCKDB_NATIVE:
                return run.answer
            if e == DELTA:
                r = run_process(s.peers("delta-scan", "--path", delta_path, "--aggs", json.dumps([["count"], ["sum", "value"]])), args.cap)
            else:
                r = run_process(s.peers("duckdb", "--metadata", s.current_metadata(plain), "--sql", f"SELECT {agg} FROM {{t}}"), args.cap)
            return r.answer if r.status == "ok" else [r.status, r.detail]

        if distributed:
            # The same statement over two worker processes on this machine against one process
            # (the first pass's join, clauses and writers in the workers' tasks).
            if args.scenarios and name not in args.scenarios:
                return
            workers = [subprocess.Popen([E, "worker", "--warehouse", plain["warehouse"]], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL) for _ in range(2)]
            try:
                urls = [json.loads(w.stdout.readline())["listening"] for w in workers]
                one = [E, "sql", "--warehouse", plain["warehouse"], "--set", f"iceberg.merge_mode={mode}", "--sql", merge]
                s.scenario(name, title, goal,
                           [(OURS, one + ["--workers", ",".join(urls)]), (OURS_ONE_PROCESS, one)],
                           lambda e: want, before, after,
                           "Coordinator and both workers share this machine's 2 cores.")
            finally:
                for w in workers:
                    w.kill()
                    w.wait()
            s.restore(plain)
            return

        engines = [
            (OURS, [E, "sql", "--warehouse", plain["warehouse"], "--memory-limit", "64M", "--set", f"iceberg.merge_mode={mode}", "--sql", merge]),
            (OURS_UNLIMITED, [E, "sql", "--warehouse", plain["warehouse"], "--set", f"iceberg.merge_mode={mode}", "--sql", merge]),
            (DELTA, s.peers("delta-merge", "--path", delta_path, "--rows", str(rows), "--changes", str(changes))),
            (DUCKDB_NATIVE, s.peers("duckdb-merge", "--files", s.file_list(plain), "--rows", str(rows), "--changes", str(changes))),
            (LIMIT, [E, "datafusion", "--parquet", f"t={s.file_list(plain)}", "--memory-limit", "64M", "--sql",
                     f"COPY ({limit_rows}) TO '{os.path.join(args.work, 'copy-out')}/out.parquet'"]),
            (DUCKDB, "DuckDB 1.5.5 cannot write to Iceberg tables outside a REST catalog (its row is MERGE into a native table)"),
            (PYICEBERG, "pyiceberg 0.12 has no MERGE (upsert() holds both tables in memory)"),
            (PEER_ID, "iceberg-datafusion 0.10.1 has no MERGE"),
        ]
        s.scenario(name, title, goal, engines, lambda e: None if e == LIMIT else want, before, after,
                   "The change set updates ids spread over every file and inserts as many new ones, so copy-on-write "
                   "rewrites the whole table: its limit is DataFusion's COPY of every row, under the same pool; "
                   "merge-on-read's is DataFusion joining the change set with the bare files and COPYing the new "
                   "rows (no deletes, no commit). "
                   "deltalake's merge is copy-on-write; DuckDB merges into its own table loaded from the same files.")
        s.restore(plain)

    merge_scenario("merge_cow_64mib", f"Copy-on-write MERGE of {changes:,} changes (50% updates, 50% inserts) into {rows:,} rows, 64 MiB pool",
                   ">= 2x faster than deltalake (proposed: within 1.5x of the COPY limit); peak RSS <= 400 MB", "copy-on-write")
    merge_scenario("merge_mor_64mib", f"Merge-on-read MERGE of {changes:,} changes (50% updates, 50% inserts) into {rows:,} rows, 64 MiB pool",
                   ">= 5x faster than our copy-on-write (proposed: within 1.2x of the join-and-write limit); peak RSS <= 400 MB", "merge-on-read")
    if args.distributed:
        merge_scenario("distributed_merge_mor", f"Merge-on-read MERGE of {changes:,} changes (50% updates, 50% inserts) "
                       f"into {rows:,} rows over 2 workers on this machine", "overhead <= 1.3x of one process",
                       "merge-on-read", distributed=True)
        merge_scenario("distributed_merge_cow", f"Copy-on-write MERGE of {changes:,} changes (50% updates, 50% inserts) "
                       f"into {rows:,} rows over 2 workers on this machine", "overhead <= 1.3x of one process",
                       "copy-on-write", distributed=True)

    # Sorted INSERT into an empty table with a sort order.
    if not args.scenarios or "sorted_insert_64mib" in args.scenarios:
        wh = os.path.join(args.work, "sorted")
        sorted_table = {"warehouse": wh, "name": "s"}
        if not os.path.exists(wh + ".pristine"):
            shutil.rmtree(wh, ignore_errors=True)
            os.makedirs(wh)
            for q in ["CREATE SCHEMA bench",
                      "CREATE EXTERNAL TABLE bench.s (id BIGINT, k BIGINT, value BIGINT, s VARCHAR) STORED AS ICEBERG LOCATION '' WITH ORDER (k ASC NULLS FIRST)"]:
                s.engine_json("sql", "--warehouse", wh, "--sql", q)
            shutil.copytree(wh, wh + ".pristine")
        delta_path = os.path.join(args.work, "delta-sorted")
        out_dir = os.path.join(args.work, "copy-out")
        gen = f"SELECT value AS id, value * 7919 % 1000003 AS k, value % 1000 AS value, 'str-' || CAST(value % 5000 AS VARCHAR) AS s FROM generate_series(0, {rows - 1})"
        want = [str(rows), str(sum(range(1000)) * (rows // 1000))]

        def before(e):
            s.restore(sorted_table)
            shutil.rmtree(delta_path, ignore_errors=True)
            shutil.rmtree(out_dir, ignore_errors=True)

        def after(e, run):
            if e in (LIMIT, LIMIT_FREE):
                return None
            if e == DELTA:
                r = run_process(s.peers("delta-scan", "--path", delta_path, "--aggs", json.dumps([["count"], ["sum", "value"]])), args.cap)
            else:
                r = run_process(s.peers("duckdb", "--metadata", s.current_metadata(sorted_table), "--sql", f"SELECT {agg} FROM {{t}}"), args.cap)
            return r.answer if r.status == "ok" else [r.status, r.detail]

        engines = [
            (OURS, [E, "sql", "--warehouse", wh, "--memory-limit", "64M", "--sql", f"INSERT INTO bench.s {gen}"]),
            (PYICEBERG, s.peers("pyiceberg-append", "--warehouse", wh, "--table", "bench.s", "--rows", str(rows), "--sort-by", "k")),
            (DELTA, s.peers("delta-append", "--path", delta_path, "--rows", str(rows), "--sort-by", "k")),
            (LIMIT, [E, "datafusion", "--memory-limit", "64M", "--sql", f"COPY ({gen} ORDER BY k ASC NULLS FIRST) TO '{out_dir}/out.parquet'"]),
            (LIMIT_FREE, [E, "datafusion", "--sql", f"COPY ({gen} ORDER BY k ASC NULLS FIRST) TO '{out_dir}/out.parquet'"]),
            (DUCKDB, "DuckDB 1.5.5 cannot write to Iceberg tables outside a REST catalog"),
            (PEER_ID, "iceberg-datafusion 0.10.1 writes no sorted files"),
        ]
        s.scenario("sorted_insert_64mib", f"INSERT of {rows:,} rows into a table sorted by k, 64 MiB pool", "bounded memory; close to a sorted COPY",
                   engines, lambda e: None if e in (LIMIT, LIMIT_FREE) else want, before, after,
                   "pyiceberg and deltalake get the rows sorted in memory by pyarrow first (they have no sort-on-write). "
                   "The limit is DataFusion's sorted COPY, under the same pool and without one.")
        s.restore(sorted_table)

    def planning_expected(e):
        return None

    def planning_after(e, run):
        text = " ".join(" ".join(r) for r in run.doc.get("rows", []))
        return ["ok"] if f"delete_files={planning_deletes}" in text else [f"EXPLAIN lacks delete_files={planning_deletes}"]

    s.scenario(
        "planning", f"Planning a scan of 2,000 data files with {planning_deletes:,} delete files (EXPLAIN)",
        "within 512 MB RSS",
        [(OURS, [E, "sql", "--warehouse", planning["warehouse"], "--sql", "EXPLAIN SELECT count(*) FROM bench.t"]),
         (PEER_ID, "iceberg-datafusion 0.10.1 plans files inside execute(): EXPLAIN does no planning"),
         (DUCKDB, "DuckDB cannot plan without reading the (here synthetic) delete files")],
        lambda e: ["ok"], None, planning_after,
        "The delete files are listed in manifests but not written; planning reads manifests only.",
    )

    def selective_after(e, run):
        text = " ".join(" ".join(r) for r in run.doc.get("rows", []))
        return ["ok"] if "files=40 of 2000" in text else ["EXPLAIN lacks files=40 of 2000"]

    selective = "EXPLAIN SELECT count(*) FROM bench.t WHERE part = 3"
    s.scenario(
        "planning_selective", f"Planning a scan of one partition of 50 (40 data files) among {planning_deletes:,} delete files (EXPLAIN)",
        "within 512 MB RSS",
        [(OURS, [E, "sql", "--warehouse", planning["warehouse"], "--sql", selective]),
         (OURS_INDEXED, [E, "sql", "--warehouse", planning["warehouse"], "--set", "iceberg.planning_threshold=1000000000", "--sql", selective])],
        lambda e: ["ok"], None, selective_after,
        "iceberg-exec streams the delete manifests past the scan's data files above iceberg.planning_threshold "
        "(default 100,000 delete files): only the deletes that apply are held. The second row raises the threshold, "
        "so planning goes through the iceberg crate's planner, which indexes every delete entry.",
    )

    if not args.scenarios or args.scenarios & {"metadata_files", "metadata_partitions", "add_files"}:
        tables.table_scenarios(s, quick, {"ours": OURS, "pyiceberg": PYICEBERG, "duckdb": DUCKDB})

    if not args.scenarios or any(n.startswith("py_") for n in args.scenarios):
        python_scenarios(s, rows, files, plain, mor, aggs_full, full_aggs_sql)

    if not args.no_s3 and (not args.scenarios or any(n.startswith("s3_") for n in args.scenarios)):
        s3_scenarios(s, rows, files, agg, q_full, aggs_full, q_sel, sel_range, q_mor)
    return finish(s, args, scale, rows, files, started)


def finish(s, args, scale, rows, files, started) -> int:
    """Writes the report (JSON, markdown, chart); 1 when one of our engines did not complete."""
    report = {
        "scale": scale,
        "rows": rows,
        "files": files,
        "runs": args.runs,
        "cap_s": args.cap,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.monotonic() - started, 1),
        "scenarios": s.scenarios,
    }
    json_path = os.path.join(args.out, "report.json")
    json.dump(report, open(json_path, "w"), indent=1)
    md = markdown(report)
    open(os.path.join(args.out, "report.md"), "w").write(md)
    png = os.path.join(args.out, "report.png")
    subprocess.run(s.peers("chart", "--report", json_path, "--out", png), check=True, capture_output=True)
    print(md)
    log(f"wrote {args.out}/report.md, report.json, report.png in {report['seconds']} s")
    bad = [(sc["name"], r["engine"]) for sc in s.scenarios for r in sc["engines"]
           if r["engine"] in (OURS, PY_OURS, PY_OURS_MOR) and r["status"] != "ok"]
    if bad:
        log(f"iceberg-exec did not complete: {bad}")
        return 1
    return 0


def python_package(args, py: str) -> str:
    """iceberg-exec's Python package in the suite's venv, built by `maturin develop` into the
    target dir: an optimized build for timed runs, any build with --quick (CI has installed a
    debug one). Returns the build's kind."""
    probe = subprocess.run([py, "-c", "import iceberg_exec._native as n; print(n.BUILD)"], capture_output=True, text=True)
    have = probe.stdout.strip() if probe.returncode == 0 else None
    if have and (args.quick or have == "release"):
        return have
    cmd = [os.path.join(os.path.dirname(py), "maturin"), "develop", "--quiet"] + ([] if args.quick else ["--release"])
    log("building the Python package: " + " ".join(cmd[1:]))
    subprocess.run(cmd, check=True, cwd=os.path.join(REPO, "python"),
                   env={**os.environ, "CARGO_TARGET_DIR": target_dir(), "VIRTUAL_ENV": args.venv})
    return "debug" if args.quick else "release"


def python_scenarios(s, rows, files, plain, mor, aggs, agg_sql):
    """iceberg-exec's Python package (`iceberg_exec.Session` and its pyiceberg-shaped verbs)
    against pyiceberg 0.12 on the same tables: what a pyiceberg user would run, each in its own
    process, Python start and imports not timed; catalog and table loading timed."""
    args = s.args
    build = python_package(args, s.py)
    pool = "256MiB"
    pool_note = f"The package's session has a {pool} memory pool ({build} build)."
    mor_pos = s.generate("pos-v2", "--rows", str(rows), "--files", str(files), "--pos-every", "10")

    def read(name, title, goal, table, stream, note):
        extra = ["--stream"] if stream else []

        def cmd(which):
            argv = s.peers(which, "--warehouse", table["warehouse"], "--table", "bench.t", "--aggs", json.dumps(aggs), *extra)
            return argv + (["--memory-limit", pool] if which == "py-read" else [])

        want = s.oracle(table, agg_sql)
        limit = s.peers("pyarrow-read", "--files", s.file_list(table), "--aggs", json.dumps(aggs), *extra)
        deletes = table is not plain
        s.scenario(name, title, goal,
                   [(PY_OURS, cmd("py-read")), (PYICEBERG, cmd("pyiceberg-read")), (PYARROW_LIMIT, limit)],
                   lambda e: None if (e == PYARROW_LIMIT and deletes) else want,
                   scale_note=f"{note} The limit is pyarrow's own reader over the bare data files"
                              f"{' (deletes ignored)' if deletes else ''}. {pool_note}", ours=PY_OURS)

    read("py_full_scan", f"Python: full scan to a pyarrow Table, every column, {rows:,} rows in {files} files",
         ">= 5x faster than pyiceberg", plain, False,
         "`Session.scan(t).read_all()` against `table.scan().to_arrow()`, timed until the Arrow table is there; "
         "the answer (count, sum, min, max) is computed from it, untimed. Each holds the whole result (344 MiB "
         "as pyarrow reads it): peak RSS is mostly the result's.")
    read("py_stream_scan", f"Python: full scan streamed batch by batch, every column, {rows:,} rows",
         ">= 5x faster than pyiceberg; peak RSS under 1/4 of its", plain, True,
         "`Session.scan(t)` (a RecordBatchReader) against `table.scan().to_arrow_batch_reader()`, each batch "
         "aggregated as it comes (the aggregation's time taken off).")
    read("py_mor_scan", f"Python: merge-on-read scan to a pyarrow Table, {rows:,} rows, every 10th position-deleted "
         "(v2 position delete files)", ">= 5x faster than pyiceberg", mor_pos, False,
         "The deletes are v2 position delete files, which pyiceberg applies.")
    read("py_mor_eq_scan", f"Python: merge-on-read scan with equality deletes, {rows:,} rows, 10% position-deleted, "
         f"{rows // 100:,} keys equality-deleted", "pyiceberg refuses equality deletes", mor, False,
         "The table Flink-style writers leave behind.")

    mor_props = ("ALTER TABLE bench.t SET TBLPROPERTIES ('write.delete.mode' = 'merge-on-read', "
                 "'write.update.mode' = 'merge-on-read', 'write.merge.mode' = 'merge-on-read')")

    def before(e):
        s.restore(plain)
        if e == PY_OURS_MOR:
            s.engine_json("sql", "--warehouse", plain["warehouse"], "--sql", mor_props)

    def read_back(select):
        def after(e, run):
            r = run_process(s.peers("duckdb", "--metadata", s.current_metadata(plain), "--sql", f"SELECT {select} FROM {{t}}"),
                            args.cap)
            back = r.answer if r.status == "ok" else [r.status, r.detail]
            return (run.answer or []) + back
        return after

    # delete(): 1% of the rows, a contiguous range of ids inside one file.
    per_file = rows // files
    lo = 3 * per_file + per_file // 5
    hi = lo + rows // 100 - 1
    flt = f"id >= {lo} and id <= {hi}"
    after_delete = s.oracle(plain, "count(*), sum(value)", f"NOT (id BETWEEN {lo} AND {hi})")
    deleted = [str(hi - lo + 1)]

    def delete_cmd(which):
        argv = s.peers(which, "--warehouse", plain["warehouse"], "--table", "bench.t", "--filter", flt)
        return argv + (["--memory-limit", pool] if which.startswith("py-") else [])

    s.scenario("py_delete", f"Python: delete() of 1% of {rows:,} rows ({rows // 100:,}, inside one file)",
               ">= 5x faster than pyiceberg; peak RSS under 1/4 of its",
               [(PY_OURS, delete_cmd("py-delete")), (PY_OURS_MOR, delete_cmd("py-delete")),
                (PYICEBERG, delete_cmd("pyiceberg-delete"))],
               lambda e: (deleted if e != PYICEBERG else []) + after_delete, before, read_back("count(*), sum(value)"),
               "The table's default mode is copy-on-write (the spec's default for an unset write.delete.mode); the "
               "second row sets merge-on-read first. pyiceberg deletes by copy-on-write in both. The rows left are "
               f"read back by DuckDB. {pool_note}", ours=PY_OURS)
    s.restore(plain)

    # upsert(): `changes` rows, half updating rows spread over every file, half new; the issue's
    # 1M into 10M, and a tenth of it, which pyiceberg may finish.
    base = s.oracle(plain, "count(*), sum(value)")

    def upsert(name, changes):
        half = changes // 2
        new_sum = sum((rows + i) % 1000 + 1 for i in range(changes - half))
        want = [str(half), str(changes - half), str(int(base[0]) + changes - half), str(int(base[1]) + half + new_sum)]

        def cmd(which):
            argv = s.peers(which, "--warehouse", plain["warehouse"], "--table", "bench.t", "--rows", str(rows),
                           "--changes", str(changes))
            return argv + (["--memory-limit", pool] if which.startswith("py-") else [])

        s.scenario(name, f"Python: upsert() of {changes:,} rows ({half:,} updates spread over every file, "
                   f"{changes - half:,} inserts) into {rows:,}", ">= 5x faster than pyiceberg; peak RSS under 1/4 of its",
                   [(PY_OURS, cmd("py-upsert")), (PY_OURS_MOR, cmd("py-upsert")), (PYICEBERG, cmd("pyiceberg-upsert"))],
                   lambda e: want, before, read_back("count(*), sum(value)"),
                   "`upsert(df, join_cols=['id'])`; the answer is UpsertResult's two counts, then the table's count and "
                   "sum(value) read back by DuckDB. The input is the same pyarrow Table (built untimed). Copy-on-write "
                   f"(the table's default) in the first row, merge-on-read in the second; pyiceberg rewrites. {pool_note}",
                   ours=PY_OURS)
        s.restore(plain)

    upsert("py_upsert", rows // 10)
    upsert("py_upsert_tenth", rows // 100)


def s3_scenarios(s, rows, files, agg, q_full, aggs_full, q_sel, sel_range, q_mor):
    """The scans and merge-on-read DML on SeaweedFS, through its Iceberg REST catalog, against
    DuckDB ATTACHed to the same catalog and DataFusion over the same parquet objects."""
    args, E = s.args, s.engine
    data = os.path.join(s.work, "seaweed")
    stamp = os.path.join(data, "iceberg-exec-tables.json")
    source = open(os.path.join(SUITE, "engine.rs"), "rb").read()
    eq_keys = max(rows // 100_000, 1)
    want = json.dumps([rows, files, eq_keys, hashlib.sha256(source).hexdigest()])
    tables = json.load(open(stamp)) if os.path.exists(stamp) else {}
    if tables.get("options") != want:
        # Tables made by another generator (or scale) go, and the server's state with them.
        shutil.rmtree(data, ignore_errors=True)
        tables = {"options": want}
    log("starting SeaweedFS (S3 + Iceberg REST catalog) on loopback")
    server = seaweed.SeaweedFs(os.path.join(args.venv, "bin", "weed"), data)
    try:
        catalog = server.catalog()
        storage_args = [a for k, v in server.storage().items() for a in ("--catalog-prop", f"{k}={v}")]
        ours_args = ["--catalog-uri", catalog["uri"], "--warehouse", catalog["warehouse"],
                     "--catalog-prop", f"credential={catalog['credential']}", *storage_args]
        catalog_json = server.catalog_json()
        for name, options in (
            ("plain", ["--rows", str(rows), "--files", str(files)]),
            ("mor", ["--rows", str(rows), "--files", str(files), "--pos-every", "10", "--eq-keys", str(eq_keys)]),
        ):
            if name not in tables:
                log(f"generating s3 {name} {' '.join(options)}")
                started = time.monotonic()
                doc = s.engine_json("generate", *ours_args, "--table", name, *options)
                doc.update(generate_s=round(time.monotonic() - started, 1))
                tables[name] = doc
                json.dump(tables, open(stamp, "w"))
            tables[name].update(warehouse=os.path.join(s.work, f"s3-{name}"), storage_args=storage_args)
        plain, mor = tables["plain"], tables["mor"]
        counter = server.requests

        def engines(table, query, aggs, pyfilter=None):
            name = table["table"]
            py = s.peers("pyiceberg-scan", "--catalog", catalog_json, "--table", name, "--aggs", json.dumps(aggs))
            if pyfilter:
                py += ["--filter", pyfilter]
            return [
                (OURS, [E, "sql", *ours_args, "--sql", query.replace("{t}", name)]),
                (DUCKDB_REST, s.peers("duckdb-rest", "--catalog", catalog_json, "--table", name, "--sql", query)),
                (PYICEBERG_REST, py),
                # Cold like the others: its clock covers registering the files (their footers).
                (LIMIT_S3, [E, "datafusion", *storage_args, "--cold", "--parquet", f"t={s.file_list(table)}", "--sql",
                            query.replace("{t}", "t")]),
            ]

        def expect(want, limit_ignores_deletes=False):
            return lambda e: None if (e == LIMIT_S3 and limit_ignores_deletes) else want

        note = ("SeaweedFS on loopback; S3 requests counted at the server around each run (the catalog's own "
                "reads are not S3 requests). Times cover the statement with its metadata and manifest reads; "
                "each engine's connection to the catalog is made before the clock starts. In the scans, the "
                "limit's clock covers registering the files too (DataFusion reads their footers then).")
        s.scenario("s3_full_scan", f"S3 + REST: full scan, {rows:,} rows in {files} appends",
                   "<= 1.0x DuckDB, <= 1.1x the bare read, fewer GETs than DuckDB",
                   engines(plain, q_full, aggs_full), expect(s.oracle(plain, "count(*), sum(value), min(k), max(s)")),
                   scale_note=note, counter=counter)
        lo, hi = sel_range
        s.scenario("s3_selective_scan", f"S3 + REST: selective scan (1% of ids), {rows:,} rows, cold process",
                   "<= 1.0x DuckDB, <= 1.1x the bare read, fewer GETs than DuckDB",
                   engines(plain, q_sel, [["count"], ["sum", "value"]], pyfilter=f"id >= {lo} and id <= {hi}"),
                   expect(s.oracle(plain, agg, f"id BETWEEN {lo} AND {hi}")), scale_note=note, counter=counter)
        s.scenario("s3_mor_scan", f"S3 + REST: merge-on-read scan, 10% position-deleted, {eq_keys:,} equality-deleted keys",
                   "<= 1.0x DuckDB, fewer GETs than DuckDB",
                   engines(mor, q_mor, [["count"], ["sum", "value"]]), expect(s.oracle(mor, agg), limit_ignores_deletes=True),
                   scale_note=note + " The limit reads the data files and ignores the deletes; DuckDB applies equality "
                   "deletes per key and per row, so this table has few of them (mor_scan has 1% of the rows).",
                   counter=counter)

        # Merge-on-read DML through the catalog: every run starts from the generated snapshot
        # (a rollback commit), and DuckDB reads the effect back through the catalog.
        per_file = rows // files
        d_lo = 3 * per_file + per_file // 5
        d_hi = d_lo + rows // 1000 - 1
        cond = f"id BETWEEN {d_lo} AND {d_hi}"
        ns, tname = plain["table"].split(".")

        def before(e):
            server.rollback(ns, tname, plain["snapshot_id"])

        def read_back(e, run):
            if e == LIMIT_S3:
                return None
            r = run_process(s.peers("duckdb-rest", "--catalog", catalog_json, "--table", plain["table"], "--sql",
                                    f"SELECT {agg} FROM {{t}}"), args.cap)
            return r.answer if r.status == "ok" else [r.status, r.detail]

        for name, title, ours_sql, mode_key, want_after in (
            ("s3_mor_delete", f"S3 + REST: merge-on-read DELETE of 0.1% ({rows // 1000:,} rows), 64 MiB pool",
             f"DELETE FROM {{t}} WHERE {cond}", "iceberg.delete_mode", s.oracle(plain, agg, f"NOT ({cond})")),
            ("s3_mor_update", f"S3 + REST: merge-on-read UPDATE of 0.1% ({rows // 1000:,} rows), 64 MiB pool",
             f"UPDATE {{t}} SET value = value + 1 WHERE {cond}", "iceberg.update_mode",
             (lambda base, n: [base[0], str(int(base[1]) + n)])(s.oracle(plain, agg), d_hi - d_lo + 1)),
        ):
            dml = [
                (OURS, [E, "sql", *ours_args, "--memory-limit", "64M", "--set", f"{mode_key}=merge-on-read",
                        "--sql", ours_sql.replace("{t}", plain["table"])]),
                (DUCKDB_REST, s.peers("duckdb-rest", "--catalog", catalog_json, "--table", plain["table"], "--sql", ours_sql)),
                (LIMIT_S3, [E, "datafusion", *storage_args, "--parquet", f"t={s.file_list(plain)}", "--sql",
                            f"SELECT count(*) FROM t WHERE {cond}"]),
            ]
            s.scenario(name, title, "at least as fast as DuckDB, fewer GETs", dml,
                       (lambda w: lambda e: None if e == LIMIT_S3 else w)(want_after), before, read_back,
                       "Both write position deletes (DuckDB's UPDATE also appends the new rows). The limit is "
                       "finding the rows. " + note, counter=counter)

        # INSERT through the catalog: new data files and a commit, against DuckDB's INSERT and
        # DataFusion's COPY of the same rows to the same server.
        n = max(rows // 10, 1000)
        row_sql = ("SELECT value AS id, value * 7919 % 1000003 AS k, value % 1000 AS value, "
                   "'str-' || CAST(value % 5000 AS VARCHAR) AS s FROM {source}")
        ours_rows = row_sql.format(source=f"generate_series({rows}, {rows + n - 1})")
        duck_rows = row_sql.format(source=f"range({rows}, {rows + n}) AS g(value)")
        base = s.oracle(plain, agg)
        want_insert = [str(int(base[0]) + n), str(int(base[1]) + sum(v % 1000 for v in range(rows, rows + n)))]
        out = f"s3://{seaweed.BUCKET}/copy-out/out.parquet"
        s.scenario(
            "s3_insert", f"S3 + REST: INSERT of {n:,} rows, 64 MiB pool", "at least as fast as DuckDB; close to the COPY limit",
            [(OURS, [E, "sql", *ours_args, "--memory-limit", "64M", "--sql", f"INSERT INTO {plain['table']} {ours_rows}"]),
             (DUCKDB_REST, s.peers("duckdb-rest", "--catalog", catalog_json, "--table", plain["table"], "--sql",
                                   f"INSERT INTO {{t}} {duck_rows}")),
             (LIMIT_S3, [E, "datafusion", *storage_args, "--store", f"s3://{seaweed.BUCKET}", "--memory-limit", "64M",
                         "--sql", f"COPY ({ours_rows}) TO '{out}'"])],
            lambda e: None if e == LIMIT_S3 else want_insert, before, read_back,
            "The limit is DataFusion's COPY of the same rows to one parquet object on the same server (no "
            "manifests, no commit). " + note, counter=counter)
        server.rollback(ns, tname, plain["snapshot_id"])
    finally:
        server.stop()


def markdown(report: dict) -> str:
    out = [
        f"# iceberg-exec benchmark report ({report['scale']} scale)",
        "",
        f"{report['date']} · {report['machine']} · median of {report['runs']} run(s), each in its own process · "
        f"cap {report['cap_s']:g} s · whole run {report['seconds']:g} s",
        "",
        "Ratio = iceberg-exec's median time / the engine's (below 1: iceberg-exec is faster). "
        "Peak RSS is the process's (wait4 ru_maxrss). Correct = same answer as the oracle.",
        "",
    ]
    for sc in report["scenarios"]:
        out += [f"## {sc['title']}", "", f"Goal: {sc['goal']}." + (f" {sc['note']}" if sc["note"] else ""), ""]
        counted = sc.get("counted")
        mine = sc.get("ours", OURS)
        if mine != OURS:
            # The Python package's scenarios: its time and peak RSS over each engine's.
            out += [f"| engine | median | peak RSS | correct | {mine} / engine: time | : peak RSS | note |",
                    "|---|---:|---:|---|---:|---:|---|"]
            for r in sc["engines"]:
                if r["status"] == "ok":
                    t, rss = f"{r['median_s']:.3f} s", f"{r['rss_mib']:.0f} MiB"
                    correct = "yes" if r["checked"] else "n/a"
                    ratio = f"{r['ours_over_engine']:.2f}" if "ours_over_engine" in r else ""
                    rss_ratio = f"{r['ours_over_engine_rss']:.2f}" if "ours_over_engine_rss" in r else ""
                elif r["status"] == "cap":
                    t, rss, correct = f"> {report['cap_s']:g} s", "", "not known"
                    ratio, rss_ratio = "< " + ratio_vs_cap(report, sc), ""
                else:
                    t, rss, correct, ratio, rss_ratio = "", "", {"wrong": "**WRONG**"}.get(r["status"], r["status"]), "", ""
                out.append(f"| {r['engine']} | {t} | {rss} | {correct} | {ratio} | {rss_ratio} | {r['detail']} |")
            out.append("")
            continue
        if counted:
            out += ["| engine | median | peak RSS | correct | iceberg-exec / engine | S3 requests | GETs: iceberg-exec / engine | note |",
                    "|---|---:|---:|---|---:|---|---:|---|"]
        else:
            out += ["| engine | median | peak RSS | correct | iceberg-exec / engine | note |", "|---|---:|---:|---|---:|---|"]
        for r in sc["engines"]:
            if r["status"] == "ok":
                t = f"{r['median_s']:.3f} s"
                rss = f"{r['rss_mib']:.0f} MiB"
                correct = "yes" if r["checked"] else "n/a"
                ratio = f"{r['ours_over_engine']:.2f}" if "ours_over_engine" in r else ""
            elif r["status"] == "cap":
                t, rss, correct, ratio = f"> {report['cap_s']:g} s", "", "not known", "< " + ratio_vs_cap(report, sc)
            else:
                t, rss, correct, ratio = "", "", {"wrong": "**WRONG**"}.get(r["status"], r["status"]), ""
            if counted:
                reqs = ", ".join(f"{k} {v}" for k, v in sorted(r.get("requests", {}).items()))
                gets = f"{r['ours_over_engine_gets']:.2f}" if "ours_over_engine_gets" in r else ""
                out.append(f"| {r['engine']} | {t} | {rss} | {correct} | {ratio} | {reqs} | {gets} | {r['detail']} |")
            else:
                out.append(f"| {r['engine']} | {t} | {rss} | {correct} | {ratio} | {r['detail']} |")
        out.append("")
    return "\n".join(out)


def ratio_vs_cap(report, sc) -> str:
    mine = sc.get("ours", OURS)
    ours = next((r for r in sc["engines"] if r["engine"] == mine and r["status"] == "ok"), None)
    return f"{ours['median_s'] / report['cap_s']:.4f}" if ours else "?"


if __name__ == "__main__":
    sys.exit(main())
