"""An offline HTML viewer of a run's rollouts, call trees and tokens (``bench view RUN``).

:func:`build_view` writes ``<run>/view/index.html`` and one ``data/<key>.js`` file per
rollout and group, for a ``bench`` or a ``train`` run folder (:func:`load_run`); the page
works from ``file://`` with no server and no network, loading one rollout at a time. See
:mod:`clawrl.bench.view.page` for the layout and bench's README, "Viewer".
"""

from clawrl.bench.view.cli import view_main
from clawrl.bench.view.page import build_view, group_data, rollout_data
from clawrl.bench.view.sources import ViewRollout, ViewRun, load_run

__all__ = [
    "ViewRollout",
    "ViewRun",
    "build_view",
    "group_data",
    "load_run",
    "rollout_data",
    "view_main",
]
