"""SFT on DESIGN.md chat trajectories: rendering, tree packing, loss equivalence, errors."""

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
    render_sft_sequences,
    split_by_token_budget,
)

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _traj(i: int) -> dict[str, Any]:
    """Two user turns; the first with a tool loop and reasoning (dropped in turn two)."""
    return {
        "id": f"t{i}",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": f"make file {i}"},
            {"role": "assistant", "content": "", "reasoning_content": "use bash",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "bash", "arguments": f"touch f{i}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": f"done {i}", "reasoning_content": "it worked"},
            {"role": "user", "content": "thanks"},
            {"role": "assistant", "content": "bye"},
        ],
        "intent": {}, "persona": {}, "stats": {}, "outcome": {"success": True},
    }


def test_assistant_tokens_only_and_branching(chat_tokenizer: Any) -> None:
    seqs = render_sft_sequences(_traj(0), chat_tokenizer, trajectory_id="t0")
    assert len(seqs) == 3
    texts = []
    for s in seqs:
        ids = [t for t, m in zip(s.token_ids, s.trainable, strict=True) if m]
        texts.append(chat_tokenizer.decode(ids))
        # a trainable span is one contiguous suffix
        first = list(s.trainable).index(True)
        assert all(s.trainable[first:]) and not any(s.trainable[:first])
    assert texts[0].startswith("<think>\nuse bash\n</think>") and "touch f0" in texts[0]
    assert texts[1].startswith("<think>\nit worked") and texts[1].endswith("done 0<|im_end|>")
    assert texts[2] == "bye<|im_end|>"
    tree = pack_sft_trajectories([_traj(0)], chat_tokenizer)
    # turn 2 is an extension of turn 1 (same user turn), turn 3 drops the reasoning: 2 leaves
    assert len(tree.trajectories) == 2
    n_assist = sum(int(np.sum(s.trainable)) for s in seqs)
    assert int(tree.trainable.sum()) == n_assist
    flat = sum(len(s.token_ids) for s in seqs)
    assert len(tree.input_ids) < flat


def test_sft_tree_loss_and_grads_equal_flat(chat_tokenizer: Any,
                                            tiny_model_factory: Callable[..., Any]) -> None:
    vocab = len(chat_tokenizer)
    model = tiny_model_factory(torch.float64, vocab=vocab)
    trajs = [_traj(0), _traj(1)]
    tree = pack_sft_trajectories(trajs, chat_tokenizer)
    batch = TreeBatch.from_trees([tree])
    cfg = LossConfig(aggregation="unique_token_mean")
    prepared = prepare_sft(batch, cfg)
    max_len = int(batch.position_ids.max()) + 1
    stats = loss_backward(model, batch, split_by_token_budget(batch, max_len + 5), prepared,
                          None, loss_cfg=cfg, chunk_size=64)
    g_tree = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    # flat oracle: every assistant turn rendered and forwarded alone, NLL of its tokens
    total, count = torch.zeros((), dtype=torch.float64), 0
    for i, tr in enumerate(trajs):
        for s in render_sft_sequences(tr, chat_tokenizer, trajectory_id=str(i)):
            x = torch.tensor([list(s.token_ids)])
            lp = torch.log_softmax(model(input_ids=x).logits[0], -1)
            for k in np.nonzero(np.asarray(s.trainable))[0]:
                total = total - lp[k - 1, x[0, k]]
                count += 1
    flat = total / count
    flat.backward()
    assert stats["loss"] == pytest.approx(float(flat.detach()), rel=1e-6)
    for gt, p in zip(g_tree, model.parameters(), strict=True):
        assert p.grad is not None
        torch.testing.assert_close(gt, p.grad, rtol=1e-6, atol=1e-10)


def test_sft_training_reduces_loss(chat_tokenizer: Any,
                                   tiny_model_factory: Callable[..., Any]) -> None:
    model = tiny_model_factory(torch.float32, vocab=len(chat_tokenizer))
    trainer = Trainer(model, TrainerConfig(
        optim=OptimConfig(lr=1e-2, total_steps=15),
        loss=LossConfig(aggregation="unique_token_mean")))
    tree = pack_sft_trajectories([_traj(0), _traj(1)], chat_tokenizer)
    losses = [trainer.sft_step([tree])["loss"] for _ in range(15)]
    assert losses[-1] < 0.7 * losses[0]


def test_sft_errors(tmp_path: Path, chat_tokenizer: Any) -> None:
    with pytest.raises(SFTDataError, match="no assistant"):
        render_sft_sequences({"messages": [{"role": "user", "content": "hi"}]}, chat_tokenizer)
    with pytest.raises(SFTDataError, match="no role"):
        render_sft_sequences({"messages": [{"content": "hi"}]}, chat_tokenizer)
    p = tmp_path / "t.jsonl"
    p.write_bytes(orjson.dumps(_traj(0)) + b"\n\n" + b"{not json\n")
    with pytest.raises(SFTDataError, match=":3: invalid JSON"):
        read_trajectories(p)
    p.write_bytes(orjson.dumps(_traj(0)) + b"\n")
    assert read_trajectories(p)[0]["id"] == "t0"
    with pytest.raises(SFTDataError, match="cannot read"):
        read_trajectories(tmp_path / "missing.jsonl")
