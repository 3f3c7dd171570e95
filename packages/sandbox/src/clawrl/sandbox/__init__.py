"""clawrl-sandbox: temporary isolated podman workspaces for agent rollouts.

Public API (see the package README for a runnable example):

* :class:`SandboxSpec`, :class:`Limits` — what to create;
* :class:`Sandbox` — create / exec / files / kill_all / destroy (asyncio), :class:`ExecResult`;
  files come out through the host (:class:`CopyLimits`, :class:`CopyStats`), never through a
  program of the sandbox;
* :class:`SandboxPool` — bounded, warm, fair pool of sandboxes, :class:`PoolMetrics`;
* :class:`SandboxHosts`, :class:`SandboxHost`, :class:`HostHealth` — sandboxes spread over
  several podman hosts by free capacity, with health and failover;
* :func:`kill_all_but`, :func:`pin_session`, :func:`root_changes` — what a grader in a used
  sandbox needs: the task's own processes kept alive, the root's changes listed;
* :func:`snapshot_state`, :func:`restore_state`, :class:`SandboxState` — what a used sandbox
  changed against its image, restored into a fresh sandbox (verification on a snapshot);
* :func:`gc`, :func:`list_containers` — the reaper of dead runs' containers;
* :func:`owned_tempdir`, :func:`gc_tempdirs` — host temporary directories that name their
  process, and their reaper (for what ``kill -9`` leaves);
* :func:`printable_name`, :func:`printable_strings` — a name from a sandbox (any bytes) as
  lossless, printable UTF-8, for every writer of results and logs;
* :func:`build_image` — a hermetic Debian image (debootstrap + ``podman import``);
* :class:`SyncSandbox` — a thin synchronous wrapper;
* the exception hierarchy rooted at :class:`SandboxError`.
"""

# A module whose whole public set (its ``__all__``) is public here is star-imported and its
# ``__all__`` spliced into ours, so each name is listed once, where it is defined; from the
# other modules only the names below are re-exported.
from . import errors as _errors
from . import pool as _pool
from . import sessions as _sessions
from . import snapshot as _snapshot
from . import sync as _sync
from .errors import *  # noqa: F403
from .hostfs import CopyLimits, CopyStats
from .hosts import HostHealth, SandboxHost, SandboxHosts
from .image import DEFAULT_IMAGE_PACKAGES, build_image, image_tag
from .names import printable_name, printable_strings
from .podman import Podman
from .pool import *  # noqa: F403
from .reaper import (
    ContainerInfo,
    RunIdentity,
    current_identity,
    gc,
    gc_tempdirs,
    list_containers,
    owned_tempdir,
)
from .rootfs import default_rootfs
from .sandbox import DEFAULT_OUTPUT_CAP, ExecStream, Sandbox
from .sessions import *  # noqa: F403
from .snapshot import *  # noqa: F403
from .spec import (
    MODEL_SOCKET_PATH,
    WORKSPACE,
    ExecResult,
    Limits,
    OutputChunk,
    SandboxSpec,
    parse_size,
)
from .sync import *  # noqa: F403

__version__ = "0.1.0"

__all__ = [
    "ContainerInfo",
    "CopyLimits",
    "CopyStats",
    "DEFAULT_IMAGE_PACKAGES",
    "DEFAULT_OUTPUT_CAP",
    "ExecResult",
    "ExecStream",
    "HostHealth",
    "Limits",
    "MODEL_SOCKET_PATH",
    "OutputChunk",
    "Podman",
    "RunIdentity",
    "Sandbox",
    "SandboxHost",
    "SandboxHosts",
    "SandboxSpec",
    "WORKSPACE",
    "__version__",
    "build_image",
    "current_identity",
    "default_rootfs",
    "gc",
    "gc_tempdirs",
    "image_tag",
    "list_containers",
    "owned_tempdir",
    "parse_size",
    "printable_name",
    "printable_strings",
    *_errors.__all__,
    *_pool.__all__,
    *_sessions.__all__,
    *_snapshot.__all__,
    *_sync.__all__,
]
