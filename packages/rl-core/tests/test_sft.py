"""SFT on chat trajectories (docs/architecture.md): rendering, tree packing, loss equivalence, errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import torch
from clawrl.rl_core import (
    LossConfig,
    OptimConfig,
    SFTDataError,
    Trainer,
    TrainerConfig,
    TreeBatch,
    loss_backward,
    pack_sft_trajectories,
    prepare_sft,
    read_trajectories,
    render_sft_calls,
    split_by_token_budget,
)
from hypothesis import given, settings
from hypothesis import strategies as st

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _traj(i: int) -> dict[str, Any]:
    """Two user turns; the first with a tool loop and reasoning (dropped in turn two)."""
    return {
        "id": f"t{i}",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": f"make file {i}"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "use bash",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": f"touch f{i}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": f"done {i}", "reasoning_content": "it worked"},
            {"role": "user", "content": "thanks"},
            {"role": "assistant", "content": "bye"},
        ],
        "intent": {},
        "persona": {},
        "stats": {},
        "outcome": {"success": True},
    }


def test_assistant_tokens_only_and_branching(chat_tokenizer: Any) -> None:
    calls = render_sft_calls(_traj(0), chat_tokenizer, trajectory_id="t0")
    assert len(calls) == 3
    assert [c.call_id for c in calls] == ["t0#2", "t0#4", "t0#6"]
    texts = []
    for c in calls:
        # the trainable span is the call's completion: one contiguous suffix of its path
        texts.append(chat_tokenizer.decode(c.completion_ids.tolist()))
        assert c.session_id == "t0" and not c.completion_logprobs.any()
    assert texts[0].startswith("<think>\nuse bash\n</think>") and "touch f0" in texts[0]
    assert texts[1].startswith("<think>\nit worked") and texts[1].endswith("done 0<|im_end|>")
    assert texts[2] == "bye<|im_end|>"
    tree = pack_sft_trajectories([_traj(0)], chat_tokenizer)
    # turn 2 is an extension of turn 1 (same user turn), turn 3 drops the reasoning: 2 leaves
    assert len(tree.trajectories) == 2
    n_assist = sum(int(c.completion_ids.size) for c in calls)
    assert int(tree.trainable.sum()) == n_assist
    assert [t.metadata for t in tree.trajectories] == [{"group_id": "t0"}] * 2
    flat = sum(c.num_tokens for c in calls)
    assert len(tree.input_ids) < flat


def test_sft_tree_loss_and_grads_equal_flat(
    chat_tokenizer: Any, tiny_model_factory: Callable[..., Any]
) -> None:
    vocab = len(chat_tokenizer)
    model = tiny_model_factory(torch.float64, vocab=vocab)
    trajs = [_traj(0), _traj(1)]
    tree = pack_sft_trajectories(trajs, chat_tokenizer)
    batch = TreeBatch.from_trees([tree])
    cfg = LossConfig(aggregation="unique_token_mean")
    prepared = prepare_sft(batch, cfg)
    max_len = int(batch.position_ids.max()) + 1
    stats = loss_backward(
        model,
        batch,
        split_by_token_budget(batch, max_len + 5),
        prepared,
        None,
        loss_cfg=cfg,
        chunk_size=64,
    )
    g_tree = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    # flat oracle: every assistant turn rendered and forwarded alone, NLL of its tokens
    total, count = torch.zeros((), dtype=torch.float64), 0
    for i, tr in enumerate(trajs):
        for c in render_sft_calls(tr, chat_tokenizer, trajectory_id=str(i)):
            x = torch.tensor([c.token_ids.tolist()])
            lp = torch.log_softmax(model(input_ids=x).logits[0], -1)
            for k in range(c.prompt_ids.size, c.num_tokens):
                total = total - lp[k - 1, x[0, k]]
                count += 1
    flat = total / count
    flat.backward()
    assert stats["loss"] == pytest.approx(float(flat.detach()), rel=1e-6)
    for gt, p in zip(g_tree, model.parameters(), strict=True):
        assert p.grad is not None
        torch.testing.assert_close(gt, p.grad, rtol=1e-6, atol=1e-10)


def test_sft_training_reduces_loss(
    chat_tokenizer: Any, tiny_model_factory: Callable[..., Any]
) -> None:
    model = tiny_model_factory(torch.float32, vocab=len(chat_tokenizer))
    trainer = Trainer(
        model,
        TrainerConfig(
            optim=OptimConfig(lr=1e-2, total_steps=15),
            loss=LossConfig(aggregation="unique_token_mean"),
        ),
    )
    tree = pack_sft_trajectories([_traj(0), _traj(1)], chat_tokenizer)
    losses = [trainer.sft_step([tree])["loss"] for _ in range(15)]
    assert losses[-1] < 0.7 * losses[0]


def test_repeated_conversations_each_keep_their_trajectories(chat_tokenizer: Any) -> None:
    """Two trajectories with equal messages (or one a prefix of the other) are two rollouts:
    neither loses its trajectories or memberships to the other (dropped rollout)."""
    a, b = _traj(0), {**_traj(0), "id": "copy"}
    short = {**_traj(0), "id": "short", "messages": _traj(0)["messages"][:3]}
    one = pack_sft_trajectories([a], chat_tokenizer)
    tree = pack_sft_trajectories([a, b, short], chat_tokenizer)
    assert tree.num_tokens == one.num_tokens  # the same tokens, stored once
    per = {
        rid: [t for t in tree.trajectories if t.rollout_id == rid]
        for rid in ("t0", "copy", "short")
    }
    assert len(per["t0"]) == len(per["copy"]) == len(one.trajectories) == 2
    assert len(per["short"]) == 1 and per["short"][0].metadata == {"group_id": "short"}
    n_mem = np.bincount(tree.mem_traj, minlength=tree.num_trajectories)
    for rid in ("t0", "copy"):
        assert sorted(n_mem[t.index] for t in per[rid]) == sorted(
            t.n_trainable for t in one.trajectories
        )
    with pytest.raises(SFTDataError, match="already in the tree"):
        pack_sft_trajectories([a, {**_traj(1), "id": "t0"}], chat_tokenizer)


def test_sft_errors(tmp_path: Path, chat_tokenizer: Any) -> None:
    with pytest.raises(SFTDataError, match="no assistant"):
        render_sft_calls({"messages": [{"role": "user", "content": "hi"}]}, chat_tokenizer)
    with pytest.raises(SFTDataError, match="no role"):
        render_sft_calls({"messages": [{"content": "hi"}]}, chat_tokenizer)
    p = tmp_path / "t.jsonl"
    p.write_bytes(orjson.dumps(_traj(0)) + b"\n\n" + b"{not json\n")
    with pytest.raises(SFTDataError, match=":3: not valid JSON"):
        read_trajectories(p)
    p.write_bytes(orjson.dumps(_traj(0)) + b"\n")
    assert read_trajectories(p)[0]["id"] == "t0"
    with pytest.raises(SFTDataError, match="cannot read"):
        read_trajectories(tmp_path / "missing.jsonl")


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 40), batch_size=st.integers(1, 16), seed=st.integers(0, 99))
def test_epoch_batches_see_every_example_equally_often(n: int, batch_size: int, seed: int) -> None:
    import random
    from itertools import islice

    from clawrl.rl_core import epoch_batches

    epochs = 3
    n_batches = epochs * n // batch_size  # whole batches within 3 epochs
    seen = [
        i for b in islice(epoch_batches(n, batch_size, random.Random(seed)), n_batches) for i in b
    ]
    assert len(seen) == n_batches * batch_size
    counts = [seen.count(i) for i in range(n)]
    assert max(counts) - min(counts) <= 1  # at most one partial epoch among them
    again = list(islice(epoch_batches(n, batch_size, random.Random(seed)), n_batches))
    assert [i for b in again for i in b] == seen  # deterministic in the rng


def test_epoch_batches_bad_arguments() -> None:
    import random

    from clawrl.rl_core import epoch_batches

    with pytest.raises(ValueError, match="batch_size"):
        next(epoch_batches(0, 4, random.Random(0)))
