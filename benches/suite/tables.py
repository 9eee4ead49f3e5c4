"""Scenarios on what users do with tables rather than rows: metadata tables of a table with many
files, and parquet files brought in with add_files; each beside pyiceberg (and DuckDB where it
has the same thing), in the suite's run (see compare.py)."""

import os
import shutil
import subprocess


def table_scenarios(s, quick: bool, names: dict) -> None:
    """Adds the scenarios to suite `s` (compare.py's Suite); `names`: the engines' labels."""
    E = s.engine
    ours, pyiceberg, duckdb = names["ours"], names["pyiceberg"], names["duckdb"]
    data_files = 2_000 if quick else 200_000
    delete_files = data_files // 10
    t = s.generate(
        "inspect", "--data-files", str(data_files), "--delete-files", str(delete_files), planning=True, pristine=False
    )
    wh = t["warehouse"]
    total = data_files + delete_files
    note = ("The files are listed in manifests but not written: the metadata tables read manifests only. "
            "pyiceberg's inspect builds the whole answer as one Arrow table; iceberg-exec streams it a manifest "
            "at a time under the pool.")
    s.scenario(
        "metadata_files", f"SELECT count(*) FROM t$files: {data_files:,} data and {delete_files:,} delete files, 64 MiB pool",
        "bounded memory; faster than pyiceberg's inspect.files()",
        [(ours, [E, "sql", "--warehouse", wh, "--memory-limit", "64M", "--sql", 'SELECT count(*) FROM bench."t$files"']),
         (pyiceberg, s.peers("pyiceberg-inspect", "--warehouse", wh, "--table", "bench.t", "--kind", "files")),
         (duckdb, s.peers("duckdb", "--metadata", s.current_metadata(t), "--sql", "SELECT count(*) FROM iceberg_metadata({m})"))],
        lambda e: [str(total)], scale_note=note,
    )
    s.scenario(
        "metadata_partitions", f"SELECT count(*) FROM t$partitions: 50 partitions of {total:,} files, 64 MiB pool",
        "bounded memory; faster than pyiceberg's inspect.partitions()",
        [(ours, [E, "sql", "--warehouse", wh, "--memory-limit", "64M", "--sql", 'SELECT count(*) FROM bench."t$partitions"']),
         (pyiceberg, s.peers("pyiceberg-inspect", "--warehouse", wh, "--table", "bench.t", "--kind", "partitions")),
         (duckdb, "DuckDB has no partitions metadata table")],
        lambda e: ["50"], scale_note=note,
    )

    # add_files: the same parquet files registered in a fresh table by each engine.
    n = 500 if quick else 10_000
    src = os.path.join(s.work, f"add-files-src-{n}")
    if not os.path.exists(src + ".done"):
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run(s.peers("write-files", "--out", src, "--files", str(n)), check=True, capture_output=True)
        open(src + ".done", "w").close()
    awh = os.path.join(s.work, "add-files")

    def fresh(e):
        # A new warehouse each run: the table starts empty for every engine.
        shutil.rmtree(awh, ignore_errors=True)
        os.makedirs(awh)
        for statement in ("CREATE SCHEMA bench",
                          "CREATE TABLE bench.a (id bigint, k bigint, value bigint, s string) USING iceberg"):
            subprocess.run([E, "sql", "--warehouse", awh, "--sql", statement], check=True, capture_output=True)

    def added(e, run):
        doc = s.engine_json("sql", "--warehouse", awh, "--sql", 'SELECT count(*) FROM bench."a$files"')
        return doc["answer"]

    s.scenario(
        "add_files", f"add_files of {n:,} parquet files (footers read, nothing rewritten)",
        "faster than pyiceberg's add_files",
        [(ours, [E, "sql", "--warehouse", awh, "--sql",
                 f"CALL system.add_files(table => 'bench.a', source_table => '`parquet`.`{src}`')"]),
         (pyiceberg, s.peers("pyiceberg-add-files", "--warehouse", awh, "--table", "bench.a", "--dir", src)),
         (duckdb, "DuckDB cannot add files to an Iceberg table")],
        lambda e: [str(n)], fresh, added,
        "Both read every file's footer for its metrics; the files hold 100 rows each.",
    )
