"""The no-op harness: does nothing and exits 0 (no model, no session).

It scores untouched workspaces: a task whose verifier passes on the workspace as given is
broken (a reward for doing nothing), and the score of doing nothing is the floor every
other harness is compared with.
"""

from __future__ import annotations

from clawrl.bench.harness.base import HarnessAdapter, HarnessContext, HarnessLaunch, WireAPI

__all__ = ["NoopHarness"]


class NoopHarness(HarnessAdapter):
    """Runs ``true`` in the workspace: the workspace is verified as the task built it."""

    name = "noop"
    api: WireAPI | None = None
    needs_model = False

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        return HarnessLaunch(argv=("true",), workdir=ctx.task.workspace_path)
