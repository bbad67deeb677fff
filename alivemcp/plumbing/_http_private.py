"""Never let a public list aim the prober inward: which addresses count as public.

A target that came from a list someone else controls (a public MCP registry, a service
discovery endpoint) must not make the prober connect to its own side of the network: the
cloud metadata service (169.254.169.254), the loopback interface, the private networks the
prober sits in. :func:`non_public_reason` names the range an address falls in when it is not
a public one; the probe client (:class:`~alivemcp.plumbing.http.ProbeSession` with
``allow_private_addresses=False``) applies it to every address it is about to connect to,
after the lookup, so a name that resolves to a private address now (DNS rebinding) is caught
as surely as an IP literal, and so is every redirect the probe follows.

The ranges, tested in this order (an IPv6 address that embeds an IPv4 one, as IPv4-mapped,
NAT64 or 6to4 addresses do, is judged by the IPv4 address inside):

* unspecified (0.0.0.0, ::), loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16 with the
  metadata service, fe80::/10), multicast;
* private networks: RFC 1918 (10/8, 172.16/12, 192.168/16), carrier-grade NAT (100.64.0.0/10),
  unique local IPv6 (fc00::/7), the deprecated site-local IPv6 (fec0::/10);
* reserved ranges (240.0.0.0/4, the broadcast address...), and whatever else the standard
  library's ``ipaddress`` does not call globally routable (documentation and benchmarking
  networks, 0.0.0.0/8, 192.0.0.0/24...).
"""

from __future__ import annotations

import ipaddress

__all__ = ["non_public_reason", "private_address_message"]

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_RFC1918 = (
    ipaddress.IPv4Network("10.0.0.0/8"),
    ipaddress.IPv4Network("172.16.0.0/12"),
    ipaddress.IPv4Network("192.168.0.0/16"),
)
_ULA = ipaddress.IPv6Network("fc00::/7")
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def non_public_reason(address: str | _IP) -> str | None:
    """Why ``address`` is not a public address (``"loopback"``, ``"link-local"``,
    ``"private (RFC 1918)"``...), or None when it is one. A string that is not an IP address
    is not public either (``"not an IP address"``)."""
    if isinstance(address, str):
        try:
            ip: _IP = ipaddress.ip_address(address.partition("%")[0])
        except ValueError:
            return "not an IP address"
    else:
        ip = address
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            reason = _v4_reason(embedded)
            return None if reason is None else f"{reason}, as IPv4 inside IPv6"
        return _v6_reason(ip)
    return _v4_reason(ip)


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (IPv4-mapped, NAT64 64:ff9b::/96, 6to4)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def _common_reason(ip: _IP) -> str | None:
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    return None


def _v4_reason(ip: ipaddress.IPv4Address) -> str | None:
    reason = _common_reason(ip)
    if reason is not None:
        return reason
    if any(ip in network for network in _RFC1918):
        return "private (RFC 1918)"
    if ip in _CGNAT:
        return "carrier-grade NAT (100.64.0.0/10)"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not globally routable"
    return None


def _v6_reason(ip: ipaddress.IPv6Address) -> str | None:
    reason = _common_reason(ip)
    if reason is not None:
        return reason
    if ip in _ULA:
        return "unique local (fc00::/7)"
    if ip in _SITE_LOCAL:
        return "site-local (fec0::/10)"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not globally routable"
    return None


def private_address_message(host: str, address: str, reason: str) -> str:
    """The one wording of a refusal: which host, which address, which rule."""
    shown = host if host == address else f"{host} ({address})"
    return (
        f"refused to connect to {shown}: not a public address ({reason}), and this check may "
        "only reach public ones (allow_private_addresses: false)"
    )
