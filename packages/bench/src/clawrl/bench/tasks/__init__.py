"""Task layouts: how tasks written for one benchmark become :class:`~clawrl.bench.Task` s.

One protocol, :class:`TaskLayout` (:mod:`~clawrl.bench.tasks.base`: detect, load, finish,
prepare, grade, subscores), for every layout; the loader (:func:`~clawrl.bench.load_task`,
:func:`~clawrl.bench.load_suite`), the rollout runner and the verifier call a layout only
through it, found by name with :func:`get_layout` (:func:`layout_names`, :func:`layout_of`).
Built in, one module each: ``builtin`` (:mod:`~clawrl.bench.tasks.builtin`), ``harbor``
(Harbor / Terminal-Bench 2, :mod:`~clawrl.bench.tasks.harbor`), ``terminal-bench-1``
(:mod:`~clawrl.bench.tasks.tb1`), ``clawgym`` (:mod:`~clawrl.bench.tasks.clawgym`) and
``agentbench-os`` (:mod:`~clawrl.bench.tasks.agentbench_os`): five layouts; and ``dataset``
(:mod:`~clawrl.bench.tasks.dataset`), a JSON or Parquet file of built-in tasks, one a row,
read with Hugging Face ``datasets``. The learnable
family (:mod:`~clawrl.bench.tasks.learnable`) is generated, then written and loaded in the
built-in layout. A layout of your own is one :class:`TaskLayout` subclass, named by an
import path ``module:Class``, an entry point of the group ``clawrl.task_layouts``, or
:func:`register_layout`; it builds its tasks with :func:`make_task`, and may read its files
with the helpers of :mod:`~clawrl.bench.tasks.files`.

Modules depend on one another in one direction only: ``base`` ← ``registry`` ← ``loading``;
the layout modules import ``base`` and ``files`` (Harbor and Terminal-Bench 1 also
``dockerfile``), and the registry imports them only when a layout is first asked for.
"""

# Each module's whole public set (its ``__all__``) is public here, each name listed once,
# where it is defined. The layout modules stay in their own modules (imported on demand).
from clawrl.bench.tasks import base as _base
from clawrl.bench.tasks import files as _files
from clawrl.bench.tasks import registry as _registry
from clawrl.bench.tasks.base import *  # noqa: F403
from clawrl.bench.tasks.files import *  # noqa: F403
from clawrl.bench.tasks.registry import *  # noqa: F403

__all__ = [*_base.__all__, *_files.__all__, *_registry.__all__]
