"""HTTP proxies for the probe client: which one a target uses, and CONNECT tunnels.

The standard variables are read as httpx and curl read them: ``HTTPS_PROXY`` for https
targets, ``HTTP_PROXY`` for http targets, ``ALL_PROXY`` for either when the specific one is
unset (lower-case names win over upper-case ones), and ``NO_PROXY``: a comma-separated list of
host names (``example.com`` also covers its subdomains; a leading ``.`` or ``*.`` is the same),
IP addresses, CIDR ranges (``10.0.0.0/8``), any of them with ``:port``, or ``*`` for no proxy
at all. Only ``http://[user:password@]host[:port]`` proxies are supported; credentials become
a ``Proxy-Authorization: Basic`` header and never appear in messages.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from alivemcp.plumbing._http_dns import Address, idna_host, static_addresses, with_port
from alivemcp.plumbing._http_errors import ClientConfigError, ProxyError

__all__ = ["NoProxy", "Proxy", "ProxySettings", "open_tunnel"]

_MAX_CONNECT_HEAD = 64 * 1024
_MAX_CACHED_ROUTES = 100_000


class Proxy:
    """One HTTP proxy: where it is and how to authenticate (never shown: see :attr:`label`)."""

    __slots__ = ("addresses", "authorization", "host", "label", "port")

    def __init__(self, url: str) -> None:
        if "://" not in url:
            url = f"http://{url}"  # "proxy:3128" means an http proxy, as httpx and curl read it
        parts = urlsplit(url)
        if parts.scheme.lower() != "http":
            raise ClientConfigError(
                f"unsupported proxy scheme {parts.scheme!r} (only http:// proxies)"
            )
        if not parts.hostname:
            raise ClientConfigError("proxy URL has no host")
        try:
            port = parts.port
            host = idna_host(parts.hostname)
        except ValueError as exc:
            raise ClientConfigError(f"bad proxy URL: {exc}") from None
        self.host = host
        self.port = port or 80
        self.label = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"
        self.authorization: str | None = None
        if parts.username is not None:
            userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            token = base64.b64encode(userinfo.encode("utf-8")).decode("ascii")
            self.authorization = f"Basic {token}"
        static = static_addresses(host)
        #: The proxy's addresses when its host is an IP literal or localhost (else looked up).
        self.addresses: list[Address] | None = (
            None if static is None else with_port(static, self.port)
        )

    def __repr__(self) -> str:
        return f"Proxy({self.label})"


class NoProxy:
    """A parsed ``NO_PROXY`` value."""

    __slots__ = ("everything", "names", "networks")

    def __init__(self, value: str) -> None:
        self.everything = False
        #: (domain, port or None): matches the domain and its subdomains.
        self.names: list[tuple[str, int | None]] = []
        self.networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None]] = []
        for raw in value.replace(" ", ",").split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                self.everything = True
                continue
            if "://" in entry:
                entry = entry.split("://", 1)[1]
            entry = entry.rstrip("/")
            host, port = _split_port(entry)
            try:
                network = ipaddress.ip_network(host.strip("[]"), strict=False)
            except ValueError:
                domain = host.lstrip("*").lstrip(".").rstrip(".")
                if domain:
                    self.names.append((domain, port))
            else:
                self.networks.append((network, port))

    def matches(self, host: str, port: int) -> bool:
        if self.everything:
            return True
        host = host.lower().rstrip(".")
        for domain, only_port in self.names:
            if (only_port is None or only_port == port) and (
                host == domain or host.endswith("." + domain)
            ):
                return True
        if self.networks and (host[:1].isdigit() or ":" in host):
            try:
                ip = ipaddress.ip_address(host)
            except ValueError:
                return False
            return any(
                (only_port is None or only_port == port) and ip in network
                for network, only_port in self.networks
            )
        return False


def _split_port(entry: str) -> tuple[str, int | None]:
    """``host:port`` / ``[v6]:port`` / ``host`` / bare IPv6 (no port) / CIDR."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return host, int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


