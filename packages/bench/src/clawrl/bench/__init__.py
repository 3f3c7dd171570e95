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
# others (config, rollout_types) only the names below are re-exported. The harness adapters are
# public in their own subpackage, :mod:`clawrl.bench.harness`, and only there.
import clawrl.bench.agentbench_os as _agentbench_os
import clawrl.bench.base_images as _base_images
import clawrl.bench.config_file as _config_file
import clawrl.bench.errors as _errors
import clawrl.bench.executors as _executors
import clawrl.bench.jsonl as _jsonl
import clawrl.bench.learnable as _learnable
import clawrl.bench.loaders as _loaders
import clawrl.bench.metrics as _metrics
import clawrl.bench.runner as _runner
import clawrl.bench.sandbox_executor as _sandbox_executor
import clawrl.bench.task as _task
import clawrl.bench.task_env as _task_env
import clawrl.bench.task_image as _task_image
import clawrl.bench.verifier_diagnosis as _verifier_diagnosis
import clawrl.bench.verify as _verify
import clawrl.bench.workspace_diff as _workspace_diff
from clawrl.bench.agentbench_os import *  # noqa: F403
from clawrl.bench.base_images import *  # noqa: F403
from clawrl.bench.config import BenchConfig, select_tasks
from clawrl.bench.config_file import *  # noqa: F403
from clawrl.bench.errors import *  # noqa: F403
from clawrl.bench.executors import *  # noqa: F403
from clawrl.bench.jsonl import *  # noqa: F403
from clawrl.bench.learnable import *  # noqa: F403
from clawrl.bench.loaders import *  # noqa: F403
from clawrl.bench.metrics import *  # noqa: F403
from clawrl.bench.rollout_types import DEFAULT_MAX_TURNS, SessionHook
from clawrl.bench.runner import *  # noqa: F403
from clawrl.bench.sandbox_executor import *  # noqa: F403
from clawrl.bench.task import *  # noqa: F403
from clawrl.bench.task_env import *  # noqa: F403
from clawrl.bench.task_image import *  # noqa: F403
from clawrl.bench.verifier_diagnosis import *  # noqa: F403
from clawrl.bench.verify import *  # noqa: F403
from clawrl.bench.workspace_diff import *  # noqa: F403

__version__ = "0.1.0"

__all__ = [
    "BenchConfig",
    "DEFAULT_MAX_TURNS",
    "SessionHook",
    "__version__",
    "select_tasks",
    *_agentbench_os.__all__,
    *_base_images.__all__,
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
    *_task_env.__all__,
    *_task_image.__all__,
    *_verifier_diagnosis.__all__,
    *_verify.__all__,
    *_workspace_diff.__all__,
]
