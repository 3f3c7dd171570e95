"""The supervised cold start before RL: scripted-policy trajectories captured through the
same harness path (the proxy's ScriptedBackend, a test backend, replays each task's solution
as the model's turns; bench's runner runs the harness in a sandbox and verifies), then SFT
on the solved ones, with held-out evaluations along the way (``[cold_start]``).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

from clawrl.bench import RolloutResult, RolloutSpec, Task, plan_rollouts
from clawrl.bench.harness import HarnessAdapter, demonstration_turns, oracle_completions
from clawrl.prefixtree import Call, PrefixTree
from clawrl.proxy import (
    BackendConfig,
    SessionInfo,
    format_assistant_text,
    make_backend,
    restyle_assistant_text,
)
from clawrl.rl_core.config import LossConfig, OptimConfig, TrainerConfig
from clawrl.rl_core.sft import epoch_batches
from clawrl.rl_core.train.errors import TrainError
from clawrl.rl_core.train.trees import merge_into
from clawrl.rl_core.trainer import Trainer

if TYPE_CHECKING:
    from clawrl.rl_core.train.context import RunContext
    from clawrl.rl_core.train.loop import TrainLoop

__all__ = ["run_cold_start", "scripted_turns"]


def scripted_turns(
    task: Task, harness: HarnessAdapter | None = None, call_style: str = "tags"
) -> list[str]:
    """The scripted policy's assistant turns for ``task`` through ``harness`` (cold-start
    data), tool calls written in ``call_style`` (``"tags"`` or ``"fenced"``, see
    :class:`~clawrl.rl_core.train.config.ColdStartConfig`).

    For a learnable-family task (``metadata`` has ``file`` and ``word``) through the reference
    harness (or no harness given): one ``write_file`` call creating the file — the skill the
    RL policy is trained on. Otherwise bench's
    :func:`~clawrl.bench.harness.demonstration_turns`: the task's worked solution step by
    step through the harness's own shell tool (the chores family), else its oracle as tool
    calls.
    """
    meta = task.metadata
    reference = harness is None or harness.name == "reference"
    if reference and isinstance(meta.get("file"), str) and isinstance(meta.get("word"), str):
        call = ("write_file", {"path": meta["file"], "content": meta["word"]})
        return [format_assistant_text(tool_calls=[call], call_style=call_style)]
    turns = oracle_completions(task) if harness is None else demonstration_turns(harness, task)
    if call_style == "tags":
        return turns
    return [restyle_assistant_text(t, call_style) for t in turns]


async def _capture(
    loop: TrainLoop, tasks: list[Task], harnesses: list[HarnessAdapter]
) -> list[RolloutResult]:
    """One scripted rollout per task and harness (the scripted backend's proxy)."""
    scripted = make_backend(BackendConfig(kind="scripted", model_dir=loop.model_dir))
    async with loop.serve_backend(scripted) as sep:
        style = loop.cfg.cold_start.call_style

        async def hook(session: SessionInfo, spec: RolloutSpec) -> None:
            turns = scripted_turns(spec.task, spec.harness, style)
            await sep.admin.script(session.session_id, turns)

        runner = loop.runner(
            sep,
            max_turns=max(len(scripted_turns(t, h, style)) for t in tasks for h in harnesses),
            session_hook=hook,
            run_id=f"{loop.run_id}-coldstart",
            scripted=True,
        )
        specs = plan_rollouts(
            tasks, list(harnesses), 1, group_prefix="coldstart/", seed=loop.cfg.run.seed
        )
        return await runner.run(specs)


def _solved(loop: TrainLoop, results: list[RolloutResult], t0: float) -> list[RolloutResult]:
    """The solved trajectories (reward 1 with records).

    Raises:
        TrainError: none solved its task (the first two failures are reported).
    """
    good = [x for x in results if x.reward >= 1.0 and x.records]
    if not good:
        for x in results[:2]:
            loop.say(
                f"cold start: {x.status.value} {x.reason} reward {x.reward} "
                f"stdout {x.stdout[-300:]!r} stderr {x.stderr[-300:]!r}"
            )
    loop.say(
        f"cold start: {len(good)}/{len(results)} scripted trajectories solved "
        f"their task ({time.time() - t0:.0f} s)"
    )
    if not good:
        raise TrainError(
            "cold start: no scripted trajectory solved its task "
            f"(statuses: {[x.status.value for x in results][:5]})"
        )
    return good


def _sft_trainer(loop: TrainLoop) -> Trainer:
    """SFT fits the model's own distribution (T = 1); rollouts then sample it at
    ``rollout.temperature``. The run's memory and precision settings apply to it as to the
    RL updates (``precision``, ``gradient_checkpointing``, ``freeze_embeddings``, ``token_budget``,
    ``chunk_size``; without checkpointing a real model's SFT step held ~23 GB and was killed
    for memory); the cold start trains every weight even when RL trains LoRA adapters, and
    is not sharded (the RL trainer shards the policy with ``fsdp``)."""
    cs, trainer = loop.cfg.cold_start, loop.cfg.algo.trainer
    return loop.new_trainer(
        TrainerConfig(
            loss=LossConfig(aggregation="token_mean"),
            optim=OptimConfig(lr=cs.lr, max_grad_norm=1.0, total_steps=max(1, cs.steps)),
            token_budget=trainer.token_budget,
            chunk_size=trainer.chunk_size,
            seed=loop.cfg.run.seed,
            precision=trainer.precision,
            gradient_checkpointing=trainer.gradient_checkpointing,
            freeze_embeddings=trainer.freeze_embeddings,
        ),
    )


async def _eval_after(loop: TrainLoop, ctx: RunContext, step: int) -> bool:
    """The held-out eval after SFT step ``step``; whether the cold start may stop."""
    cs = loop.cfg.cold_start
    row = await loop.record_eval(ctx, f"coldstart-{step}", step=0, sft_step=step)
    loop.say(f"cold start: held-out eval reward {row['eval_reward']:.3f} after {step} SFT steps")
    if row["eval_reward"] >= cs.stop_at_reward:
        loop.say(f"cold start: stopped (eval reward >= {cs.stop_at_reward})")
        return True
    return False


async def run_cold_start(loop: TrainLoop, ctx: RunContext) -> None:
    """Capture the scripted trajectories of ``cold_start.tasks`` tasks through every harness
    of the run (each harness's own tools and prompts: what the policy will see), then
    ``cold_start.steps`` SFT steps on the solved ones (batches of ``cold_start.batch_size``
    trees, merged and packed: into one tree per trainer rank); the weights are synced (policy version + 1) before each
    held-out eval the config asks for.

    Raises:
        TrainError: no scripted trajectory solved its task, or a weight sync failed.
    """
    cs = loop.cfg.cold_start
    tasks = list(ctx.train)[: cs.tasks]
    t0 = time.time()
    loop.say(
        f"cold start: capturing {len(tasks)} x {len(ctx.harnesses)} scripted-policy "
        "trajectories (ScriptedBackend, a test backend) through the harness path"
    )
    good = _solved(loop, await _capture(loop, tasks, list(ctx.harnesses)), t0)
    trees = [
        PrefixTree.from_calls(Call.from_records(x.records), rollout_id=x.rollout_id) for x in good
    ]
    sft = _sft_trainer(loop)
    batches = epoch_batches(
        len(trees), cs.batch_size, random.Random(f"coldstart:{loop.cfg.run.seed}")
    )
    version = loop.state.policy_version
    world = loop.ranks.world_size if loop.ranks is not None else 1
    assert loop.log is not None
    for step in range(1, cs.steps + 1):
        parts = merge_into([trees[i] for i in next(batches)], world)  # a tree per rank
        t1 = time.time()
        m = await asyncio.to_thread(sft.sft_step, [t.pack() for t in parts])
        loop.log.write(
            {
                "kind": "sft",
                "sft_step": step,
                "loss": m["loss"],
                "grad_norm": m["grad_norm"],
                "num_tokens": m["num_tokens"],
                "time/update": time.time() - t1,
            }
        )
        if step % 10 == 0 or step == cs.steps:
            loop.say(f"cold start: SFT step {step}/{cs.steps} loss {m['loss']:.3f}")
        if cs.evaluates_at(step):
            version += 1
            await loop.sync_weights(ctx, version)
            if loop.cfg.eval.enabled and await _eval_after(loop, ctx, step):
                break
    loop.state.cold_start_done = True
