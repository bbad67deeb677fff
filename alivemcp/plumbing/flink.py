"""Managed Service for Apache Flink as the prober reads it: the application's description
(``kinesisanalyticsv2`` ``DescribeApplication``); its CloudWatch series are read with
:mod:`alivemcp.plumbing.cloudwatch`.

``client`` arguments are the AWS plumbing's clients (:mod:`alivemcp.plumbing.aws`): their
calls raise only :class:`~alivemcp.errors.ProbeError`, naming the operation and target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FLINK_NAMESPACE", "FlinkApplication", "describe_application"]

#: Where Managed Flink publishes a job's metrics (dimension ``Application``).
FLINK_NAMESPACE = "AWS/KinesisAnalytics"


@dataclass(frozen=True, slots=True)
class FlinkApplication:
    """What ``DescribeApplication`` says about one application, in the terms the probe needs.

    ``billed_kpus`` is what the job's parallelism occupies: current parallelism divided by
    parallelism per KPU, rounded up (None when the description has no parallelism, e.g. a
    SQL application). The orchestration KPU AWS adds per application is the caller's to add.
    """

    name: str
    arn: str
    status: str
    runtime: str
    version_id: int | None
    parallelism: int | None
    current_parallelism: int | None
    parallelism_per_kpu: int | None
    autoscaling: bool
    checkpointing: bool | None
    checkpoint_interval_seconds: float | None

    @property
    def job_kpus(self) -> int | None:
        if self.current_parallelism is None:
            return None
        per_kpu = max(1, self.parallelism_per_kpu or 1)
        return max(1, math.ceil(self.current_parallelism / per_kpu))


async def describe_application(client: Any, name: str) -> FlinkApplication:
    """``DescribeApplication`` for ``name`` (``client``: the ``kinesisanalyticsv2`` client)."""
    answer = await client.describe_application(ApplicationName=name)
    detail: Mapping[str, Any] = answer.get("ApplicationDetail") or {}
    config = detail.get("ApplicationConfigurationDescription") or {}
    flink = config.get("FlinkApplicationConfigurationDescription") or {}
    parallel = flink.get("ParallelismConfigurationDescription") or {}
    checkpoint = flink.get("CheckpointConfigurationDescription") or {}
    interval_ms = checkpoint.get("CheckpointInterval")
    return FlinkApplication(
        name=str(detail.get("ApplicationName") or name),
        arn=str(detail.get("ApplicationARN") or ""),
        status=str(detail.get("ApplicationStatus") or "UNKNOWN"),
        runtime=str(detail.get("RuntimeEnvironment") or ""),
        version_id=_int(detail.get("ApplicationVersionId")),
        parallelism=_int(parallel.get("Parallelism")),
        current_parallelism=_int(parallel.get("CurrentParallelism", parallel.get("Parallelism"))),
        parallelism_per_kpu=_int(parallel.get("ParallelismPerKPU")),
        autoscaling=bool(parallel.get("AutoScalingEnabled")),
        checkpointing=(
            bool(checkpoint["CheckpointingEnabled"])
            if "CheckpointingEnabled" in checkpoint
            else None
        ),
        checkpoint_interval_seconds=(
            float(interval_ms) / 1000.0 if isinstance(interval_ms, int | float) else None
        ),
    )


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
