"""``flink_application``: is a Managed Service for Apache Flink application running, fed,
and not burning KPU-hours for nothing?

The traps (seed 002): an application left RUNNING while its input is idle bills every
KPU-hour; one stuck in a non-RUNNING state, or restarting in a loop, processes nothing. Each
run reads:

1. **The application** (``kinesisanalyticsv2`` ``DescribeApplication``): its status, current
   parallelism and parallelism per KPU (the KPUs it occupies, plus the orchestration KPU AWS
   bills per application), autoscaling and the checkpoint interval. RUNNING is up; READY
   (stopped), DELETING or any unknown state is ``down`` when the check expects it running;
   a transition (STARTING, UPDATING, AUTOSCALING, STOPPING, MAINTENANCE, ...) is ``degraded``
   until it has lasted ``stuck_after`` as seen by the prober, then ``down``.
2. **The input** (CloudWatch): ``AWS/Kinesis`` ``IncomingRecords`` of ``source_stream``, or any
   ``input_metric``. RUNNING with no input for ``idle_after`` is ``degraded``, and the reason
   gives the KPU-hours spent idle and their cost at ``kpu_hour_price``. Idle time is counted
   from the end of the last period with input (the first run looks back ``idle_lookback``;
   later runs remember), and no further back than the application is known to have run (its
   ``uptime``, or the prober having seen it start). The cost is today's KPUs times that time:
   an estimate, since autoscaling may have changed the KPUs meanwhile.
3. **The job** (CloudWatch ``AWS/KinesisAnalytics``, dimension ``Application``):
   ``fullRestarts`` rising by ``max_restarts`` within ``restart_window`` is a restart loop
   (``down``; fewer restarts are ``degraded``), ``numberOfFailedCheckpoints`` likewise with
   ``max_failed_checkpoints``; ``lastCheckpointDuration`` above the checkpoint interval (or
   ``slow_checkpoint_above``) is ``degraded``; ``uptime`` is reported.

The prober's own failures (no permission to describe the application or read CloudWatch) are
``unknown``: CloudWatch is the prober's view of the job, so any failure to read it is too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from alivemcp.errors import describe_failure
from alivemcp.plumbing import plumbing_of
from alivemcp.plumbing.aws import AwsSettings, aws_settings_field, within_aws_check_deadline
from alivemcp.plumbing.cloudwatch import (
    MetricQuery,
    Point,
    aligned_window,
    read_metrics,
    standard_period,
)
from alivemcp.plumbing.flink import FLINK_NAMESPACE, FlinkApplication, describe_application
from alivemcp.probe import (
    Duration,
    ErrorKind,
    Findings,
    Observable,
    Probe,
    ProbeError,
    ProbeParams,
    ProbeResult,
    Status,
)

__all__ = ["FlinkApplicationParams", "FlinkApplicationProbe", "InputMetric"]

#: Managed Service for Apache Flink's price per KPU-hour in us-east-1 (USD).
US_EAST_1_KPU_HOUR_PRICE = 0.11
#: States an application passes through: degraded until ``stuck_after``, then down.
TRANSITIONS = frozenset(
    {
        "STARTING",
        "UPDATING",
        "AUTOSCALING",
        "STOPPING",
        "FORCE_STOPPING",
        "ROLLING_BACK",
        "MAINTENANCE",
    }
)
#: CloudWatch is the prober's view of the job: failing to read it never blames the job.
_METRICS_ARE_THE_PROBERS_VIEW = dict.fromkeys(ErrorKind, Status.UNKNOWN)


class InputMetric(BaseModel):
    """Any CloudWatch series that counts the application's input (an MSK topic's
    ``BytesInPerSec``, a custom metric...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(min_length=1, description="CloudWatch namespace, e.g. AWS/Kafka.")
    metric_name: str = Field(min_length=1, description="Metric name.")
    dimensions: dict[str, str] = Field(default_factory=dict, description="Exact dimensions.")
    stat: Literal["Sum", "SampleCount", "Maximum", "Average"] = Field(
        "Sum", description="Statistic per period; a period whose value is above 0 has input."
    )


