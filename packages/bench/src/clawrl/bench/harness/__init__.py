"""Harness adapters: how a black-box agent harness is installed, launched and judged.

One interface, :class:`HarnessAdapter` (:mod:`~clawrl.bench.harness.base`, where the four
steps prepare / mounts / launch / outcome are described), for every harness the rollout
runner drives; :func:`get_harness` builds one by name (:func:`harness_names`). Built in:

- ``reference`` — :class:`ReferenceHarness`, our stdlib-only agent loop run by the sandbox's
  own ``/usr/bin/python3`` (:func:`reference_agent_path`; :meth:`ReferenceHarness.agent_argv`
  for callers that drive it themselves, like ise-synth);
- ``mini-swe-agent`` — :class:`MiniSweAgentHarness`, in tool-calling mode from a virtual
  environment built on ``/usr/bin/python3``;
- ``claude-code``, ``codex``, ``pi``, ``openclaw`` (and ``openclaw-anthropic-messages``,
  ``openclaw-openai-responses``) — the npm harnesses (:class:`NodeHarness` and subclasses);
- ``oracle`` — :class:`OracleHarness`, the task's solution; no model;
- ``noop`` — :class:`NoopHarness`, does nothing and exits 0: scores untouched workspaces.

Runtimes are installed once into :func:`harness_cache_dir` (shared with
``tools/harnesses/install.sh``). For the proxy's ScriptedBackend (a test backend),
:func:`oracle_completions` (reference harness) and :func:`scripted_oracle` (npm harnesses)
turn a task's oracle into model turns. Modules depend on one another in one direction only:
``base`` ← ``install`` ← ``reference`` / ``mini_swe_agent`` / ``oracle`` / ``noop`` ←
``node`` ← ``registry``.
"""

# Each module's whole public set (its ``__all__``) is public here: star-imported, and its
# ``__all__`` spliced into ours, so each name is listed once, where it is defined.
from clawrl.bench.harness import base as _base
from clawrl.bench.harness import install as _install
from clawrl.bench.harness import mini_swe_agent as _mini_swe_agent
from clawrl.bench.harness import node as _node
from clawrl.bench.harness import noop as _noop
from clawrl.bench.harness import oracle as _oracle
from clawrl.bench.harness import reference as _reference
from clawrl.bench.harness import registry as _registry
from clawrl.bench.harness.base import *  # noqa: F403
from clawrl.bench.harness.install import *  # noqa: F403
from clawrl.bench.harness.mini_swe_agent import *  # noqa: F403
from clawrl.bench.harness.node import *  # noqa: F403
from clawrl.bench.harness.noop import *  # noqa: F403
from clawrl.bench.harness.oracle import *  # noqa: F403
from clawrl.bench.harness.reference import *  # noqa: F403
from clawrl.bench.harness.registry import *  # noqa: F403

__all__ = [
    *_base.__all__,
    *_install.__all__,
    *_mini_swe_agent.__all__,
    *_node.__all__,
    *_noop.__all__,
    *_oracle.__all__,
    *_reference.__all__,
    *_registry.__all__,
]
