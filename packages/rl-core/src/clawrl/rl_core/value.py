"""Value functions for PPO: a value head on the policy, or a separate critic model."""

from __future__ import annotations

from clawrl.rl_core.forward import _attention_mask_for, _decoder, run_outside_autocast
from torch import Tensor, nn

__all__ = ["Critic", "ValueHead"]


class ValueHead(nn.Module):
    """V(s) = w·h + b on the last hidden state h [.., H] → [..]. Zero-initialised so that
    value warm-up starts from V ≡ 0."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.linear(hidden).squeeze(-1)


class Critic(nn.Module):
    """A separate critic: the decoder body of a HF causal LM (its vocabulary head unused) plus
    a :class:`ValueHead`, run over the same packed tree as the policy.

    ``forward(input_ids, position_ids, parent_index, subtree_end, targets)`` → values [T] of
    the states before each target token (hidden state at ``parent_index[target]``).
    """

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        hidden = int(getattr(backbone.config, "hidden_size"))  # noqa: B009
        self.head = ValueHead(hidden)

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        parent_index: Tensor,
        subtree_end: Tensor,
        targets: Tensor,
    ) -> Tensor:
        dec = _decoder(self.backbone)
        dtype = self.head.linear.weight.dtype
        mask = _attention_mask_for(self.backbone, subtree_end, dtype)
        out = dec(
            input_ids=input_ids[None],
            position_ids=position_ids[None],
            attention_mask=mask,
            use_cache=False,
        )
        h = out.last_hidden_state[0][parent_index[targets]]
        return run_outside_autocast(self.head, h.to(dtype))
