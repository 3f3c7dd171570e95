"""Token prefix trees for agent rollouts: insert, merge, filter, pack for tree attention."""

__version__ = "0.1.0"

__all__ = ["__version__"]
