"""A local stand-in for S3 Object Lambda access points (moto has none).

botocore sends ``GetObject`` with an Object Lambda access point ARN to
``<name>-<account>.<endpoint host>``, signed for the ``s3-object-lambda`` service. With the
plumbing's ``resolve_all_to`` pointed at loopback and ``endpoint_url`` set to
:attr:`ObjectLambdaStandIn.endpoint_url`, that call lands here unchanged. The stand-in then does
what the real service + a transformation Lambda do: fetch the original from the supporting
bucket on moto through a presigned URL, transform it, and answer inline, with an XML error, or
with a 307 redirect to a written-back result (the large-object pattern).

It runs its own event loop in a thread so that synchronous callers (a CLI subprocess started by
a test, which blocks the test's loop) can still reach it.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import unquote

import aiohttp
import boto3
from aiohttp import web

from alivemcp.testbed.moto import ACCOUNT_ID, REGION, MotoServer

__all__ = ["ObjectLambdaStandIn", "TransformMode", "redact_pii"]

#: The seed's redaction patterns, in its order (SSN before phone: an SSN also looks like one).
PII_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d{3}-\d{2}-\d{4}\b"), "[SSN REDACTED]"),
    (re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), "[EMAIL REDACTED]"),
    (re.compile(r"\b\d{3}[-.\s]?\d{3}[-.\s]?\d{4}\b"), "[PHONE REDACTED]"),
    (re.compile(r"\b(?:4\d{12}(?:\d{3})?|5[1-5]\d{14}|3[47]\d{13})\b"), "[CARD REDACTED]"),
)
#: Object Lambda's inline response limit; larger results go through the write-back redirect.
INLINE_LIMIT_BYTES = 6 * 1024 * 1024
_HOST = re.compile(r"^(?P<name>[a-z0-9][a-z0-9-]*)-(?P<account>\d{12})\.")
_SIGNED_FOR_OLAP = re.compile(r"Credential=[^/]+/\d{8}/[a-z0-9-]+/s3-object-lambda/aws4_request")


class TransformMode(StrEnum):
    """How the stand-in's transformation behaves (switchable while it runs)."""

    REDACT = "redact"  # the seed's fail-closed redactor
    MASK = "mask"  # removes PII but writes "***" instead of the configured markers
    FAIL = "fail"  # answers 500 TransformationFailed (fail-closed on error)
    SLOW = "slow"  # redacts correctly after ``delay`` seconds
    FAIL_OPEN = "fail_open"  # returns the raw object: the compliance failure
    REDIRECT = "redirect"  # writes the redacted result back and answers 307 to it


def redact_pii(text: str, *, mask: bool = False) -> str:
    for pattern, marker in PII_PATTERNS:
        text = pattern.sub("***" if mask else marker, text)
    return text


@dataclass
class _AccessPoint:
    bucket: str
    mode: TransformMode = TransformMode.REDACT
    delay: float = 0.0
    #: Answer this many further requests with 500 TransformationFailed before ``mode`` applies.
    fail_first: int = 0
    #: Requests that reached this access point (retries included).
    requests: int = 0


