"""Intent -> Simulate -> Execute synthesis of execution-grounded multi-turn trajectories."""

__version__ = "0.1.0"

__all__ = ["__version__"]
