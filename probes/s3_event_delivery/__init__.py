"""``s3_event_delivery``: does an upload still reach the workers, under the right key?

The probe (``probe``) uploads a canary with a spaced, non-ASCII key and waits for its event on
the queue and, end to end, for the worker's marker; what a queue message says about S3 objects,
and how a canary key goes wrong on the way, is in ``events``. Its params are in ``params``.
"""

from probes.s3_event_delivery.events import (
    ParsedMessage,
    S3Event,
    diagnose_key,
    parse_message,
    wrong_marker_keys,
)
from probes.s3_event_delivery.params import EndToEnd, S3EventDeliveryParams
from probes.s3_event_delivery.probe import S3EventDeliveryProbe

__all__ = [
    "EndToEnd",
    "ParsedMessage",
    "S3Event",
    "S3EventDeliveryParams",
    "S3EventDeliveryProbe",
    "diagnose_key",
    "parse_message",
    "wrong_marker_keys",
]
