"""alivemcp: uptime and health prober for MCP servers and the AWS data plane behind them."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("alivemcp")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
