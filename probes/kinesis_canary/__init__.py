"""``kinesis_canary``: does every shard of a Kinesis data stream take writes, serve reads, and
(optionally) get consumed?

The probe (``probe``) checks the stream's state, writes a canary to every open shard, reads
each back, judges throttling across runs and reads CloudWatch; what one run did is in ``run``,
the consumer's markers (awaited, blamed, deleted) in ``consumer``. Its params are in
``params``.
"""

from probes.kinesis_canary.consumer import ConsumerWatch
from probes.kinesis_canary.params import (
    ConsumerParams,
    DynamoDbMarker,
    KinesisCanaryParams,
    OutputStreamMarker,
    S3Marker,
)
from probes.kinesis_canary.probe import CANARY_FIELD, KinesisCanaryProbe

__all__ = [
    "CANARY_FIELD",
    "ConsumerParams",
    "ConsumerWatch",
    "DynamoDbMarker",
    "KinesisCanaryParams",
    "KinesisCanaryProbe",
    "OutputStreamMarker",
    "S3Marker",
]
