"""Stand-in backends for tests, demos and benchmarks (named as such, never a model).

- :class:`ScriptedBackend` replays queued completions (text or token ids) per session: the
  scripted test agent of bench's ``--model scripted``, ise-synth's scripted agent and the
  scripted-policy cold start; :class:`ScriptedCompletion` is one queued item.
- :class:`NullBackend` returns a fixed completion at once: the fixture of
  ``tools/perf/bench_proxy.py``, which measures what the proxy itself adds per call.

Build them through :func:`clawrl.proxy.make_backend` (``kind="scripted"`` / ``"null"``)
where a configuration picks the backend; import them from here to construct one directly
or to check ``isinstance``.
"""

from clawrl.proxy.backends.null import NullBackend
from clawrl.proxy.backends.scripted import ScriptedBackend, ScriptedCompletion

__all__ = ["NullBackend", "ScriptedBackend", "ScriptedCompletion"]