class ProxySettings:
    """Which proxy, if any, a probe session uses for each target."""

    __slots__ = ("_http", "_https", "_no_proxy", "_routes")

    def __init__(
        self,
        *,
        http: Proxy | ClientConfigError | None,
        https: Proxy | ClientConfigError | None,
        no_proxy: NoProxy | None = None,
    ) -> None:
        self._http = http
        self._https = https
        self._no_proxy = no_proxy
        self._routes: dict[tuple[bool, str, int], Proxy | None] = {}

    @classmethod
    def single(cls, url: str) -> ProxySettings:
        """Every target through the proxy at ``url`` (a check's own ``proxy``: NO_PROXY is for
        the environment's proxies and does not apply)."""
        proxy = Proxy(url)
        return cls(http=proxy, https=proxy)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProxySettings | None:
        """The standard variables' proxies; None when none is set (no per-request cost)."""

        def variable(name: str) -> str:
            return (environ.get(name.lower()) or environ.get(name.upper()) or "").strip()

        everywhere = variable("all_proxy")
        http_url = variable("http_proxy") or everywhere
        https_url = variable("https_proxy") or everywhere
        if not http_url and not https_url:
            return None
        no_proxy = NoProxy(variable("no_proxy"))
        if no_proxy.everything:
            return None
        return cls(http=_parsed(http_url), https=_parsed(https_url), no_proxy=no_proxy)

    def route(self, https: bool, host: str, port: int) -> Proxy | None:
        """The proxy for a target (host in its ASCII form), or None to go direct; raises
        :class:`ClientConfigError` when the applicable proxy setting is unusable."""
        key = (https, host, port)
        try:
            proxy = self._routes[key]
        except KeyError:
            chosen = self._https if https else self._http
            if isinstance(chosen, ClientConfigError):
                raise ClientConfigError(str(chosen)) from None
            if (
                chosen is not None
                and self._no_proxy is not None
                and self._no_proxy.matches(host, port)
            ):
                chosen = None
            if len(self._routes) >= _MAX_CACHED_ROUTES:
                self._routes.clear()
            proxy = self._routes[key] = chosen
        return proxy


def _parsed(url: str) -> Proxy | ClientConfigError | None:
    if not url:
        return None
    try:
        return Proxy(url)
    except ClientConfigError as exc:  # reported when a target would use it
        return ClientConfigError(f"proxy from the environment: {exc}")


async def open_tunnel(sock: socket.socket, proxy: Proxy, authority: str) -> None:
    """Ask the proxy on ``sock`` to CONNECT to ``authority`` (``host:port``); returns once the
    tunnel is open, raises :class:`ProxyError` with the proxy's answer when it refused."""
    loop = asyncio.get_running_loop()
    lines = [f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}\r\n")
    lines.append("\r\n")
    try:
        await loop.sock_sendall(sock, "".join(lines).encode("ascii"))
        head = b""
        while b"\r\n\r\n" not in head:
            data = await loop.sock_recv(sock, 4096)
            if not data:
                raise ProxyError(
                    f"proxy {proxy.label} closed the connection during CONNECT to {authority}"
                )
            head += data
            if len(head) > _MAX_CONNECT_HEAD:
                raise ProxyError(
                    f"proxy {proxy.label} answered CONNECT with a head longer "
                    f"than {_MAX_CONNECT_HEAD} bytes"
                )
    except OSError as exc:
        raise ProxyError(
            f"proxy {proxy.label} failed during CONNECT to {authority}: {exc.strerror or exc}"
        ) from None
    head, _, extra = head.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ProxyError(
            f"proxy {proxy.label} answered CONNECT with something that is not "
            f"HTTP: {status_line[:60]!r}"
        )
    if not 200 <= int(code) < 300:
        raise ProxyError(f"proxy {proxy.label} refused CONNECT to {authority}: {rest[:80].strip()}")
    if extra:
        raise ProxyError(f"proxy {proxy.label} sent bytes after accepting CONNECT")