class ObjectLambdaStandIn:
    """Object Lambda access points backed by buckets on a moto server."""

    def __init__(self, moto: MotoServer, host: str = "127.0.0.1") -> None:
        self.moto = moto
        self.host = host
        self.port = 0
        self.requests = 0
        self._points: dict[str, _AccessPoint] = {}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._http: aiohttp.ClientSession | None = None
        self._s3 = boto3.client("s3", **moto.boto3_kwargs())  # presigning only: no I/O

    # --- control (any thread) ---

    def add_access_point(
        self,
        name: str,
        bucket: str,
        mode: TransformMode = TransformMode.REDACT,
        delay: float = 0.0,
        fail_first: int = 0,
    ) -> str:
        """Register an Object Lambda access point over ``bucket``; returns its ARN.
        ``fail_first``: answer that many requests with a 500 before ``mode`` applies."""
        self._points[name] = _AccessPoint(bucket, TransformMode(mode), delay, fail_first)
        return self.arn(name)

    def set_mode(
        self, name: str, mode: TransformMode | str, delay: float = 0.0, fail_first: int = 0
    ) -> None:
        point = self._points[name]
        point.mode, point.delay, point.fail_first = TransformMode(mode), delay, fail_first

    def requests_to(self, name: str) -> int:
        """Requests that reached access point ``name`` so far (each retry counts)."""
        return self._points[name].requests

    @staticmethod
    def arn(name: str) -> str:
        return f"arn:aws:s3-object-lambda:{REGION}:{ACCOUNT_ID}:accesspoint/{name}"

    @property
    def endpoint_url(self) -> str:
        """The ``aws.endpoint_url`` a probe uses (with ``resolve_all_to: 127.0.0.1``)."""
        return f"http://s3-object-lambda.localhost:{self.port}"

    def start(self) -> ObjectLambdaStandIn:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self._serve(ready))
            except BaseException as exc:  # surfaced to start() below
                failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=run, name="object-lambda-stand-in", daemon=True)
        self._thread.start()
        if not ready.wait(10) or failure:
            raise RuntimeError(f"Object Lambda stand-in did not start: {failure or 'timeout'}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)
        self._thread = self._loop = self._stopping = None

    # --- the server (its own thread and loop) ---

    async def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{key:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self.port = runner.addresses[0][1]
        async with aiohttp.ClientSession() as http:
            self._http = http
            ready.set()
            try:
                await self._stopping.wait()
            finally:
                await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        match = _HOST.match(request.host)
        if match is None or match["account"] != ACCOUNT_ID:
            return _error(400, "InvalidRequest", f"not an Object Lambda host: {request.host}")
        if not _SIGNED_FOR_OLAP.search(request.headers.get("Authorization", "")):
            return _error(403, "SignatureDoesNotMatch", "not signed for s3-object-lambda")
        point = self._points.get(match["name"])
        if point is None:
            return _error(404, "NoSuchAccessPoint", "The specified accesspoint does not exist")
        point.requests += 1
        if point.fail_first > 0:
            point.fail_first -= 1
            return _error(500, "TransformationFailed", "PII redaction failed: simulated error")
        if request.method not in ("GET", "HEAD"):
            return _error(405, "MethodNotAllowed", "only GetObject is transformed here")
        key = unquote(request.path.lstrip("/"))
        original = await self._fetch_original(point.bucket, key)
        if isinstance(original, web.Response):
            return original
        return await self._transform(point, original)

    async def _fetch_original(self, bucket: str, key: str) -> bytes | web.Response:
        # What the real service hands the Lambda as ``inputS3Url``: a presigned GET.
        url = self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300
        )
        assert self._http is not None
        async with self._http.get(url) as resp:
            if resp.status == 404:
                return _error(404, "NoSuchKey", "The specified key does not exist.")
            if resp.status != 200:
                return _error(500, "TransformationFailed", f"reading the original: {resp.status}")
            return await resp.read()

    async def _transform(self, point: _AccessPoint, original: bytes) -> web.StreamResponse:
        mode = point.mode
        if mode is TransformMode.FAIL:
            return _error(500, "TransformationFailed", "PII redaction failed: simulated error")
        if mode is TransformMode.FAIL_OPEN:
            return web.Response(body=original, content_type="text/plain")
        if mode is TransformMode.SLOW:
            await asyncio.sleep(point.delay)
        text = original.decode("utf-8", errors="replace")
        transformed = redact_pii(text, mask=mode is TransformMode.MASK).encode()
        if mode is TransformMode.REDIRECT or len(transformed) > INLINE_LIMIT_BYTES:
            return await self._write_back(point.bucket, transformed)
        return web.Response(body=transformed, content_type="text/plain")

    async def _write_back(self, bucket: str, transformed: bytes) -> web.StreamResponse:
        key = f"transformed/{uuid.uuid4().hex}.txt"
        put_url = self._s3.generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300
        )
        assert self._http is not None
        async with self._http.put(put_url, data=transformed) as resp:
            if resp.status != 200:
                return _error(500, "TransformationFailed", f"write-back failed: {resp.status}")
        get_url = self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=300
        )
        return web.Response(status=307, headers={"Location": get_url})


def _error(status: int, code: str, message: str) -> web.Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>{_xml_escape(message)}</Message>"
        f"<RequestId>{uuid.uuid4().hex[:16]}</RequestId></Error>"
    )
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
