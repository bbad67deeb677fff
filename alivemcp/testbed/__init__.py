"""The testbed: real local components the demo and the tests run against.

moto in server mode (AWS), Apache Kafka brokers from Maven jars, the official MCP SDK and npm
reference servers, and the stand-ins for what those cannot do (S3 replication, Object Lambda).
Used by ``alivemcp demo`` and by the test suite, so both exercise the same components. Nothing
here is imported by the daemon's run path.
"""
