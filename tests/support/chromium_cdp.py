"""Drive Debian's headless Chromium through the DevTools protocol (no browser download needed).

A page test needs more than ``--dump-dom``: it types into inputs, scrolls, clicks, waits for
the page's own refresh loop, and takes a screenshot. The DevTools protocol over a WebSocket
(aiohttp is already a dependency) does all of that with the system browser.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
INSTALL_HINT = (
    "headless Chromium is required for the status page tests and was not found on PATH; "
    "install it with: apt-get update && apt-get install -y chromium "
    "(`make test` does this itself)"
)
# Flags that keep Chromium quiet and working on a closed network, as root, without a GPU.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
)


class ChromiumMissingError(RuntimeError):
    pass


class PageError(RuntimeError):
    """A JavaScript evaluation failed inside the page."""


def find_chromium() -> str:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise ChromiumMissingError(INSTALL_HINT)


class Browser:
    """One headless Chromium process with one page, driven over DevTools."""

    def __init__(self, width: int = 1400, height: int = 900) -> None:
        self.width = width
        self.height = height
        self.exceptions: list[str] = []
        self.console_errors: list[str] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._profile: tempfile.TemporaryDirectory[str] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._load_events: asyncio.Queue[str] = asyncio.Queue()

    async def __aenter__(self) -> Browser:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        binary = find_chromium()
        self._profile = tempfile.TemporaryDirectory(prefix="alivemcp-chromium-")
        profile = Path(self._profile.name)
        self._proc = await asyncio.create_subprocess_exec(
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--window-size={self.width},{self.height}",
            "about:blank",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port = None
        for _ in range(300):
            if self._proc.returncode is not None:
                raise ChromiumMissingError(f"{binary} exited with code {self._proc.returncode}")
            port = _read_port(profile / "DevToolsActivePort")
            if port:
                break
            await asyncio.sleep(0.1)
        else:
            raise ChromiumMissingError(f"{binary} did not open its DevTools port within 30 s")
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        page = next(t for t in targets if t.get("type") == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self._proc is not None and self._proc.returncode is None:
            # Chromium forks helpers into its own session: end the whole process group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                await asyncio.wait_for(self._proc.wait(), 10)
        if self._profile is not None:
            self._profile.cleanup()

    async def _read(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    if "error" in data:
                        future.set_exception(PageError(str(data["error"])))
                    else:
                        future.set_result(data.get("result", {}))
                continue
            method = data.get("method")
            params = data.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                text = details.get("exception", {}).get("description") or details.get("text")
                self.exceptions.append(str(text))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                self.console_errors.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
                )
            elif method == "Page.loadEventFired":
                self._load_events.put_nowait(method)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        assert self._ws is not None
        msg_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        message = {"id": msg_id, "method": method, "params": params or {}}
        await self._ws.send_str(json.dumps(message))
        return await asyncio.wait_for(future, 60)

    async def goto(self, url: str) -> None:
        while not self._load_events.empty():
            self._load_events.get_nowait()
        await self.send("Page.navigate", {"url": url})
        await asyncio.wait_for(self._load_events.get(), 60)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise PageError(details.get("exception", {}).get("description") or details["text"])
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll ``expression`` until it is truthy; fail with its last value after ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        value: Any = None
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out waiting for {expression!r} (last: {value!r})")
            await asyncio.sleep(0.1)

    async def type_text(self, selector: str, text: str) -> None:
        """Focus an input and type into it the way a keyboard does (real input events)."""
        await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
            "e.focus(); e.select(); })()"
        )
        await self.send(
            "Input.dispatchKeyEvent",
            {
                "type": "keyDown",
                "key": "Backspace",
                "code": "Backspace",
                "windowsVirtualKeyCode": 8,
            },
        )
        await self.send(
            "Input.dispatchKeyEvent",
            {"type": "keyUp", "key": "Backspace", "code": "Backspace", "windowsVirtualKeyCode": 8},
        )
        if text:
            await self.send("Input.insertText", {"text": text})

    async def click(self, selector: str, timeout: float = 10.0) -> None:
        """A real mouse click at the centre of the first element matching ``selector``, once
        the element is what is at that point (a panel still moving in, or covered, would take
        the click somewhere else: a click that lands nowhere is not waited out by a deadline)."""
        where = (
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; const r = e.getBoundingClientRect();"
            " const x = r.x + r.width / 2, y = r.y + r.height / 2;"
            " const hit = document.elementFromPoint(x, y);"
            " return hit && (hit === e || e.contains(hit)) ? [x, y] : null; })()"
        )
        x, y = await self.wait_for(where, timeout)
        for kind in ("mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            )

    async def screenshot(self, path: Path) -> bytes:
        result = await self.send("Page.captureScreenshot", {"format": "png"})
        data = base64.b64decode(result["data"])
        _write(path, data)
        return data


def _read_port(port_file: Path) -> int | None:
    """Chromium writes the DevTools port it picked to this file once it listens."""
    try:
        text = port_file.read_text()
    except OSError:
        return None
    first = text.split()
    return int(first[0]) if first and first[0].isdigit() else None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


#: Installed before a page loads: every Content-Security-Policy violation is kept in
#: ``window.__csp`` (a test asserts it stays empty: the page needs nothing its CSP forbids).
RECORD_CSP_VIOLATIONS = (
    "window.__csp = []; document.addEventListener('securitypolicyviolation',"
    " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
)

B = TypeVar("B", bound=Browser)


@contextlib.asynccontextmanager
async def csp_watching(
    kind: type[B] = Browser,  # type: ignore[assignment]
    *,
    width: int = 1400,
    height: int = 900,
) -> AsyncIterator[B]:
    """A headless Chromium recording CSP violations (:data:`RECORD_CSP_VIOLATIONS`); a missing
    Chromium fails the test (``make test`` installs it), it never skips."""
    import pytest

    try:
        async with kind(width=width, height=height) as browser:
            await browser.send(
                "Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_CSP_VIOLATIONS}
            )
            yield browser
    except ChromiumMissingError as exc:
        pytest.fail(str(exc))
