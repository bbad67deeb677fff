"""Fixtures shared by the S3 tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.object_lambda import ObjectLambdaStandIn
from tests.support.s3_access_points import BACKING, s3


@pytest.fixture
def olap(moto: MotoServer) -> Iterator[ObjectLambdaStandIn]:
    """The Object Lambda stand-in in front of moto, with the backing bucket made."""
    s3(moto).create_bucket(Bucket=BACKING)
    stand_in = ObjectLambdaStandIn(moto).start()
    try:
        yield stand_in
    finally:
        stand_in.stop()
