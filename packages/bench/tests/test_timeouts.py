"""Agent timeouts follow the backend's measured decode speed (clawrl.bench.timeouts): the
computation, and the measurement through a real proxy on a ScriptedBackend slowed to a
known speed (a test backend: it streams its tokens with a fixed delay)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench import RolloutOptions, RolloutRunner, load_builtin_suite
from clawrl.bench.timeouts import timeout_scale
from clawrl.proxy import build_default_model, decode_rate, serve
from clawrl.proxy.testing import ScriptedBackend


def test_timeout_scale() -> None:
    """Revert tried: none possible (new function)."""
    assert timeout_scale(5.0, 20.0, 10.0) == 4.0  # 4x slower than the reference
    assert timeout_scale(1.0, 20.0, 10.0) == 10.0  # capped
    assert timeout_scale(80.0, 20.0, 10.0) == 1.0  # a faster backend never shortens
    assert timeout_scale(None, 20.0, 10.0) == 1.0  # not measured
    assert timeout_scale(5.0, None, 10.0) == 1.0  # scaling off
    assert timeout_scale(0.0, 20.0, 10.0) == 1.0


def test_decode_rate_from_records() -> None:
    recs = [
        {"completion_ids": [1] * 11, "timing": {"first_token": 10.0, "finished": 12.0}},
        {"completion_ids": [1] * 6, "timing": {"first_token": 20.0, "finished": 21.0}},
        {"completion_ids": [1], "timing": {"first_token": 30.0, "finished": 30.0}},  # no span
        {"completion_ids": [], "timing": {"first_token": None, "finished": 31.0}},  # refused
    ]
    assert decode_rate(recs) == pytest.approx(15 / 3)
    assert decode_rate([]) is None


async def test_runner_measures_the_backend_and_scales_agent_timeouts() -> None:
    """A backend streaming a token every 0.1 s (about 10 tokens/s) against a reference of
    40 tokens/s: agent timeouts are about 4x the task's (the sandbox's wall clock too)."""
    model_dir = Path(build_default_model("byte"))
    backend = ScriptedBackend.from_model_dir(model_dir, token_delay_s=0.1)
    task = next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")
    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, RolloutOptions(timeout_reference_tps=40.0))
        assert runner.agent_timeout(task) == task.timeouts.agent_s
        scale = await runner.measure_speed()
        off = RolloutRunner(endpoint, RolloutOptions(timeout_reference_tps=None))
        assert await off.measure_speed() == 1.0
    assert 3.0 <= scale <= 4.2, scale
    assert runner.agent_timeout(task) == pytest.approx(task.timeouts.agent_s * scale)
