"""Shared test fixtures: a tiny Qwen3 model and a random-tree builder."""

from __future__ import annotations

import random
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from clawrl.rl_core import TokenSequence
from transformers import Qwen3Config, Qwen3ForCausalLM

torch.set_num_threads(1)

VOCAB = 24


def make_tiny_qwen3(
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    vocab: int = VOCAB,
    attn: str = "sdpa",
    hidden: int = 32,
    layers: int = 2,
) -> Qwen3ForCausalLM:
    cfg = Qwen3Config(
        vocab_size=vocab,
        head_dim=hidden // 4,
        tie_word_embeddings=False,
        attn_implementation=attn,
        **tiny_sizes(hidden, layers),
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg).to(dtype)
    if dtype == torch.float64:
        f64_rmsnorms(model)
    perturb_weights(model)
    return model


def tiny_sizes(hidden: int = 32, layers: int = 2) -> dict[str, int]:
    """Config sizes of the tiny test models (4 attention heads, 2 KV heads, MLP 2·hidden)."""
    return dict(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )


def f64_rmsnorms(model: Any) -> None:
    """transformers' RMSNorm computes in float32 (hidden.to(float32)); keep float64 so the
    tree-vs-path comparison is not limited by float32 rounding of kernel-order noise."""
    for mod in model.modules():
        if type(mod).__name__.endswith("RMSNorm"):
            mod.forward = types.MethodType(_rmsnorm_f64, mod)


