"""Fixtures of the ``flink_application`` tests (moto itself comes from tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def aws_says_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing application is ``ResourceNotFoundException`` (HTTP 400), as AWS answers."""
    from moto.core.exceptions import JsonRESTError
    from moto.kinesisanalyticsv2.models import KinesisAnalyticsV2Backend

    original = KinesisAnalyticsV2Backend.describe_application

    def describe(self: Any, application_name: str) -> dict[str, Any]:
        if application_name not in self.applications:
            raise JsonRESTError(
                "ResourceNotFoundException", f"Application {application_name} does not exist"
            )
        return original(self, application_name)

    monkeypatch.setattr(KinesisAnalyticsV2Backend, "describe_application", describe)