class FlinkApplicationParams(ProbeParams):
    aws: AwsSettings = aws_settings_field(
        "AWS identity/region for kinesisanalyticsv2 and CloudWatch."
    )
    application_name: str = Field(min_length=1, description="The Managed Flink application.")
    expect_running: bool = Field(
        True, description="The application should be RUNNING (READY/stopped is then down)."
    )
    source_stream: str | None = Field(
        None, description="Kinesis data stream it reads: its IncomingRecords are the input."
    )
    input_metric: InputMetric | None = Field(
        None, description="Another CloudWatch series counting the input (not with source_stream)."
    )
    idle_after: Duration = Field(
        3600.0, description="RUNNING with no input for this long is degraded (idle KPU cost)."
    )
    idle_lookback: Duration = Field(
        21600.0,
        description="How far back the first run looks for the last input (later runs "
        "remember); idle time beyond it is reported as 'at least'.",
    )
    kpu_hour_price: float = Field(
        US_EAST_1_KPU_HOUR_PRICE,
        ge=0,
        description="Price of one KPU-hour (default: us-east-1, USD) for the idle cost.",
    )
    currency: str = Field("USD", min_length=1, description="What kpu_hour_price is in.")
    orchestration_kpus: int = Field(
        1,
        ge=0,
        description="KPUs AWS bills per application on top of the job's (one).",
    )
    stuck_after: Duration = Field(
        900.0, description="A transition (STARTING, UPDATING, ...) longer than this is down."
    )
    restart_window: Duration = Field(
        900.0, description="Window over which restarts and failed checkpoints are counted."
    )
    max_restarts: int = Field(
        3, ge=1, description="fullRestarts rising by this much in the window is a restart loop."
    )
    max_failed_checkpoints: int = Field(
        3, ge=1, description="Failed checkpoints in the window that make it down."
    )
    slow_checkpoint_above: Duration | None = Field(
        None,
        description="lastCheckpointDuration above this is degraded; default: the "
        "application's checkpoint interval.",
    )
    metric_period: Duration = Field(60.0, description="CloudWatch period (whole minutes).")

    @model_validator(mode="after")
    def _one_input(self) -> FlinkApplicationParams:
        if self.source_stream is not None and self.input_metric is not None:
            raise ValueError("give source_stream or input_metric, not both")
        if self.idle_lookback < self.idle_after:
            raise ValueError("idle_lookback must be at least idle_after")
        return self


@dataclass(frozen=True, slots=True)
class _Idle:
    seconds: float
    since_at_least: bool  # no input anywhere the prober has looked
    no_datapoints: bool  # not even zeros: no input, or the series is misnamed
    records: float  # the input over the last idle_after


