"""Hygiene: what every layer above may use to stay safe and lean. Redaction of secrets
(:mod:`.redact`), making untrusted text inert (:mod:`.untrusted`), structured logging through
both (:mod:`.logging`), and the collector and allocator tuning of a process that holds
millions of long-lived objects (:mod:`.heap`). Imports nothing of alivemcp but the contract."""