def perturb_weights(model: Any) -> None:
    """Larger random weights than the default init, so logits are far from uniform (global
    torch RNG)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)


def random_sequences(
    rng: random.Random,
    n_seq: int,
    vocab: int = VOCAB,
    max_new: int = 6,
    n_rollouts: int = 3,
    n_groups: int = 2,
    side_prob: float = 0.0,
    roots: int = 1,
) -> list[TokenSequence]:
    """Random token sequences that share prefixes: each new sequence is a random-length
    prefix of an earlier one plus fresh tokens (so the packed tree branches)."""
    seqs: list[list[int]] = []
    train: list[list[bool]] = []
    out: list[TokenSequence] = []
    root_tokens = [rng.randrange(vocab) for _ in range(roots)]
    for k in range(n_seq):
        if seqs and rng.random() < 0.8:
            base = rng.randrange(len(seqs))
            cut = rng.randint(1, len(seqs[base]))
            toks = seqs[base][:cut]
            tr = train[base][:cut]
        else:
            toks = [rng.choice(root_tokens)]
            tr = [False]
        extra = rng.randint(1, max_new)
        toks = toks + [rng.randrange(vocab) for _ in range(extra)]
        tr = tr + [rng.random() < 0.7 for _ in range(extra)]
        seqs.append(toks)
        train.append(tr)
        rollout = k % n_rollouts
        out.append(
            TokenSequence(
                token_ids=toks,
                trainable=tr,
                logprobs=[-rng.uniform(0.1, 4.0) for _ in toks],
                policy_versions=[rng.randrange(3) for _ in toks],
                rollout_id=f"r{rollout}",
                call_id=f"c{k}",
                side_path=rng.random() < side_prob,
                metadata={"group_id": f"g{rollout % n_groups}"},
            )
        )
    return out


def _rmsnorm_f64(self: Any, hidden: torch.Tensor) -> torch.Tensor:
    var = hidden.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden * torch.rsqrt(var + self.variance_epsilon))


@pytest.fixture(scope="session")
def tiny_model_factory() -> Callable[..., Qwen3ForCausalLM]:
    return make_tiny_qwen3


@pytest.fixture(scope="session")
def seq_factory() -> Callable[..., list[TokenSequence]]:
    return random_sequences


def per_path_logprobs(model: Any, ids: np.ndarray, temperature: float = 1.0) -> torch.Tensor:
    """Oracle: plain causal forward of one path; logprob of token k from logits at k-1
    (entry 0 is NaN)."""
    x = torch.as_tensor(ids, dtype=torch.int64)[None]
    logits = model(input_ids=x).logits[0] / temperature
    lp = torch.log_softmax(logits, dim=-1)
    got = lp[:-1].gather(-1, x[0, 1:, None]).squeeze(-1)
    return torch.cat([got.new_full((1,), float("nan")), got])


def flat_loss_oracle(
    model: Any, batch: Any, prepared: Any, old: Any, mode: str, cfg: Any, ppo: Any, head: Any
) -> torch.Tensor:
    """Oracle: every trajectory forwarded alone (plain causal attention, full softmax), the
    per-(token, trajectory) loss written directly, summed."""
    total = torch.zeros((), dtype=torch.float64)
    for k in range(batch.num_trajectories):
        path = batch.path(k)
        x = torch.as_tensor(batch.input_ids[path])[None]
        hidden = model.model(input_ids=x).last_hidden_state[0]
        logits = model(input_ids=x).logits[0]  # bf16 under autocast: log-softmax in fp32
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / cfg.temperature
        lp_all = torch.log_softmax(logits, -1)
        pos_of = {int(t): p for p, t in enumerate(path)}
        for m in np.nonzero(batch.mem_traj == k)[0]:
            t = int(batch.mem_token[m])
            p = pos_of[t]
            lp = lp_all[p - 1, int(batch.input_ids[t])]
            w = float(prepared.weight[m])
            if mode == "sft":
                total = total - w * lp
                continue
            a = float(prepared.advantage[m])
            r = torch.exp(lp - float(old.logprobs[t]))
            clipped = torch.clamp(r, 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high)
            total = total - w * torch.minimum(r * a, clipped * a)
            if mode == "ppo" and head is not None:
                with torch.autocast(x.device.type, enabled=False):  # the head stays fp32
                    v = head(hidden[p - 1].to(head.linear.weight.dtype))
                v_old = float(prepared.old_values[m])
                g = float(prepared.returns[m])
                assert ppo.value_clip is not None
                v_c = v_old + torch.clamp(v - v_old, -ppo.value_clip, ppo.value_clip)
                err = torch.maximum((v - g) ** 2, (v_c - g) ** 2)
                total = total + ppo.value_coef * 0.5 * float(prepared.value_weight[m]) * err
    return total


@pytest.fixture(scope="session")
def flat_loss() -> Callable[..., torch.Tensor]:
    return flat_loss_oracle


def _take_grads(params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    out = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    for p in params:
        p.grad = None
    return out


def check_tree_loss_equals_flat(
    model: Any,
    batch: Any,
    pieces: list[Any],
    seqs: list[TokenSequence],
    rng: random.Random,
    *,
    mode: str,
    seed: int,
    cfg: Any,
    corr: Any,
    head: Any = None,
    ref_model: Any = None,
    value_noise: bool = False,
    flat_extra: Callable[[Any], torch.Tensor] | None = None,
    loss_rel: float = 1e-6,
    loss_abs: float = 1e-12,
    grad_rtol: float = 1e-6,
    grad_atol: float = 1e-9,
) -> tuple[Any, torch.Tensor | None]:
    """The tree loss and gradients (:func:`loss_backward`) equal the flat oracle's.

    The old pass (with ``ref_model`` for the KL term) is perturbed per token so ratios leave
    the clip range in both directions (``value_noise``: the old values too); rewards are drawn
    from ``rng``; ``mode`` "sft" prepares SFT weights, otherwise ``prepare_rl`` with ``corr``.
    ``flat_extra(prepared)`` adds terms to the flat side (KL, entropy). Returns (prepared,
    the extra term or None). Tolerances: the loss to ``loss_rel`` (relative) or ``loss_abs``, each gradient
    to ``grad_rtol`` plus ``grad_atol`` times the largest flat gradient entry."""
    from clawrl.rl_core import OldPass, PPOConfig, loss_backward, old_pass, prepare_rl, prepare_sft

    ppo = PPOConfig(gamma=0.9, lam=0.8, value_coef=0.7, value_clip=0.05)
    old = old_pass(model, batch, pieces, value_head=head, ref_model=ref_model)
    if ref_model is not None:
        assert old.ref_logprobs is not None
    noise = np.random.default_rng(seed).normal(0, 0.3, batch.num_tokens)
    values = old.values
    if value_noise and values is not None:
        values = values + np.random.default_rng(seed + 1).normal(0, 0.1, batch.num_tokens)
    old = OldPass(logprobs=old.logprobs + noise, values=values, ref_logprobs=old.ref_logprobs)
    rewards = {s.rollout_id: rng.random() for s in seqs}
    if mode == "sft":
        prepared = prepare_sft(batch, cfg)
    else:
        prepared = prepare_rl(
            batch, old, rewards, algorithm=mode, loss_cfg=cfg, ppo_cfg=ppo, corr_cfg=corr
        )
    params = list(model.parameters()) + (list(head.parameters()) if head else [])
    for p in params:
        p.grad = None
    stats = loss_backward(
        model,
        batch,
        pieces,
        prepared,
        None if mode == "sft" else old,
        loss_cfg=cfg,
        ppo_cfg=ppo,
        value_head=head,
        chunk_size=4,
    )
    g_tree = _take_grads(params)
    flat = flat_loss_oracle(model, batch, prepared, old, mode, cfg, ppo, head)
    extra = None if flat_extra is None else flat_extra(prepared)
    if extra is not None:
        flat = flat + extra
    flat.backward()
    g_flat = _take_grads(params)
    assert stats["loss"] == pytest.approx(float(flat.detach()), rel=loss_rel, abs=loss_abs)
    scale = max(float(g.abs().max()) for g in g_flat) or 1.0
    for gt, gf in zip(g_tree, g_flat, strict=True):
        torch.testing.assert_close(gt, gf, rtol=grad_rtol, atol=grad_atol * scale)
    return prepared, extra


@pytest.fixture(scope="session")
def tree_vs_flat() -> Callable[..., tuple[Any, torch.Tensor | None]]:
    """:func:`check_tree_loss_equals_flat`: tree loss and gradients == the flat oracle's."""
    return check_tree_loss_equals_flat


