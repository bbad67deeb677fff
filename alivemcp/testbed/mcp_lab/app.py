"""The lab app: every path in one route table, a middleware that counts the requests, and
:func:`serve_lab`, which runs it (in the lab's own process)."""

from __future__ import annotations

import ssl
from typing import Any

from aiohttp import web

from alivemcp.testbed.mcp_lab.gated import bearer, expire, modern, redirect
from alivemcp.testbed.mcp_lab.healthy import delayed, drifting, fast_json, fast_sse, slow
from alivemcp.testbed.mcp_lab.hostile import (
    badjson,
    badtools,
    counteroffer,
    error500,
    hang,
    html,
    huge,
    initerror,
    midclose,
    noinitialized,
)
from alivemcp.testbed.mcp_lab.legacy import legacy_post, legacy_stream
from alivemcp.testbed.mcp_lab.scripted import (
    add_script,
    scripted,
    scripted_legacy,
    scripted_legacy_post,
)
from alivemcp.testbed.mcp_lab.state import LAB_STATE, LabState, json_reply, lab_state
from alivemcp.testbed.mcp_lab.streams import ping_first, resume
from alivemcp.testbed.mcp_lab.surface import (
    SURFACE_LAB,
    SurfaceLab,
    add_surface,
    custom_surface,
    later_surface,
    named_surface,
    replace_surface,
)

__all__ = ["ROUTES", "lab_app", "serve_lab"]


@web.middleware
async def count(request: web.Request, handler: Any) -> web.StreamResponse:
    """Count each request by method and path (what ``GET /_stats`` shows)."""
    lab_state(request).note(f"{request.method} {request.path}")
    response: web.StreamResponse = await handler(request)
    return response


async def stats(request: web.Request) -> web.StreamResponse:
    """GET /_stats: the requests (and events) seen so far, by name."""
    return json_reply(lab_state(request).seen)


#: Every path of the lab (``LAB_PATHS`` says what each does). "*": any method; the handler
#: answers the methods its server does not take.
ROUTES = [
    # -- the lab's own controls
    web.get("/_stats", stats),
    web.post("/_script", add_script),
    web.route("*", "/scripted/{token}", scripted),
    web.route("*", "/scripted-legacy/{token}", scripted_legacy),
    web.post("/scripted-legacy/{token}/messages", scripted_legacy_post),
    web.route("*", "/redir-loop/{hop}", redirect),
    web.route("*", "/delayed/{ms}/{shape:json|sse}", delayed),
    web.post("/_surface", add_surface),
    web.put("/_surface/{token}", replace_surface),
    web.route("*", "/surface/custom/{token}", custom_surface),
    web.route("*", "/surface/later/{seconds}", later_surface),
    web.route("*", "/surface/{name}", named_surface),
    # -- one server per path
    web.route("*", "/json", fast_json),
    web.route("*", "/sse", fast_sse),
    web.route("*", "/hang", hang),
    web.route("*", "/error500", error500),
    web.route("*", "/html", html),
    web.route("*", "/badjson", badjson),
    web.route("*", "/initerror", initerror),
    web.route("*", "/slow", slow),
    web.route("*", "/expire", expire),
    web.route("*", "/expire400", expire),
    web.route("*", "/counteroffer", counteroffer),
    web.route("*", "/midclose", midclose),
    web.route("*", "/huge", huge),
    web.route("*", "/badtools", badtools),
    web.route("*", "/noinitialized", noinitialized),
    web.route("*", "/modern", modern),
    web.route("*", "/bearer", bearer),
    web.route("*", "/legacy", legacy_stream),
    web.route("*", "/drift", drifting),
    web.route("*", "/legacy-foreign", legacy_stream),
    web.route("*", "/legacy-ping", legacy_stream),
    web.route("*", "/redir", redirect),
    web.route("*", "/redir/", fast_sse),
    web.route("*", "/redir-foreign", redirect),
    web.route("*", "/redir301", redirect),
    web.route("*", "/resume", resume),
    web.route("*", "/ping-first", ping_first),
    web.post("/legacy/messages", legacy_post),
]


def lab_app() -> web.Application:
    """A new lab, with state of its own."""
    app = web.Application(client_max_size=1024 * 1024, middlewares=[count])
    app[LAB_STATE] = LabState()
    app[SURFACE_LAB] = SurfaceLab()
    app.router.add_routes(ROUTES)
    return app


def serve_lab(port: int, cert: str | None = None, client_ca: str | None = None) -> None:
    """Serve the lab on 127.0.0.1:``port`` until a signal; over TLS with the certificate and
    key in ``cert``, demanding a client certificate signed by ``client_ca`` when given."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass
    context = None
    if cert is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(client_ca)
    web.run_app(
        lab_app(),
        host="127.0.0.1",
        port=port,
        print=None,
        access_log=None,
        handle_signals=True,
        ssl_context=context,
    )
