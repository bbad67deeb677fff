"""Local stand-ins for the real world: moto, Kafka brokers, MCP servers.

Used by ``alivemcp demo`` and by the test suite, so both exercise the same local stack.
Nothing here is imported by the daemon's run path.
"""
