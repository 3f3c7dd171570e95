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

# A module whose whole public set (its ``__all__``) is public here is star-imported and its
# ``__all__`` spliced into ours, so each name is listed once, where it is defined; from the
# others (config, rollout_types, the task-image and AgentBench modules) only the names below
# are re-exported. The harness adapters are
# public in their own subpackage, :mod:`clawrl.bench.harness`, and only there.
import clawrl.bench.chores as _chores
import clawrl.bench.config_file as _config_file
import clawrl.bench.errors as _errors
import clawrl.bench.executors as _executors
import clawrl.bench.jsonl as _jsonl
import clawrl.bench.metrics as _metrics
import clawrl.bench.runner as _runner
import clawrl.bench.sandbox_executor as _sandbox_executor
import clawrl.bench.task as _task
import clawrl.bench.tasks.learnable as _learnable
import clawrl.bench.tasks.loading as _loaders
import clawrl.bench.verify as _verify
import clawrl.bench.workspace_diff as _workspace_diff
from clawrl.bench.base_images import BASE_RECIPES, BaseRecipe
from clawrl.bench.chores import *  # noqa: F403
from clawrl.bench.config import BenchConfig, SandboxHostConfig, select_tasks
from clawrl.bench.config_file import *  # noqa: F403
from clawrl.bench.errors import *  # noqa: F403
from clawrl.bench.executors import *  # noqa: F403
from clawrl.bench.jsonl import *  # noqa: F403
from clawrl.bench.metrics import *  # noqa: F403
from clawrl.bench.rollout_types import DEFAULT_MAX_TURNS, SessionHook
from clawrl.bench.runner import *  # noqa: F403
from clawrl.bench.sandbox_executor import *  # noqa: F403
from clawrl.bench.task import *  # noqa: F403
from clawrl.bench.task_image import TaskImage, TaskImageError, build_task_image
from clawrl.bench.tasks.agentbench_os import load_agentbench_os
from clawrl.bench.tasks.learnable import *  # noqa: F403
from clawrl.bench.tasks.loading import *  # noqa: F403
from clawrl.bench.verify import *  # noqa: F403
from clawrl.bench.workspace_diff import *  # noqa: F403

__version__ = "0.1.0"

__all__ = [
    "BASE_RECIPES",
    "BaseRecipe",
    "BenchConfig",
    "SandboxHostConfig",
    "DEFAULT_MAX_TURNS",
    "SessionHook",
    "TaskImage",
    "TaskImageError",
    "__version__",
    "build_task_image",
    "load_agentbench_os",
    "select_tasks",
    *_chores.__all__,
    *_config_file.__all__,
    *_errors.__all__,
    *_executors.__all__,
    *_jsonl.__all__,
    *_learnable.__all__,
    *_loaders.__all__,
    *_metrics.__all__,
    *_runner.__all__,
    *_sandbox_executor.__all__,
    *_task.__all__,
    *_verify.__all__,
    *_workspace_diff.__all__,
]
