"""Temporary isolated podman workspaces for agent rollouts."""

__version__ = "0.1.0"

__all__ = ["__version__"]
