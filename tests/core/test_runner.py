"""A probe that hangs, raises or returns garbage is contained by the runner."""

from __future__ import annotations

from pathlib import Path

from alivemcp.engine.runner import abandoned_probes
from alivemcp.hygiene.redact import REDACTED, register_secret
from alivemcp.probe import Status
from tests.support import run_check, run_until


async def test_up_result_carries_observations_and_duration() -> None:
    result = await run_check("test_static", {"observations": {"lag_seconds": 1.5}, "delay": 0.05})
    assert result.status is Status.UP
    assert result.observations == {"lag_seconds": 1.5}
    assert result.duration_seconds >= 0.05
    assert result.as_json()["labeled_observations"][0]["labels"] == {"kind": "a"}


async def test_hang_is_cancelled_and_reported_down() -> None:
    result = await run_check("test_hang", {}, timeout=0.3)
    assert result.status is Status.DOWN
    assert result.reason == "timeout after 0.3s"


async def test_probe_ignoring_cancellation_does_not_hold_the_run() -> None:
    before = abandoned_probes()
    result = await run_check("test_hang", {"ignore_cancel": True}, timeout=0.2)
    assert result.status is Status.DOWN
    assert result.duration_seconds < 5  # the run returned before the bad probe finished
    assert abandoned_probes() == before + 1

    async def counted() -> int:
        return abandoned_probes()

    # Not counted any more once it ends by itself (it keeps running 5 s after the cancel).
    await run_until(
        counted,
        lambda n: n == before,
        "the abandoned probe to end and be uncounted",
        within=5 + 10,
        pause=0.1,
    )


async def test_exception_is_unknown_with_class_and_message() -> None:
    result = await run_check("test_raise", {"message": "kaput"})
    assert result.status is Status.UNKNOWN
    assert result.reason == "probe error: RuntimeError: kaput"


async def test_setup_failure_is_unknown_and_retried() -> None:
    results = await run_check("test_raise", {"in_setup": True}, runs=2)
    assert results.status is Status.UNKNOWN
    assert results.reason == "probe setup failed: ConnectionError: setup boom"


async def test_every_kind_of_garbage_is_unknown() -> None:
    expected = {
        "none": "NoneType instead of ProbeResult",
        "string": "str instead of ProbeResult",
        "bad_status": "status 'fine' is not one of",
        "nan": "observation x is NaN",
        "bad_name": "observation name 'Bad-Name'",
        "text_value": "observation x is str, not a number",
    }
    for kind, fragment in expected.items():
        result = await run_check("test_garbage", {"kind": kind})
        assert result.status is Status.UNKNOWN, kind
        assert result.reason.startswith("probe returned garbage: "), kind
        assert fragment in result.reason, (kind, result.reason)


async def test_registered_secrets_and_bearer_tokens_are_redacted_from_reasons() -> None:
    register_secret("s3cr3t-value-123")
    result = await run_check(
        "test_static",
        {"reason": "got Bearer abc.def.ghi from", "secret_in_reason": "s3cr3t-value-123"},
    )
    assert "s3cr3t" not in result.reason and "abc.def" not in result.reason
    assert result.reason == f"got Bearer {REDACTED} from {REDACTED}"


async def test_only_a_probe_with_a_teardown_of_its_own_needs_one_after_setup(
    tmp_path: Path,
) -> None:
    import yaml

    from alivemcp.config import load_config_text
    from alivemcp.engine.checks import build_handle
    from alivemcp.plumbing import Plumbing

    loaded = load_config_text(
        yaml.safe_dump(
            {
                "checks": [
                    {
                        "name": "noop",
                        "probe": "test_noop",
                    },  # the contract's teardown: nothing to do
                    {
                        "name": "sleepy",
                        "probe": "test_sleepy",  # a teardown of its own
                        "params": {"seconds": 0, "markers": str(tmp_path)},
                    },
                ]
            }
        ),
        env={},
    )
    plumbing = Plumbing()
    noop, sleepy = (build_handle(check, plumbing) for check in loaded.checks)
    assert not noop.needs_teardown and not sleepy.needs_teardown  # nothing set up yet
    for handle in (noop, sleepy):
        assert (await handle.run()).status is Status.UP
    assert not noop.needs_teardown
    assert sleepy.needs_teardown
    await sleepy.teardown()
    assert (tmp_path / "teardown").exists()
    assert not sleepy.needs_teardown
    await plumbing.aclose()