class FlinkApplicationProbe(Probe[FlinkApplicationParams]):
    Params = FlinkApplicationParams
    summary = "Managed Flink application RUNNING, fed (idle KPU cost), not restarting in a loop"
    target_param = "application_name"
    default_timeout = 20.0
    observables = (
        Observable("application_running", "1 when the application is RUNNING, else 0."),
        Observable(
            "status_age_seconds",
            "How long the prober has seen the application in its current status.",
        ),
        Observable("parallelism", "The job's current parallelism."),
        Observable("kpus", "KPUs billed now: the job's plus the orchestration KPU."),
        Observable("input_records", "The input metric summed over the last idle_after."),
        Observable("idle_seconds", "Time since the input last had records (while RUNNING)."),
        Observable(
            "idle_kpu_seconds",
            "KPU-seconds billed while the input was idle (estimate; /3600 for "
            "KPU-hours, the billing unit).",
        ),
        Observable("idle_cost", "The idle KPU-hours at kpu_hour_price (in currency, USD)."),
        Observable("uptime_seconds", "CloudWatch uptime: the job running without interruption."),
        Observable("restarts_in_window", "Rise of CloudWatch fullRestarts in restart_window."),
        Observable(
            "failed_checkpoints_in_window",
            "Rise of CloudWatch numberOfFailedCheckpoints in restart_window.",
        ),
        Observable("last_checkpoint_duration_seconds", "CloudWatch lastCheckpointDuration."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._status: str | None = None
        self._status_since = 0.0
        self._saw_it_not_running = False  # then the RUNNING streak below bounds its run time
        self._idle_since: float | None = None
        self._idle_at_least = False  # _idle_since is where the looking began, not an input

    @within_aws_check_deadline
    async def probe(self) -> ProbeResult:
        p = self.params
        aws = plumbing_of(self.context).aws
        findings = Findings()
        name = p.application_name
        findings.details["application"] = name
        try:
            flink = await aws.client("kinesisanalyticsv2", p.aws)
            app = await describe_application(flink, name)
        except ProbeError as err:
            reason = describe_failure(err.kind, f"application {name}", action="describe")
            findings.add_error(err, reason=reason)
            return findings.result()
        now = time.time()
        status_age = self._track_status(app.status, now)
        kpus = self._kpus(app)
        findings.observe("application_running", 1.0 if app.status == "RUNNING" else 0.0)
        findings.observe("status_age_seconds", status_age)
        findings.observe("kpus", float(kpus))
        if app.current_parallelism is not None:
            findings.observe("parallelism", float(app.current_parallelism))
        findings.details.update(
            status=app.status,
            runtime=app.runtime,
            parallelism=app.current_parallelism,
            parallelism_per_kpu=app.parallelism_per_kpu,
            autoscaling=app.autoscaling,
            kpus=kpus,
            source_stream=p.source_stream,
        )
        if app.status != "RUNNING":
            self._judge_status(app, status_age, findings)
            findings.details["findings"] = findings.as_json()
            return findings.result(
                f"application {name} is {app.status}, as expected"
                " (not running: not billing for KPUs)"
            )
        try:
            cloudwatch = await aws.client("cloudwatch", p.aws)
            series = await self._read(cloudwatch, now)
        except ProbeError as err:
            findings.add_error(
                err,
                _METRICS_ARE_THE_PROBERS_VIEW,
                reason=f"reading CloudWatch metrics of application {name}: {err.operation}",
            )
            return findings.result()
        uptime_ms = _latest(series.get("uptime_ms", []))
        uptime = uptime_ms / 1000.0 if uptime_ms is not None else None
        if uptime is not None:
            findings.observe("uptime_seconds", uptime)
        idle = self._judge_input(series.get("input"), app, kpus, uptime, now, findings)
        self._judge_job(series, app, now, findings)
        findings.details["findings"] = findings.as_json()
        return findings.result(self._all_well(app, kpus, idle))

    # --- the application's status ---

    def _track_status(self, status: str, now: float) -> float:
        if status != self._status:
            if self._status is not None and self._status != "RUNNING":
                self._saw_it_not_running = True
            self._status, self._status_since = status, now
        return now - self._status_since

    def _judge_status(self, app: FlinkApplication, age: float, findings: Findings) -> None:
        p = self.params
        name = app.name
        if app.status in TRANSITIONS:
            if age >= p.stuck_after:
                findings.add(
                    Status.DOWN,
                    f"application {name} stuck {app.status} for "
                    f"{_span(age)} (limit {_span(p.stuck_after)})",
                )
            else:
                findings.add(
                    Status.DEGRADED, f"application {name} is {app.status} (for {_span(age)} so far)"
                )
        elif app.status == "ROLLED_BACK":
            findings.add(
                Status.DEGRADED,
                f"application {name} is ROLLED_BACK: its last update failed and was rolled back",
            )
        elif p.expect_running:
            what = {"READY": "READY (stopped)"}.get(app.status, app.status)
            findings.add(
                Status.DOWN, f"application {name} is {what}, expected RUNNING: it processes nothing"
            )

    def _kpus(self, app: FlinkApplication) -> int:
        # A description without parallelism still occupies the minimum of one KPU.
        return (app.job_kpus or 1) + self.params.orchestration_kpus

    # --- CloudWatch ---

    async def _read(self, cloudwatch: Any, now: float) -> dict[str, list[Point]]:
        p = self.params
        period = standard_period(p.metric_period)
        span = max(p.restart_window + period, p.idle_lookback if self._input() else 0.0)
        # current: the period in progress too (a restart loop shows before the period ends)
        window = aligned_window(period, int(span) // period + 1, now, current=True)
        job = {"Application": p.application_name}
        queries = [
            MetricQuery("restarts", FLINK_NAMESPACE, "fullRestarts", job),
            MetricQuery("failed_checkpoints", FLINK_NAMESPACE, "numberOfFailedCheckpoints", job),
            MetricQuery("checkpoint_ms", FLINK_NAMESPACE, "lastCheckpointDuration", job),
            MetricQuery("uptime_ms", FLINK_NAMESPACE, "uptime", job),
        ]
        source = self._input()
        if source is not None:
            queries.append(source)
        return await read_metrics(cloudwatch, queries, window.start, window.end, period)

    def _input(self) -> MetricQuery | None:
        p = self.params
        if p.source_stream is not None:
            return MetricQuery(
                "input", "AWS/Kinesis", "IncomingRecords", {"StreamName": p.source_stream}, "Sum"
            )
        if p.input_metric is not None:
            m = p.input_metric
            return MetricQuery("input", m.namespace, m.metric_name, m.dimensions, m.stat)
        return None

    # --- the input: idle KPU-hours ---

    def _judge_input(
        self,
        points: list[Point] | None,
        app: FlinkApplication,
        kpus: int,
        uptime: float | None,
        now: float,
        findings: Findings,
    ) -> _Idle | None:
        p = self.params
        if points is None:
            findings.details["input"] = "not watched: set source_stream or input_metric"
            return None
        period = standard_period(p.metric_period)
        fed = [ts for ts, value in points if value > 0]
        if fed:
            self._idle_since, self._idle_at_least = max(fed) + period, False
        elif self._idle_since is None:
            self._idle_since, self._idle_at_least = now - p.idle_lookback, True
        idle = _Idle(
            seconds=max(0.0, now - self._idle_since),
            since_at_least=self._idle_at_least,
            no_datapoints=not points,
            records=sum(v for ts, v in points if ts + period > now - p.idle_after),
        )
        billed = self._billed_idle_seconds(idle.seconds, uptime, now)
        kpu_hours = kpus * billed / 3600.0
        cost = kpu_hours * p.kpu_hour_price
        findings.observe("input_records", idle.records)
        findings.observe("idle_seconds", idle.seconds)
        findings.observe("idle_kpu_seconds", kpus * billed)  # base unit, as Prometheus wants
        findings.observe("idle_cost", cost)
        findings.details["idle"] = {
            "seconds": round(idle.seconds),
            "kpu_hours": kpu_hours,
            "cost": round(cost, 4),
            "kpu_hour_price": p.kpu_hour_price,
            "currency": p.currency,
        }
        if idle.seconds >= p.idle_after:
            source = self._input_name()
            silent = (
                f"no input from {source} for at least {_span(idle.seconds)}"
                if idle.since_at_least
                else f"no input from {source} for {_span(idle.seconds)}"
            )
            hint = (
                " (not even zero datapoints: no input, or the series is misnamed)"
                if idle.no_datapoints
                else ""
            )
            findings.add(
                Status.DEGRADED,
                (
                    f"application {app.name} RUNNING while idle: {silent}{hint}; {kpus} KPUs "
                    f"billed idle: {kpu_hours:.2f} KPU-hours, {cost:.2f} {p.currency} at "
                    f"{p.kpu_hour_price:g} {p.currency}/KPU-hour (stop it to stop billing)"
                ),
            )
        return idle

    def _billed_idle_seconds(self, idle: float, uptime: float | None, now: float) -> float:
        """Idle time the application was running for: no more than it is known to have run
        (its uptime, or the prober having seen it start); all of it when neither is known."""
        known: list[float] = []
        if uptime is not None:
            known.append(uptime)
        if self._saw_it_not_running:
            known.append(now - self._status_since)
        return min(idle, max(known)) if known else idle

    def _input_name(self) -> str:
        p = self.params
        if p.source_stream is not None:
            return f"stream {p.source_stream} (IncomingRecords)"
        assert p.input_metric is not None
        return f"{p.input_metric.namespace} {p.input_metric.metric_name}"

    # --- the job: restarts and checkpoints ---

    def _judge_job(
        self, series: dict[str, list[Point]], app: FlinkApplication, now: float, findings: Findings
    ) -> None:
        p = self.params
        since = now - p.restart_window
        window = _span(p.restart_window)
        restarts = _rise(series.get("restarts", []), since)
        if restarts is not None:
            findings.observe("restarts_in_window", restarts)
            if restarts >= p.max_restarts:
                findings.add(
                    Status.DOWN,
                    f"application {app.name} in a restart loop: "
                    f"fullRestarts rose by {restarts:.0f} in {window} "
                    f"(limit {p.max_restarts})",
                )
            elif restarts > 0:
                findings.add(
                    Status.DEGRADED,
                    f"application {app.name} restarted {restarts:.0f} time(s) in {window}",
                )
        failed = _rise(series.get("failed_checkpoints", []), since)
        if failed is not None:
            findings.observe("failed_checkpoints_in_window", failed)
            if failed >= p.max_failed_checkpoints:
                findings.add(
                    Status.DOWN,
                    f"application {app.name}: {failed:.0f} checkpoints "
                    f"failed in {window} (limit "
                    f"{p.max_failed_checkpoints}): state is not saved",
                )
            elif failed > 0:
                findings.add(
                    Status.DEGRADED,
                    f"application {app.name}: {failed:.0f} checkpoint(s) failed in {window}",
                )
        checkpoint = _latest(series.get("checkpoint_ms", []))
        if checkpoint is not None:
            seconds = checkpoint / 1000.0
            findings.observe("last_checkpoint_duration_seconds", seconds)
            limit = p.slow_checkpoint_above or app.checkpoint_interval_seconds
            if limit is not None and seconds > limit:
                findings.add(
                    Status.DEGRADED,
                    f"application {app.name}: last checkpoint took "
                    f"{_span(seconds)} (over {_span(limit)})",
                )

    def _all_well(self, app: FlinkApplication, kpus: int, idle: _Idle | None) -> str:
        parts = [f"application {app.name} RUNNING on {kpus} KPUs"]
        if app.current_parallelism is not None:
            per_kpu = app.parallelism_per_kpu or 1
            parts[0] += (
                f" (parallelism {app.current_parallelism}, {per_kpu} per KPU"
                f"{', autoscaling' if app.autoscaling else ''})"
            )
        if idle is not None:
            parts.append(
                f"{idle.records:g} in from {self._input_name()} in the last "
                f"{_span(self.params.idle_after)}"
            )
        return ", ".join(parts)


def _rise(points: list[Point], since: float) -> float | None:
    """How much a counter rose from the last point before ``since`` (or the first after it)
    to now, counting only increases (a counter restarts at 0 when the job is resubmitted).
    None when no point falls after ``since``."""
    before = [v for ts, v in points if ts < since]
    inside = [v for ts, v in points if ts >= since]
    if not inside:
        return None
    values = ([before[-1]] if before else []) + inside
    return sum(max(0.0, b - a) for a, b in pairwise(values))


def _latest(points: list[Point]) -> float | None:
    return points[-1][1] if points else None


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
