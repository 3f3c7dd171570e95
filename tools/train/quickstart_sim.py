"""The RL quickstart without podman and the proxy: a fast way to tune its recipe.

Same model (clawrl-proxy's tiny byte/qwen3 model), same prompts (the reference harness's
system prompt and tools rendered by the model's chat template), same scripted-policy
targets, same tool execution (the reference harness's own ``run_tool``), same verifier
(bench's ``verify`` of the learnable task, run locally), same trainer (rl-core's tree-packed
SFT and GRPO / PPO); sampling is rl-core's plain-torch loop instead of the embedded backend
behind the proxy. A supervised cold start (optionally stopped at a held-out reward), then
RL; one JSON line per evaluation / RL step on stdout and in ``--out``.

    uv run python tools/train/quickstart_sim.py --sft-steps 150 --rl-steps 15 \\
        --temperature 1.0 --rl-lr 1e-4 --tasks-per-step 8 --samples 8 --out /tmp/sim.jsonl

Diagnostics: ``--show`` prints every 4th held-out completion on stderr, every eval row carries the
mean verifier sub-scores; ``--no-std`` (Dr. GRPO), ``--kl-coef``, ``--warmup``, ``--adam-eps``,
``--aggregation``, ``--value-lr`` / ``--value-coef`` (PPO) and ``--exact-reward`` (mean of
file_created and exact name / content matches) are the variants compared in
docs/results.md.

It is a developer tool (the simulator figures in docs/results.md came from it); the
quickstart itself is ``uv run train --config examples/quickstart.toml``.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import importlib.util
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from clawrl.bench import generate_learnable_tasks, prepare_workspace, verify
from clawrl.bench.harness import reference_agent_path
from clawrl.prefixtree import Call, PrefixTree, merge_trees
from clawrl.proxy import ChatRenderer, build_default_model, format_assistant_text, parse_completion
from clawrl.rl_core import (
    GRPOConfig,
    LossConfig,
    OptimConfig,
    PPOConfig,
    Trainer,
    TrainerConfig,
    epoch_batches,
)
from transformers import AutoModelForCausalLM


def _reference_harness() -> Any:
    spec = importlib.util.spec_from_file_location("reference_agent", reference_agent_path())
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", default="byte", choices=("byte", "qwen3"))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--names", type=int, default=8)
    p.add_argument("--words", type=int, default=12)
    p.add_argument("--train-n", type=int, default=64)
    p.add_argument("--heldout-n", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sft-steps", type=int, default=150)
    p.add_argument("--sft-batch", type=int, default=16)
    p.add_argument("--sft-lr", type=float, default=3e-3)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--stop-at-reward", type=float, default=2.0)
    p.add_argument("--eval-samples", type=int, default=2)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--algo", default="grpo", choices=("grpo", "ppo"))
    p.add_argument("--rl-steps", type=int, default=10)
    p.add_argument("--rl-lr", type=float, default=1e-4)
    p.add_argument("--updates-per-step", type=int, default=2)
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--rl-eval-every", type=int, default=5)
    p.add_argument("--kl-coef", type=float, default=0.0)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--warmup", type=int, default=0, help="RL optimiser warm-up steps")
    p.add_argument("--value-lr", type=float, default=None, help="PPO value head's lr")
    p.add_argument("--value-coef", type=float, default=0.5)
    p.add_argument("--whiten", action="store_true", help="PPO advantage whitening")
    p.add_argument("--aggregation", default="token_mean")
    p.add_argument(
        "--exact-reward",
        action="store_true",
        help="reward = mean(file_created, name exact, content exact)",
    )
    p.add_argument("--show", action="store_true", help="print every 4th eval completion on stderr")
    p.add_argument("--no-std", action="store_true", help="GRPO without the group-std scale")
    p.add_argument("--checkpoint", help="save the cold-start weights here, or load them")
    p.add_argument("--out", help="also append the JSON lines to this file")
    a = p.parse_args(argv)
    torch.set_num_threads(1)  # more threads decode slower on 2 shared cores
    torch.manual_seed(a.seed)
    ra = _reference_harness()
    md = build_default_model(
        a.tokenizer,
        seed=0,
        num_hidden_layers=a.layers,
        hidden_size=a.hidden,
        intermediate_size=3 * a.hidden,
    )
    renderer = ChatRenderer.from_model_dir(md)
    stop = renderer.stop_token_ids[0]
    tmp = Path(tempfile.mkdtemp(prefix="clawrl-sim-"))
    atexit.register(shutil.rmtree, tmp, True)
    vocab = {"n_names": a.names, "n_words": a.words}
    train = generate_learnable_tasks(tmp / "train", "train", a.train_n, a.seed, **vocab)
    held = generate_learnable_tasks(tmp / "heldout", "heldout", a.heldout_n, a.seed, **vocab)
    model = AutoModelForCausalLM.from_pretrained(
        md, attn_implementation="sdpa", dtype=torch.float32
    )
    out = open(a.out, "a") if a.out else None  # noqa: SIM115
    t0 = time.time()

    def emit(row: dict[str, Any]) -> None:
        row["t"] = round(time.time() - t0, 1)
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    def prompt(task: Any) -> list[int]:
        msgs = [
            {"role": "system", "content": ra.SYSTEM_PROMPT},
            {"role": "user", "content": task.instruction},
        ]
        return renderer.encode(renderer.render_text(msgs, ra.TOOLS, add_generation_prompt=True))

    def tree(rid: str, ids: list[int], completion: list[int], lps: list[float]) -> PrefixTree:
        call = Call(
            call_id=rid,
            session_id=rid,
            seq=0,
            prompt_ids=np.array(ids),
            completion_ids=np.array(completion),
            completion_logprobs=np.array(lps),
        )
        return PrefixTree.from_calls([call], rollout_id=rid)

    @torch.no_grad()
    def sample(ids: list[int], n: int) -> list[tuple[list[int], list[float]]]:
        """n completions (stopped at the turn end) with logprobs at the temperature."""
        model.eval()
        res: list[tuple[list[int], list[float]]] = [([], []) for _ in range(n)]
        done = [False] * n
        inp, past = torch.tensor([ids] * n), None
        for _ in range(a.max_tokens):
            o = model(input_ids=inp, use_cache=True, past_key_values=past)
            past = o.past_key_values
            logp = torch.log_softmax(o.logits[:, -1].double() / a.temperature, -1)
            tok = torch.multinomial(logp.exp(), 1)
            for k in range(n):
                if not done[k]:
                    res[k][0].append(int(tok[k]))
                    res[k][1].append(float(logp[k, tok[k]]))
                    done[k] = int(tok[k]) == stop
            if all(done):
                break
            inp = tok
        model.train()
        return res

    def reward(task: Any, completion: list[int]) -> tuple[float, dict[str, float]]:
        """Execute the completion's tool calls with the reference harness's own tools, then
        run the task's verifier (locally)."""
        text = renderer.decode(completion)
        parsed = parse_completion(
            text, finish_reason="stop" if completion[-1:] == [stop] else "length"
        )
        with tempfile.TemporaryDirectory() as d:
            ws = prepare_workspace(task, Path(d) / "ws")
            for tc in parsed.tool_calls:
                ra.run_tool(tc.name, json.dumps(tc.arguments), ws, 10.0)
            v = verify(task, ws)
            sub = dict(v.subscores)
            if a.exact_reward:
                sub["name_exact"] = float(sub.get("name_similarity", 0.0) >= 1.0)
                sub["content_exact"] = float(sub.get("content_similarity", 0.0) >= 1.0)
                return (
                    sub.get("file_created", 0.0) + sub["name_exact"] + sub["content_exact"]
                ) / 3, sub
            return float(v.reward), sub

    def evaluate(tag: str) -> float:
        comps = [(t, c) for t in held for c, _ in sample(prompt(t), a.eval_samples)]
        if a.show:
            for t, c in comps[::4]:
                print(
                    tag,
                    t.metadata["file"],
                    t.metadata["word"],
                    repr(renderer.decode(c)),
                    file=sys.stderr,
                )
        scored = [reward(t, c) for t, c in comps]
        rs = [r for r, _ in scored]
        value = sum(rs) / len(rs)
        subs = {
            k: round(sum(s.get(k, 0.0) for _, s in scored) / len(scored), 3) for k in scored[0][1]
        }
        emit(
            {
                "kind": "eval",
                "tag": tag,
                "eval_reward": value,
                "eval_pass_rate": sum(r >= 1.0 for r in rs) / len(rs),
                "subscores": subs,
            }
        )
        return value

    # ---- cold start: SFT on the scripted policy's write_file call
    ck = Path(a.checkpoint) if a.checkpoint else None
    if ck is not None and ck.exists():
        model.load_state_dict(torch.load(ck))
        emit({"kind": "loaded", "checkpoint": str(ck)})
    else:
        targets = [
            renderer.encode(
                format_assistant_text(
                    tool_calls=[
                        ("write_file", {"path": t.metadata["file"], "content": t.metadata["word"]})
                    ]
                )
                + renderer.turn_end_text
            )
            for t in train
        ]
        trees = [
            tree(f"c{i}", prompt(t), targets[i], [0.0] * len(targets[i]))
            for i, t in enumerate(train)
        ]
        sft = Trainer(
            model,
            TrainerConfig(
                loss=LossConfig(aggregation="token_mean"),
                optim=OptimConfig(lr=a.sft_lr, total_steps=max(1, a.sft_steps)),
                token_budget=16384,
                seed=a.seed,
            ),
        )
        batches = epoch_batches(len(trees), a.sft_batch, random.Random(a.seed))
        for step in range(1, a.sft_steps + 1):
            idx = next(batches)
            m = sft.sft_step([merge_trees(*[trees[i] for i in idx]).pack()])
            if step % a.eval_every == 0 or step == a.sft_steps:
                emit({"kind": "sft", "sft_step": step, "loss": m["loss"]})
                if evaluate(f"coldstart-{step}") >= a.stop_at_reward:
                    break
        if ck is not None:
            torch.save(model.state_dict(), ck)
    # ---- RL
    ref = copy.deepcopy(model).eval() if a.kl_coef > 0 else None
    rl = Trainer(
        model,
        TrainerConfig(
            algorithm=a.algo,
            loss=LossConfig(
                temperature=a.temperature, kl_coef=a.kl_coef, aggregation=a.aggregation
            ),
            grpo=GRPOConfig(scale_by_std=not a.no_std),
            ppo=PPOConfig(value_coef=a.value_coef, whiten_advantages=a.whiten),
            optim=OptimConfig(
                lr=a.rl_lr,
                eps=a.adam_eps,
                warmup_steps=a.warmup,
                value_lr=a.value_lr,
                schedule="constant_with_warmup" if a.warmup else "constant",
                total_steps=max(1, a.rl_steps * a.updates_per_step),
            ),
            token_budget=16384,
            seed=a.seed,
        ),
        ref_model=ref,
    )
    evaluate("step-0")
    rng = random.Random(f"rl:{a.seed}")
    for step in range(1, a.rl_steps + 1):
        trees_s, rewards, groups = [], {}, {}
        for ti, task in enumerate(rng.sample(train, a.tasks_per_step)):
            ids = prompt(task)
            for k, (completion, lps) in enumerate(sample(ids, a.samples)):
                rid = f"s{step}t{ti}k{k}"
                trees_s.append(tree(rid, ids, completion, lps))
                rewards[rid], groups[rid] = reward(task, completion)[0], f"g{ti}"
        packed = merge_trees(*trees_s).pack()
        ms = [rl.rl_step([packed], rewards, groups=groups) for _ in range(a.updates_per_step)]
        emit(
            {
                "kind": "train",
                "step": step,
                "reward_mean": sum(rewards.values()) / len(rewards),
                "mean_abs_logprob_diff": ms[0].get("mean_abs_logprob_diff"),
                "mean_abs_logprob_diff_last": ms[-1].get("mean_abs_logprob_diff"),
                "grad_norm": ms[0].get("grad_norm"),
                "advantage_mean": ms[0].get("advantage_mean"),
                "value_mean": ms[0].get("value_mean"),
            }
        )
        if step % a.rl_eval_every == 0 or step == a.rl_steps:
            evaluate(f"step-{step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
