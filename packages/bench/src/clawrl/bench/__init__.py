"""Tasks, verifiers, harness adapters, rollout runner and pass@k for agent harnesses.

Task side: load a task directory in any supported layout (:func:`load_task`), build its
workspace (:func:`prepare_workspace`), run its oracle (:func:`run_solution`) and score a
workspace tamper-proof (:func:`verify`) through an :class:`Executor`.

Rollout side: harness adapters behind one interface (:mod:`clawrl.bench.harness`:
:class:`HarnessAdapter`, :func:`get_harness`; reference, mini-swe-agent, the npm harnesses,
oracle, noop), the rollout runner (:func:`run_rollouts`, :class:`RolloutRunner`: one podman
sandbox and one proxy session per rollout), metrics (:func:`aggregate`, :func:`pass_at_k`)
and reports (``bench`` CLI).
"""

from clawrl.bench.errors import BenchError, ExecutorError, HostVerificationError, TaskLoadError
from clawrl.bench.executors import ExecResult, ExecSpec, Executor, LocalExecutor, Mount
from clawrl.bench.harness import (
    HARNESS_LOG_DIR,
    NODE_HARNESS_VERSIONS,
    ORACLE_COPY_DIR,
    ClaudeCodeHarness,
    CodexHarness,
    HarnessAdapter,
    HarnessContext,
    HarnessInstallError,
    HarnessLaunch,
    HarnessOutcome,
    MiniSweAgentHarness,
    NodeHarness,
    OpenClawHarness,
    OracleHarness,
    PiHarness,
    ReferenceHarness,
    get_harness,
    harness_cache_dir,
    harness_names,
    oracle_completions,
    oracle_shell_command,
    reference_agent_path,
    scripted_oracle,
)
from clawrl.bench.learnable import (
    LEARNABLE_WORDS,
    LearnableInstance,
    generate_learnable_tasks,
    learnable_instances,
)
from clawrl.bench.loaders import (
    builtin_suite_dir,
    detect_layout,
    load_builtin_suite,
    load_suite,
    load_task,
)
from clawrl.bench.metrics import AggregateReport, GroupStats, ScoredRollout, aggregate, pass_at_k
from clawrl.bench.rollout_types import DEFAULT_MAX_TURNS
from clawrl.bench.runner import (
    ModelEndpoint,
    RolloutEvent,
    RolloutOptions,
    RolloutResult,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    plan_rollouts,
    run_rollouts,
)
from clawrl.bench.sandbox_executor import SandboxExecutor
from clawrl.bench.task import (
    CATEGORIES,
    DIFFICULTIES,
    Layout,
    SolutionSpec,
    Task,
    TaskLimits,
    Timeouts,
    VerifierSpec,
    WorkspaceSource,
)
from clawrl.bench.verify import (
    VerifierResult,
    VerifierStatus,
    check_host_verification,
    prepare_workspace,
    run_solution,
    verify,
    verify_sandbox,
)
from clawrl.bench.workspace_diff import FileChange, workspace_diff

__version__ = "0.1.0"

__all__ = [
    "CATEGORIES",
    "DEFAULT_MAX_TURNS",
    "DIFFICULTIES",
    "HARNESS_LOG_DIR",
    "LEARNABLE_WORDS",
    "NODE_HARNESS_VERSIONS",
    "ORACLE_COPY_DIR",
    "AggregateReport",
    "BenchError",
    "ClaudeCodeHarness",
    "CodexHarness",
    "ExecResult",
    "ExecSpec",
    "Executor",
    "ExecutorError",
    "FileChange",
    "GroupStats",
    "HarnessAdapter",
    "HarnessContext",
    "HarnessInstallError",
    "HarnessLaunch",
    "HarnessOutcome",
    "HostVerificationError",
    "Layout",
    "LearnableInstance",
    "LocalExecutor",
    "MiniSweAgentHarness",
    "ModelEndpoint",
    "Mount",
    "NodeHarness",
    "OpenClawHarness",
    "OracleHarness",
    "PiHarness",
    "ReferenceHarness",
    "RolloutEvent",
    "RolloutOptions",
    "RolloutResult",
    "RolloutRunner",
    "RolloutSpec",
    "RolloutStatus",
    "SandboxExecutor",
    "ScoredRollout",
    "SolutionSpec",
    "Task",
    "TaskLimits",
    "TaskLoadError",
    "Timeouts",
    "VerifierResult",
    "VerifierSpec",
    "VerifierStatus",
    "WorkspaceSource",
    "__version__",
    "aggregate",
    "builtin_suite_dir",
    "check_host_verification",
    "detect_layout",
    "generate_learnable_tasks",
    "get_harness",
    "harness_cache_dir",
    "harness_names",
    "learnable_instances",
    "load_builtin_suite",
    "load_suite",
    "load_task",
    "oracle_completions",
    "oracle_shell_command",
    "pass_at_k",
    "plan_rollouts",
    "prepare_workspace",
    "reference_agent_path",
    "run_rollouts",
    "run_solution",
    "scripted_oracle",
    "verify",
    "verify_sandbox",
    "workspace_diff",
]
