"""alivemcp: uptime and health prober for MCP servers and the AWS data plane behind them."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("alivemcp")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

# Modules that moved into the role packages stay importable by their 0.1 paths (alivemcp._moved).
from alivemcp import _moved

_moved.install()
