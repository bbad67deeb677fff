"""Discovery: checks made from lists kept elsewhere (an MCP registry, Prometheus HTTP or file
service discovery), refreshed while the daemon runs.

``alivemcp.discovery.config`` is the ``discovery:`` section of the config (it belongs to the
config layer, as ``alivemcp.alerting.config`` does); the rest is the discovery layer, between
config and engine: the sources (:mod:`.registry`, :mod:`.sd`), what turns their targets into
checks (:mod:`.build`) and the :class:`~alivemcp.discovery.manager.DiscoveryManager` that
refreshes them. This package's face imports nothing, so that loading the config section does
not load the layer above it.
"""
