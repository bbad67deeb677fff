"""The shared CloudWatch reader (``alivemcp.plumbing.cloudwatch``) against moto over HTTP.

moto answers any number of ``MetricDataQueries`` in one page. What AWS does instead is done
here, on moto's own response handler in this process: more than 500 queries in a call is a
``ValidationError``, and a response holds at most a few datapoints, the rest behind a
``NextToken`` (AWS pages by datapoints, so one series may span pages).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from alivemcp.plumbing import Plumbing
from alivemcp.plumbing.aws import AwsSettings
from alivemcp.plumbing.cloudwatch import (
    MetricQuery,
    aligned_window,
    read_metrics,
    standard_period,
)
from alivemcp.testbed.moto import MotoServer

NAMESPACE = "Test/Reader"


@dataclass
class CloudWatchLimits:
    """What moto's GetMetricData was asked, with AWS's limits applied."""

    page_datapoints: int = 200
    calls: list[int] = field(default_factory=list)  # queries per call
    tokens_given: int = 0


@pytest.fixture
def aws_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudWatchLimits]:
    from moto.cloudwatch.exceptions import ValidationError
    from moto.cloudwatch.responses import CloudWatchResponse
    from moto.core.responses import ActionResult

    limits = CloudWatchLimits()
    original = CloudWatchResponse.get_metric_data

    def get_metric_data(self: Any) -> ActionResult:
        params = self._get_params()
        queries = params.get("MetricDataQueries", [])
        limits.calls.append(len(queries))
        if len(queries) > 500:
            raise ValidationError(
                "The collection MetricDataQueries must not have a size greater than 500."
            )
        rows: list[dict[str, Any]] = original(self).result["MetricDataResults"]  # type: ignore[index]
        points = [
            (row, ts, value)
            for row in rows
            for ts, value in zip(row["timestamps"], row["values"], strict=True)
        ]
        offset = int(params.get("NextToken") or 0)
        page = points[offset : offset + limits.page_datapoints]
        shown: dict[str, dict[str, Any]] = {}
        for row, ts, value in page:
            out = shown.setdefault(row["id"], {**row, "timestamps": [], "values": []})
            out["timestamps"].append(ts)
            out["values"].append(value)
        result: dict[str, Any] = {"MetricDataResults": list(shown.values())}
        if offset + limits.page_datapoints < len(points):
            result["NextToken"] = str(offset + limits.page_datapoints)
            limits.tokens_given += 1
        return ActionResult(result)

    monkeypatch.setattr(CloudWatchResponse, "get_metric_data", get_metric_data)
    yield limits


def put_series(moto: MotoServer, count: int, end: int, *, full: tuple[int, ...]) -> None:
    """``count`` series (metric ``m<i>``, dimension ``Series=<i>``) with a datapoint one minute
    before ``end``, and those in ``full`` two and three minutes before too; each valued
    ``i * 1000 + minutes``."""
    data = [
        {
            "MetricName": f"m{i}",
            "Dimensions": [{"Name": "Series", "Value": str(i)}],
            "Timestamp": datetime.fromtimestamp(end - ago * 60, UTC),
            "Value": i * 1000.0 + ago,
        }
        for i in range(count)
        for ago in ((1, 2, 3) if i in full else (1,))
    ]
    cloudwatch = boto3.client("cloudwatch", **moto.boto3_kwargs())
    for first in range(0, len(data), 1000):
        cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=data[first : first + 1000])


async def test_reads_501_series_in_two_calls_and_follows_every_page(
    moto: MotoServer, aws_limits: CloudWatchLimits
) -> None:
    window = aligned_window(60, 5)
    end = int(window.end.timestamp())
    full = (0, 250, 499, 500)
    put_series(moto, 501, end, full=full)
    queries = [
        MetricQuery(f"s{i}", NAMESPACE, f"m{i}", {"Series": str(i)}, "Sum") for i in range(501)
    ]
    queries.append(MetricQuery("silent", NAMESPACE, "m0", {"Series": "nobody"}, "Sum"))
    plumbing = Plumbing()
    try:
        client = await plumbing.aws.client(
            "cloudwatch", AwsSettings.model_validate(moto.aws_params(read_timeout=60))
        )
        found = await read_metrics(client, queries, window.start, window.end, window.period)
    finally:
        await plumbing.aclose()
    assert aws_limits.calls[0] == 500 and all(n <= 500 for n in aws_limits.calls)
    assert aws_limits.tokens_given >= 2  # the first call's datapoints came in three pages
    assert set(found) == {q.key for q in queries}
    assert found["silent"] == []
    for i in full:
        # oldest first, each minute's datapoint at its period's start
        assert found[f"s{i}"] == [(float(end - ago * 60), i * 1000.0 + ago) for ago in (3, 2, 1)]
    assert all(
        found[f"s{i}"] == [(float(end - 60), i * 1000.0 + 1)] for i in range(501) if i not in full
    )


async def test_a_key_used_twice_is_refused() -> None:
    twice = [MetricQuery("k", NAMESPACE, "a", {}), MetricQuery("k", NAMESPACE, "b", {})]
    with pytest.raises(ValueError, match="key"):
        await read_metrics(object(), twice, 0.0, 60.0, 60)


def test_aligned_window_ends_on_the_last_whole_standard_period() -> None:
    window = aligned_window(90, 5, now=1_000_030.5)  # 90 s is not standard: one minute
    assert window.period == 60
    assert window.end == datetime.fromtimestamp(1_000_020, UTC)
    assert window.start == datetime.fromtimestamp(1_000_020 - 300, UTC)
    assert window.as_json() == {
        "start": window.start.isoformat(),
        "end": window.end.isoformat(),
        "period_seconds": 60,
    }
    current = aligned_window(300, 2, now=1_000_030.5, current=True)
    assert current.end == datetime.fromtimestamp(1_000_200, UTC)  # the period in progress
    assert current.start == datetime.fromtimestamp(1_000_200 - 600, UTC)
    assert standard_period(10) == 60 and standard_period(179) == 120


def test_aligned_window_defaults_to_the_clock() -> None:
    before = time.time()
    window = aligned_window(60, 1)
    assert before - 120 < window.end.timestamp() <= time.time()
    assert window.end.timestamp() % 60 == 0
