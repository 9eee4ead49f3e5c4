"""Ctrl-C cancels a running statement: SIGINT to a process running a statement that would take
hours ends it within seconds, with KeyboardInterrupt (or, while pyarrow reads, an error naming it)."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent(
    """
    import sys
    from iceberg_exec import Session
    s = Session(warehouse=sys.argv[1])
    s.sql("CREATE SCHEMA IF NOT EXISTS db")
    endless = "SELECT count(*) AS n FROM range(0, 100000000000) WHERE value % 7 = 3"
    print("ready", flush=True)
    try:
        if sys.argv[2] == "read":
            s.sql(endless).to_arrow()
        else:
            s.sql("CREATE TABLE db.huge AS " + endless)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(3)
    except Exception as e:
        print(type(e).__name__, str(e)[:300], flush=True)
        sys.exit(4 if "KeyboardInterrupt" in str(e) else 5)
    sys.exit(0)
    """
)


@pytest.mark.parametrize("how", ["read", "statement"])
def test_ctrl_c_cancels_a_running_statement(tmp_path, how):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "wh"), how],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (3, 4), (proc.returncode, out, err[-1000:])
    assert time.monotonic() - sent < 30
    if how == "statement":
        assert proc.returncode == 3 and "KeyboardInterrupt" in out
    # Nothing was created by the cancelled statement.
    from iceberg_exec import Session, TableNotFound

    with pytest.raises(TableNotFound):
        Session(warehouse=str(tmp_path / "wh")).sql("SELECT * FROM db.huge")
