"""A stand-in for S3 replication on moto, which stores replication configuration but copies
nothing and never reports a ``ReplicationStatus``.

:class:`S3Replicator` watches the source bucket (listing object versions under a prefix) and
copies each new version into the destination bucket after ``delay`` seconds, like a replication
rule would. Its ``mode`` makes it misbehave on demand:

- ``"replicate"``: copy after the delay, status PENDING then COMPLETED;
- ``"stopped"``: see new objects but never copy them (a disabled rule, a revoked KMS grant):
  status stays PENDING;
- ``"fail"``: never copy and report status FAILED once the delay has passed.

Real S3 reports the status in the source object's ``x-amz-replication-status`` header.
:class:`ReplicationStatusProxy` is a plain HTTP proxy in front of moto that adds that header to
HEAD/GET answers for objects the replicator tracks, so a probe pointed at the proxy reads
``ReplicationStatus`` through its unchanged aiobotocore call.

Both run in threads with blocking clients, so they keep working while a test blocks its event
loop (e.g. waiting for the CLI in a subprocess).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

ReplicatorMode = Literal["replicate", "stopped", "fail"]

__all__ = [
    "ReplicationStatusProxy",
    "ReplicatorMode",
    "S3Replicator",
    "allow_reads",
    "create_replicated_buckets",
    "deny_head_object",
]


@dataclass
class _Tracked:
    seen_at: float
    status: str  # PENDING | COMPLETED | FAILED


class S3Replicator:
    """Copies new source versions under ``prefix`` into the destination after ``delay``."""

    def __init__(
        self,
        s3_client: Any,
        source_bucket: str,
        destination_bucket: str,
        *,
        prefix: str = "",
        delay: float = 0.5,
        mode: ReplicatorMode = "replicate",
        scan_interval: float = 0.1,
    ) -> None:
        self._s3 = s3_client
        self.source_bucket = source_bucket
        self.destination_bucket = destination_bucket
        self.prefix = prefix
        self.delay = delay
        self.mode: ReplicatorMode = mode
        self.scan_interval = scan_interval
        self.copied = 0
        self.errors: list[str] = []
        self._tracked: dict[tuple[str, str], _Tracked] = {}  # (key, version id)
        self._latest: dict[str, str] = {}  # key -> newest version id seen
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- control ---------------------------------------------------------------------------

    def start(self) -> S3Replicator:
        self._thread = threading.Thread(target=self._run, name="s3-replicator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def replication_status(self, bucket: str, key: str) -> str | None:
        """What real S3 would report for the newest version of ``key`` (None: not covered)."""
        if bucket != self.source_bucket:
            return None
        with self._lock:
            version = self._latest.get(key)
            tracked = self._tracked.get((key, version)) if version is not None else None
            return tracked.status if tracked else None

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._scan()
                self._advance()
            except Exception as exc:  # moto reset mid-scan, bucket gone: keep going
                self.errors.append(f"{type(exc).__name__}: {exc}")
                del self.errors[:-20]
            self._stop.wait(self.scan_interval)

    def _scan(self) -> None:
        listing = self._s3.list_object_versions(Bucket=self.source_bucket, Prefix=self.prefix)
        now = time.monotonic()
        present: set[tuple[str, str]] = set()
        with self._lock:
            for item in listing.get("Versions", []):
                ident = (item["Key"], item["VersionId"])
                present.add(ident)
                if ident not in self._tracked:
                    self._tracked[ident] = _Tracked(seen_at=now, status="PENDING")
                if item.get("IsLatest"):
                    self._latest[item["Key"]] = item["VersionId"]
            # Forget deleted versions, so a long-running demo does not grow without bound.
            for ident in [i for i in self._tracked if i not in present]:
                del self._tracked[ident]
            for key in [k for k, v in self._latest.items() if (k, v) not in present]:
                del self._latest[key]

    def _advance(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [
                (ident, tracked)
                for ident, tracked in self._tracked.items()
                if tracked.status == "PENDING" and now - tracked.seen_at >= self.delay
            ]
        for (key, version), tracked in due:
            if self.mode == "stopped":
                continue
            if self.mode == "fail":
                tracked.status = "FAILED"
                continue
            try:
                self._s3.copy_object(
                    Bucket=self.destination_bucket,
                    Key=key,
                    CopySource={"Bucket": self.source_bucket, "Key": key, "VersionId": version},
                )
            except Exception as exc:
                code = getattr(exc, "response", {}).get("Error", {}).get("Code")
                if code in {"NoSuchKey", "NoSuchVersion", "404"}:
                    tracked.status = "FAILED"  # deleted before it could be copied
                else:
                    self.errors.append(f"copy {key}: {type(exc).__name__}: {exc}")
                continue
            tracked.status = "COMPLETED"
            self.copied += 1


class ReplicationStatusProxy:
    """HTTP proxy to moto that adds ``x-amz-replication-status`` like real S3 does."""

    def __init__(self, upstream: str, replicator: S3Replicator, host: str = "127.0.0.1") -> None:
        parts = urlsplit(upstream)
        self._upstream_host = parts.hostname or "127.0.0.1"
        self._upstream_port = parts.port or 80
        self._replicator = replicator
        handler = _handler_class(self)
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}"

    def start(self) -> ReplicationStatusProxy:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="s3-replication-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _status_for(self, method: str, path: str) -> str | None:
        if method not in {"HEAD", "GET"}:
            return None
        parts = urlsplit(path)
        if parts.query and "versionId" not in parts.query:
            return None  # bucket-level GETs (listings, configuration)
        bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
        if not key:
            return None
        return self._replicator.replication_status(bucket, key)

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        body = _read_body(handler)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
        conn = http.client.HTTPConnection(self._upstream_host, self._upstream_port, timeout=30)
        try:
            conn.request(handler.command, handler.path, body=body, headers=headers)
            response = conn.getresponse()
            payload = response.read()
            handler.send_response(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                    handler.send_header(name, value)
            status = self._status_for(handler.command, handler.path)
            if status is not None and response.status == 200:
                handler.send_header("x-amz-replication-status", status)
            length = response.getheader("content-length")
            if handler.command == "HEAD":
                handler.send_header("Content-Length", length or "0")
                handler.end_headers()
            else:
                handler.send_header("Content-Length", str(len(payload)))
                handler.end_headers()
                handler.wfile.write(payload)
        finally:
            conn.close()


_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "expect"}
)


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("content-length") or 0)
    return handler.rfile.read(length) if length else b""


def _handler_class(proxy: ReplicationStatusProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            try:
                proxy._forward(self)
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                with contextlib.suppress(OSError):
                    self.send_error(502, f"upstream: {exc}")

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


# -- bucket helpers used by the tests and the demo ------------------------------------------


def create_replicated_buckets(
    s3_client: Any, source_bucket: str, destination_bucket: str, *, prefix: str = ""
) -> None:
    """Both buckets versioned (replication requires it) plus a replication rule, which moto
    stores so the setup reads like the real one."""
    for bucket in (source_bucket, destination_bucket):
        s3_client.create_bucket(Bucket=bucket)
        s3_client.put_bucket_versioning(
            Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
        )
    s3_client.put_bucket_replication(
        Bucket=source_bucket,
        ReplicationConfiguration={
            "Role": "arn:aws:iam::123456789012:role/replication",
            "Rules": [
                {
                    "ID": "canary",
                    "Status": "Enabled",
                    "Priority": 1,
                    "Filter": {"Prefix": prefix},
                    "DeleteMarkerReplication": {"Status": "Disabled"},
                    "Destination": {"Bucket": f"arn:aws:s3:::{destination_bucket}"},
                }
            ],
        },
    )


def deny_head_object(s3_client: Any, bucket: str) -> None:
    """A bucket policy that makes HeadObject answer 403 (moto checks HEAD as s3:HeadObject),
    like a DR bucket policy change that locks out readers."""
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyReaders",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:HeadObject", "s3:GetObject"],
                "Resource": f"arn:aws:s3:::{bucket}/*",
            }
        ],
    }
    s3_client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


def allow_reads(s3_client: Any, bucket: str) -> None:
    s3_client.delete_bucket_policy(Bucket=bucket)