@pytest.fixture(scope="session")
def path_logprobs() -> Callable[..., torch.Tensor]:
    return per_path_logprobs


# ---------------------------------------------------------------- a tiny verifiable task
TOY_VOCAB = 16
TOY_TARGET = frozenset({4, 5, 6})
TOY_ENV_TOKEN = 15


def toy_rollouts(
    model: Any, n_tasks: int, group_size: int, step: int, tokens_per_turn: int = 3
) -> tuple[list[Any], dict[str, float]]:
    """Two-turn rollouts of a toy task; returns (one packed tree per task group, rewards).

    Prompt [0, task]; the policy answers ``tokens_per_turn`` tokens, an environment token is
    appended, it answers again. Reward = fraction of answer tokens in TOY_TARGET (a verifiable
    property; ≈ 0.25 for a random policy). Sampling uses the global torch RNG.
    """
    from clawrl.rl_core import TokenSequence, pack_token_sequences, sample_completions

    prompts = [[0, 1 + (k // group_size) % 4] for k in range(n_tasks * group_size)]
    c1 = sample_completions(model, prompts, tokens_per_turn)
    prompts2 = [
        list(p) + list(c.token_ids) + [TOY_ENV_TOKEN] for p, c in zip(prompts, c1, strict=True)
    ]
    c2 = sample_completions(model, prompts2, tokens_per_turn)
    trees, rewards = [], {}
    for g in range(n_tasks):
        seqs = []
        for k in range(g * group_size, (g + 1) * group_size):
            rid = f"s{step}-r{k}"
            gen = list(c1[k].token_ids) + list(c2[k].token_ids)
            rewards[rid] = sum(t in TOY_TARGET for t in gen) / len(gen)
            p = prompts[k]
            ids1 = p + list(c1[k].token_ids)
            seqs.append(
                TokenSequence(
                    token_ids=ids1,
                    trainable=[False] * len(p) + [True] * tokens_per_turn,
                    logprobs=[0.0] * len(p) + list(c1[k].logprobs),
                    rollout_id=rid,
                    call_id=f"{rid}-c1",
                    metadata={"group_id": f"s{step}-g{g}"},
                )
            )
            ids2 = prompts2[k] + list(c2[k].token_ids)
            seqs.append(
                TokenSequence(
                    token_ids=ids2,
                    trainable=[False] * len(p)
                    + [True] * tokens_per_turn
                    + [False]
                    + [True] * tokens_per_turn,
                    logprobs=[0.0] * len(p) + list(c1[k].logprobs) + [0.0] + list(c2[k].logprobs),
                    rollout_id=rid,
                    call_id=f"{rid}-c2",
                    metadata={"group_id": f"s{step}-g{g}"},
                )
            )
        trees.append(pack_token_sequences(seqs))
    return trees, rewards


@pytest.fixture(scope="session")
def toy_task() -> Callable[..., tuple[list[Any], dict[str, float]]]:
    return toy_rollouts


# ---------------------------------------------------------------- a tiny chat tokenizer
CHATML_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if tools -%}<|im_start|>system\n# Tools\n{%- for t in tools %}\n{{ t | tojson }}"
    "{%- endfor %}<|im_end|>\n{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' or m.role == 'user' -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- elif m.role == 'assistant' -%}<|im_start|>assistant\n"
    "{%- if m.reasoning_content and loop.index0 > ns.last_user -%}"
    "<think>\n{{ m.reasoning_content }}\n</think>\n\n{%- endif -%}"
    "{{ m.content or '' }}"
    "{%- for tc in (m.tool_calls or []) -%}\n<tool_call>\n{{ tc.function | tojson }}\n"
    "</tool_call>{%- endfor -%}<|im_end|>\n"
    "{%- elif m.role == 'tool' -%}"
    "<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)


def make_byte_chat_tokenizer() -> Any:
    """256 byte tokens + ChatML/think/tool special tokens, with a Qwen3-like chat template
    (drops reasoning of assistant turns before the last user message)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    b2c = bytes_to_unicode()
    backend = Tokenizer(models.BPE(vocab={b2c[b]: b for b in range(256)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t in (
                "<|endoftext|>",
                "<|im_start|>",
                "<|im_end|>",
                "<think>",
                "</think>",
                "<tool_call>",
                "</tool_call>",
                "<tool_response>",
                "</tool_response>",
            )
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


@pytest.fixture(scope="session")
def chat_tokenizer() -> Any:
    return make_byte_chat_tokenizer()
