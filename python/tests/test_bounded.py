"""Streaming keeps memory bounded: a 10M-row scan read through `to_reader()` under a 64 MiB pool,
in a subprocess whose peak RSS is measured (a bound on memory, not a time)."""

import json
import subprocess
import sys
import textwrap

ROWS = 10_000_000

CHILD = textwrap.dedent(
    """
    import json, sys
    from iceberg_exec import Session

    def hwm():
        # This process's own peak RSS (getrusage's survives exec: it would be the parent's).
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    s = Session(warehouse=sys.argv[1], memory_limit="64MiB")
    before = hwm()
    rows, total, batches = 0, 0, 0
    for batch in s.sql("SELECT id, k, s FROM db.big").to_reader():
        rows += batch.num_rows
        total += batch.nbytes
        batches += 1
    peak = hwm()
    print(json.dumps({"rows": rows, "bytes": total, "batches": batches, "before_kib": before,
                      "peak_kib": peak, "reserved": s.reserved_memory}))
    """
)


def test_a_scan_far_larger_than_memory_streams_in_bounded_memory(tmp_path):
    from iceberg_exec import Session

    wh = str(tmp_path / "wh")
    s = Session(warehouse=wh)
    s.sql("CREATE SCHEMA db")
    s.sql(
        "CREATE TABLE db.big AS SELECT value AS id, value % 1000 AS k, "
        f"concat('row-', CAST(value AS VARCHAR), '-padding-padding') AS s FROM range(0, {ROWS})"
    )
    del s
    out = subprocess.run([sys.executable, "-c", CHILD, wh], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rows"] == ROWS and got["batches"] > 100
    assert got["reserved"] == 0
    grown_mib = (got["peak_kib"] - got["before_kib"]) / 1024
    data_mib = got["bytes"] / 2**20
    # The rows streamed (over 400 MiB of Arrow data) while the process grew by a fraction of it.
    assert data_mib > 400, data_mib
    assert grown_mib < 200, (grown_mib, data_mib)
    assert got["before_kib"] / 1024 < 300, got
