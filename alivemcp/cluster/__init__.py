"""Cluster mode: replicas share the checks through a Kafka consumer group.

Kafka's consumer-group protocol is the membership, sharding and fail-over engine: the results
topic has one partition per shard, a check belongs to the shard its name hashes to (the same
murmur2 partitioning Kafka's producers use), and the partitions the group assigns a replica are
the shards it probes. Nothing here elects a leader or coordinates replicas by other means.

The pieces, each a :class:`~alivemcp.cluster.contract.ShardListener` told about shards gained
and lost by :class:`~alivemcp.cluster.node.ClusterNode`:

* alert state (:mod:`.alert_state`): the compacted alert-state topic, read to its end for a
  shard before its alerts are evaluated here;
* the results stream (:mod:`.stream`): every result of ours to the results topic, every status
  change to the status-changes topic;
* probing (the daemon): the checks of the shards held are scheduled, the others are not.

The global view (:mod:`.view`) reads every partition of the results topic, so any replica
serves status and history for all checks.
"""
