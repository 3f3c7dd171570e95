"""Typed errors of clawrl-rl-core.

Every error this package raises on bad input derives from :class:`RLCoreError`, so callers
can catch the package's errors precisely.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigError",
    "MinibatchCapWarning",
    "MissingGroupError",
    "PackingError",
    "RLCoreError",
    "SFTDataError",
    "TokenBudgetError",
]


class RLCoreError(Exception):
    """Base class of every error raised by clawrl-rl-core."""


class ConfigError(RLCoreError, ValueError):
    """A hyperparameter is out of range or two settings contradict each other."""


class MinibatchCapWarning(RuntimeWarning):
    """A warning, not an error: an RL batch split into fewer token-budget pieces than
    ``TrainerConfig.num_minibatches``, so the step ran one minibatch per piece (fewer
    optimiser and LR-schedule steps than configured). The step's metrics say so too:
    ``num_minibatches`` (the count used) and ``minibatches_capped`` (1.0 when capped).
    Lower ``token_budget`` (or ``num_minibatches``) to avoid it."""


class MissingGroupError(ConfigError):
    """GRPO (or ``prompt_mean`` aggregation) needs a group per rollout, and a rollout has
    none: neither the ``groups`` argument nor its trajectories' metadata (key
    ``GRPOConfig.group_key``) names one. Without it the rollout would be a group of one,
    whose advantage is 0 — it would silently not be trained."""


class PackingError(RLCoreError, ValueError):
    """A packed tree (or a batch of them) violates the layout contract of
    ``clawrl.prefixtree.PackedTree`` (shapes, dtypes, DFS order, memberships)."""


class TokenBudgetError(PackingError):
    """A tree cannot be split to fit the token budget: one root-to-leaf path is longer than
    the budget (its last token needs every ancestor in the same forward pass)."""


class SFTDataError(RLCoreError, ValueError):
    """A chat trajectory cannot be rendered for SFT (bad messages, no chat template, a
    template whose rendering of an assistant turn is not an extension of its prompt)."""


class CheckpointError(RLCoreError):
    """A checkpoint directory is missing, incomplete or does not match the model/optimizer."""
