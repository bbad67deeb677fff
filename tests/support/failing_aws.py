"""A real HTTP endpoint on loopback that answers every AWS request with one error, and counts.

It stands in for an AWS endpoint that is up but failing (a 500 on every call, or throttling):
S3-style XML errors for REST calls, JSON errors for the JSON protocols (Firehose,
CloudWatch's JSON mode), exactly the bodies botocore parses into a ``ClientError``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from tests.support.aiohttp_server import serve_app


@dataclass
class FailingEndpoint:
    port: int = 0
    status: int = 500
    code: str = "InternalError"
    message: str = "We encountered an internal error. Please try again."
    requests: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_point_url(self) -> str:
        """The endpoint for access-point ARNs (with ``resolve_all_to: 127.0.0.1``)."""
        return f"http://s3-accesspoint.localhost:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        await request.read()
        if "json" in request.headers.get("Content-Type", ""):
            body = json.dumps({"__type": self.code, "message": self.message})
            return web.Response(
                status=self.status, text=body, content_type="application/x-amz-json-1.1"
            )
        xml = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{self.code}</Code>'
            f"<Message>{self.message}</Message><RequestId>0</RequestId></Error>"
        )
        return web.Response(status=self.status, text=xml, content_type="application/xml")


@asynccontextmanager
async def failing_endpoint(
    status: int = 500, code: str = "InternalError"
) -> AsyncIterator[FailingEndpoint]:
    endpoint = FailingEndpoint(status=status, code=code)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", endpoint.handle)
    async with serve_app(app) as served:
        endpoint.port = served.port
        yield endpoint


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
