"""Fixtures of the cluster tests: the session's real three-broker Kafka with gated listeners
(``kafka3``, tests/conftest.py; shared with the Kafka probes' tests). Tests that pause brokers
or cut the gates resume and heal before they finish."""
