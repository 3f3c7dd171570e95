"""clawrl-rl-core alone: the README example (GRPO on a tiny random Qwen3, 3 steps)."""

import tempfile

import torch
from clawrl.rl_core import (
    OptimConfig,
    TokenSequence,
    Trainer,
    TrainerConfig,
    pack_token_sequences,
    sample_completions,
)
from transformers import Qwen3Config, Qwen3ForCausalLM

torch.set_num_threads(1)
torch.manual_seed(0)
cfg = Qwen3Config(
    vocab_size=16,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    attn_implementation="sdpa",
)  # sdpa + boolean tree mask on CPU
policy = Qwen3ForCausalLM(cfg)
trainer = Trainer(policy, TrainerConfig(algorithm="grpo", optim=OptimConfig(lr=3e-3)))

for step in range(3):
    # 4 tasks x 8 rollouts; reward = fraction of sampled tokens in {4, 5, 6}
    prompts = [[0, 1 + k // 8] for k in range(32)]
    done = sample_completions(policy, prompts, max_new_tokens=6)  # ids + rollout logprobs
    trees, rewards = [], {}
    for task in range(4):
        seqs = []
        for k in range(task * 8, task * 8 + 8):
            c = done[k]
            rewards[f"r{k}"] = sum(t in (4, 5, 6) for t in c.token_ids) / 6
            seqs.append(
                TokenSequence(
                    token_ids=list(c.prompt_ids) + list(c.token_ids),
                    trainable=[False, False] + [True] * 6,
                    logprobs=[0.0, 0.0, *list(c.logprobs)],
                    rollout_id=f"r{k}",
                    metadata={"group_id": f"task{task}"},
                )
            )
        trees.append(pack_token_sequences(seqs))  # one prefix tree per GRPO group
    metrics = trainer.rl_step(trees, rewards)
    if step % 10 == 0 or step == 2:
        print(step, round(metrics["reward_mean"], 3), round(metrics["max_abs_logprob_diff"], 6))
out = tempfile.mkdtemp(prefix="rl-core-alone-")
trainer.save_checkpoint(f"{out}/ckpt", data_position=3)
trainer.export_hf(f"{out}/hf")  # config.json + model.safetensors for the backend
print("rl-core ok")
