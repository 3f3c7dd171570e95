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

from clawrl.bench.harness.base import (
    HARNESS_LOG_DIR,
    HarnessAdapter,
    HarnessContext,
    HarnessInstallError,
    HarnessLaunch,
    HarnessOutcome,
    ProgressFn,
    WireAPI,
)
from clawrl.bench.harness.install import CachedHarness, harness_cache_dir, run_streamed
from clawrl.bench.harness.mini_swe_agent import MiniSweAgentHarness
from clawrl.bench.harness.node import (
    NODE_HARNESS_NAMES,
    NODE_HARNESS_VERSIONS,
    ClaudeCodeHarness,
    CodexHarness,
    NodeHarness,
    OpenClawHarness,
    PiHarness,
    scripted_oracle,
)
from clawrl.bench.harness.noop import NoopHarness
from clawrl.bench.harness.oracle import (
    ORACLE_COPY_DIR,
    OracleHarness,
    oracle_completions,
    oracle_shell_command,
)
from clawrl.bench.harness.reference import (
    REFERENCE_AGENT_MOUNT,
    ReferenceHarness,
    reference_agent_path,
)
from clawrl.bench.harness.registry import get_harness, harness_names

__all__ = [
    "HARNESS_LOG_DIR",
    "NODE_HARNESS_NAMES",
    "NODE_HARNESS_VERSIONS",
    "ORACLE_COPY_DIR",
    "REFERENCE_AGENT_MOUNT",
    "CachedHarness",
    "ClaudeCodeHarness",
    "CodexHarness",
    "HarnessAdapter",
    "HarnessContext",
    "HarnessInstallError",
    "HarnessLaunch",
    "HarnessOutcome",
    "MiniSweAgentHarness",
    "NodeHarness",
    "NoopHarness",
    "OpenClawHarness",
    "OracleHarness",
    "PiHarness",
    "ProgressFn",
    "ReferenceHarness",
    "WireAPI",
    "get_harness",
    "harness_cache_dir",
    "harness_names",
    "oracle_completions",
    "oracle_shell_command",
    "reference_agent_path",
    "run_streamed",
    "scripted_oracle",
]
