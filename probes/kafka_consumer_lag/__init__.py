"""``kafka_consumer_lag``: are the consumer groups keeping up with their topics?

The probe (``probe``) reads a snapshot per run from the brokers (``kafka_source``, over the
Kafka plumbing's ``kafka_offsets``) or MSK's CloudWatch metrics (``cloudwatch``), keeps a
Burrow-style window per partition (``window``) and an offset/time table for time-lag
estimates (``time_table``), judges each partition (``judge``, ``evaluate``) and turns that
into the run's result (``summary``). Its params are in ``params``.
"""

from probes.kafka_consumer_lag.cloudwatch import aligned_range, judge_cloudwatch
from probes.kafka_consumer_lag.evaluate import (
    Evaluation,
    GroupReading,
    LagEvaluator,
    LagSnapshot,
)
from probes.kafka_consumer_lag.judge import (
    GroupFinding,
    PartitionVerdict,
    Thresholds,
    judge_partition,
)
from probes.kafka_consumer_lag.params import CloudWatchLagSource, KafkaConsumerLagParams
from probes.kafka_consumer_lag.probe import KafkaConsumerLagProbe
from probes.kafka_consumer_lag.summary import summarize
from probes.kafka_consumer_lag.time_table import OffsetTimeTable
from probes.kafka_consumer_lag.window import (
    PartitionWindow,
    Sample,
    WindowState,
    classify_window,
)

__all__ = [
    "CloudWatchLagSource",
    "Evaluation",
    "GroupFinding",
    "GroupReading",
    "KafkaConsumerLagParams",
    "KafkaConsumerLagProbe",
    "LagEvaluator",
    "LagSnapshot",
    "OffsetTimeTable",
    "PartitionVerdict",
    "PartitionWindow",
    "Sample",
    "Thresholds",
    "WindowState",
    "aligned_range",
    "classify_window",
    "judge_cloudwatch",
    "judge_partition",
    "summarize",
]
