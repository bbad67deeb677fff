"""``kafka_canary``: the produce-path canary.

The probe (``probe``) keeps the canary topic covering every broker, produces to every
partition and reads its messages back; what one run did and the verdict on it are in
``verdict``. Its params are in ``params``.
"""

from probes.kafka_canary.params import KafkaCanaryParams
from probes.kafka_canary.probe import KafkaCanaryProbe

__all__ = ["KafkaCanaryParams", "KafkaCanaryProbe"]
