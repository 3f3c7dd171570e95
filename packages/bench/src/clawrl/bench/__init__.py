"""Tasks, verifiers, harness adapters, rollout runner and pass@k for agent harnesses."""

__version__ = "0.1.0"

__all__ = ["__version__"]
