"""Helpers of the ``mcp_endpoint`` probe: SSE framing, JSON-RPC matching, transports, auth."""
