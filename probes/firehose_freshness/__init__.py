"""``firehose_freshness``: is a Firehose delivery stream delivering, on time and intact?

The probe (``probe``) reads the stream's state, CloudWatch freshness, the error output and an
end-to-end canary; where Firehose puts a record is in ``prefixes`` (the destination, prefix
expansion, dynamic partitioning keys), the canary record and the verdict on it once found in
``canary``, how it is looked for in S3 in ``search``, what a delivered object says about the
canary in ``delivery`` (JSON lines and the transformation trap, Parquet/ORC magic bytes). Its
params are in ``params``.
"""

from probes.firehose_freshness.delivery import (
    DeliveryCheck,
    columnar_problem,
    inspect_delivery,
    scan_delivery,
)
from probes.firehose_freshness.params import FirehoseFreshnessParams
from probes.firehose_freshness.prefixes import (
    DEFAULT_ERROR_PREFIXES,
    ERROR_TYPES,
    expand_prefix,
    expected_prefixes,
    jq_partition_keys,
)
from probes.firehose_freshness.prefixes import (
    error_listing_prefixes as _error_listing_prefixes,
)
from probes.firehose_freshness.probe import FirehoseFreshnessProbe

__all__ = [
    "DEFAULT_ERROR_PREFIXES",
    "ERROR_TYPES",
    "DeliveryCheck",
    "FirehoseFreshnessParams",
    "FirehoseFreshnessProbe",
    "_error_listing_prefixes",
    "columnar_problem",
    "expand_prefix",
    "expected_prefixes",
    "inspect_delivery",
    "jq_partition_keys",
    "scan_delivery",
]
