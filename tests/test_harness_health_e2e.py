"""Harness health is never a reward: real harness programs in real podman sandboxes through
the real proxy (ScriptedBackend: a test backend with a context window as small as a test
wants). A harness whose own prompt overflows the context ends ``context-overflow``, one that
exits before calling the model ends ``harness-error``: never ``ok`` with 0, and both are
left out of the scores (and, by :attr:`RolloutResult.counts`, of the GRPO groups)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
from clawrl.bench import (
    RolloutOptions,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    aggregate,
    load_builtin_suite,
)
from clawrl.bench.harness import (
    HarnessContext,
    HarnessLaunch,
    HarnessOutcome,
    ReferenceHarness,
)
from clawrl.proxy import build_default_model, serve
from clawrl.proxy.testing import ScriptedBackend, ScriptedCompletion

pytestmark = pytest.mark.podman


def _task():  # type: ignore[no-untyped-def]
    return next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")


class _ExitsAtOnce(ReferenceHarness):
    """A model harness that dies before its first model call (e.g. a runtime that fails at
    start) with exit status ``code``, and reports a clean end on exit 0 (as harnesses that
    go by their exit status alone do)."""

    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code
        self.name = f"exits-{code}"

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        argv = ("sh", "-c", f"echo 'cannot start' >&2; exit {self.code}")
        return HarnessLaunch(argv=argv, workdir=ctx.task.workspace_path)

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        if exit_code == 0:
            return HarnessOutcome(ok=True, end_reason="exit_0")
        return super().outcome(exit_code, logs, stdout)


async def test_overflow_and_early_exit_are_typed_and_excluded() -> None:
    """Revert tried: the classify_harness_health call in the runner — the overflow was a
    scored ``harness-error`` (the reference harness's exit 2) and the exit-0 harness
    ``ok`` with reward 0, both counted in pass@1."""
    model_dir = Path(build_default_model("byte"))
    # 512 byte tokens: the reference harness's system prompt and tools alone are longer
    backend = ScriptedBackend.from_model_dir(model_dir, max_context=512)
    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, concurrency=3)
        task = _task()
        specs = [
            RolloutSpec(task, ReferenceHarness(), group_id="g"),
            RolloutSpec(task, _ExitsAtOnce(1), group_id="g1"),
            RolloutSpec(task, _ExitsAtOnce(0), group_id="g0"),
        ]
        overflow, exit1, exit0 = await runner.run(specs)

    assert overflow.status is RolloutStatus.CONTEXT_OVERFLOW, (overflow.reason, overflow.stderr)
    assert overflow.excluded and not overflow.counts
    assert overflow.n_calls == 1
    rec = overflow.records[0]
    assert rec["error_code"] == "context_length_exceeded" and "no_model_turns" in rec["flags"]
    assert "does not fit the context window" in overflow.reason
    for r in (exit1, exit0):
        assert r.status is RolloutStatus.HARNESS_ERROR, (r.harness, r.status, r.reason)
        assert r.excluded and not r.counts and r.n_calls == 0
        assert "made no model call" in r.reason
    report = aggregate([r.scored() for r in (overflow, exit1, exit0)])
    ref = report.by_harness["reference"]
    assert ref.n_scored == 0 and ref.pass_at_k[1] is None and ref.n_excluded == 1
    assert ref.context_overflow_rate == 1.0
    assert report.by_harness["exits-0"].harness_error_rate == 1.0
    assert report.by_harness["exits-0"].status_counts == {"harness-error": 1}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm to install harnesses")
async def test_claude_code_whose_prompt_exceeds_the_window_is_a_context_overflow() -> None:
    """The case a new user met: Claude Code's own system prompt and tools are longer than
    the byte model's 40,960-token window. It gets the Anthropic-shaped 400, exits with an
    error; the rollout is ``context-overflow`` and excluded, never ``ok 0.00 (0 calls)``.
    Revert tried: the classify_harness_health call in the runner — ``ok`` with reward 0,
    scored."""
    from clawrl.bench.harness import get_harness

    model_dir = Path(build_default_model("byte"))
    backend = ScriptedBackend.from_model_dir(model_dir)
    options = RolloutOptions(max_turns=2, memory_mb=3072, agent_timeout_s=600)
    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, options, concurrency=1)
        (r,) = await runner.run([RolloutSpec(_task(), get_harness("claude-code"), group_id="g")])
    assert r.status is RolloutStatus.CONTEXT_OVERFLOW, (r.status, r.reason, r.stderr[-1000:])
    assert r.excluded and not r.counts
    last = r.records[-1]
    assert last["error_code"] == "context_length_exceeded" and "no_model_turns" in last["flags"]
    assert last["api"] == "anthropic.messages"


async def test_a_generation_that_outlasts_the_harness_timeout_is_scored() -> None:
    """The policy must not escape a zero by generating past the harness's HTTP timeout: the
    reference harness (1 s request timeout, its retries alike) leaves while the model is still
    generating; the aborted call holds the tokens generated so far, so the rollout is scored
    (reward 0), never excluded as a harness failure.
    Revert tried: ``is_answered`` without the ``client_left`` case — the rollout was an
    excluded ``harness-error`` and pass@1 had nothing to count."""
    model_dir = Path(build_default_model("byte"))
    backend = ScriptedBackend.from_model_dir(
        model_dir, token_delay_s=0.05, default=ScriptedCompletion(text="z" * 400)
    )
    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, concurrency=1)
        spec = RolloutSpec(_task(), ReferenceHarness(request_timeout_s=1.0), group_id="g")
        (r,) = await runner.run([spec])
    assert r.n_calls >= 1, (r.status, r.reason)
    rec = r.records[0]
    assert rec["finish_reason"] == "aborted" and "client_left" in rec["flags"]
    assert rec["completion_ids"]
    assert not r.excluded and r.counts, (r.status, r.reason)
    assert r.reward == 0.0
    report = aggregate([r.scored()])
    assert report.by_harness["reference"].n_scored == 1
    assert report.by_harness["reference"].pass_at_k[1] == 0.0
