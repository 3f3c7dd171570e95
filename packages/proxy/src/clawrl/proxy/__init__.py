"""Serving proxy at the model boundary: OpenAI/Anthropic APIs, token-exact capture, inference backends."""

__version__ = "0.1.0"

__all__ = ["__version__"]
