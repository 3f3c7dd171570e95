"""Tasks, verifiers, harness adapters, rollout runner and pass@k for agent harnesses.

Task side (this module's first half): load a task directory in any supported layout
(:func:`load_task`), build its workspace (:func:`prepare_workspace`), run its oracle
(:func:`run_solution`) and score a workspace tamper-proof (:func:`verify`) through an
:class:`Executor`; aggregate scores with :func:`aggregate` / :func:`pass_at_k`.
"""

from clawrl.bench.errors import BenchError, ExecutorError, TaskLoadError
from clawrl.bench.executors import ExecResult, ExecSpec, Executor, LocalExecutor, Mount
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
from clawrl.bench.sandbox_executor import SandboxExecutor
from clawrl.bench.task import (
    CATEGORIES,
    DIFFICULTIES,
    Layout,
    Limits,
    SolutionSpec,
    Task,
    Timeouts,
    VerifierSpec,
    WorkspaceSource,
)
from clawrl.bench.verify import (
    VerifierResult,
    VerifierStatus,
    prepare_workspace,
    run_solution,
    verify,
    verify_sandbox,
)

__version__ = "0.1.0"

__all__ = [
    "CATEGORIES",
    "DIFFICULTIES",
    "LEARNABLE_WORDS",
    "AggregateReport",
    "BenchError",
    "ExecResult",
    "ExecSpec",
    "Executor",
    "ExecutorError",
    "GroupStats",
    "Layout",
    "LearnableInstance",
    "Limits",
    "LocalExecutor",
    "Mount",
    "SandboxExecutor",
    "ScoredRollout",
    "SolutionSpec",
    "Task",
    "TaskLoadError",
    "Timeouts",
    "VerifierResult",
    "VerifierSpec",
    "VerifierStatus",
    "WorkspaceSource",
    "__version__",
    "aggregate",
    "builtin_suite_dir",
    "detect_layout",
    "generate_learnable_tasks",
    "learnable_instances",
    "load_builtin_suite",
    "load_suite",
    "load_task",
    "pass_at_k",
    "prepare_workspace",
    "run_solution",
    "verify",
    "verify_sandbox",
]
