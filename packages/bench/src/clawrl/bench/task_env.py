"""The environment a rollout of a task runs in: its built image and its network per phase.

:class:`TaskEnvironments` is the rollout runner's view of task images
(:mod:`clawrl.bench.task_image`):

* :meth:`~TaskEnvironments.image` builds each task's Dockerfile once per runner (the
  first rollout of a task waits for the build; the others of the batch wait for the same
  build; later runs find the image cached by its digest) and remembers a failed build, so
  every rollout of that task is an ``env-error`` with the same log tail, without
  rebuilding;
* the image's ``USER`` (a name, ``name:group``, ``uid`` or ``uid:gid``) is resolved to a
  numeric ``uid:gid`` through the image's own ``/etc/passwd`` and ``/etc/group`` (read
  from a short-lived sandbox of the image); an unknown name fails the build (env-error);
* :meth:`~TaskEnvironments.agent_fields` gives the agent sandbox the image, the image's
  own environment (podman expanded its ``ENV`` lines) and its ``USER``, as docker runs the
  container's processes (the agent's commands, AgentBench's init, start and check scripts);
  the model forwarder still runs as root; and never a network: the agent
  phase reaches only the model socket, whatever the task declares, unless the run opts
  trusted tasks in (``RolloutOptions.agent_network``, ``bench --agent-network``);
* :meth:`~TaskEnvironments.verify_executor` runs the verifier in a fresh sandbox of the
  same image, sized from the task's limits, with podman's default ``bridge`` network when
  the task declares it (Harbor ``allow_internet = true``), else ``--network none``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

from clawrl.bench.executors import Executor
from clawrl.bench.sandbox_executor import SandboxExecutor
from clawrl.bench.task import Task
from clawrl.bench.task_image import TaskImage, TaskImageError, build_task_image
from clawrl.sandbox import Limits, Podman, Sandbox, SandboxError, SandboxSpec

__all__ = ["VERIFIER_NETWORK", "TaskEnvironments", "numeric_user"]

#: The podman network of a verifier whose task allows the internet (podman's default
#: bridge: the package registries are reachable, nothing else is granted).
VERIFIER_NETWORK = "bridge"


def _table(text: str) -> dict[str, list[str]]:
    rows = (line.split(":") for line in text.splitlines() if line and not line.startswith("#"))
    return {r[0]: r for r in rows if len(r) >= 4}


def numeric_user(user: str, passwd: str, group: str) -> str:
    """``uid:gid`` of a Dockerfile ``USER`` value, given the image's ``/etc/passwd`` and
    ``/etc/group`` texts (a numeric uid without a group gets its passwd gid, else 0, as
    docker does).

    Raises:
        ValueError: a user or group name the tables do not hold.
    """
    name, _, grp = user.partition(":")
    users, groups = _table(passwd), _table(group)
    if name.isdigit():
        uid = name
        row = next((r for r in users.values() if r[2] == uid), None)
        gid = row[3] if row is not None else "0"
    elif name in users:
        uid, gid = users[name][2], users[name][3]
    else:
        raise ValueError(f"USER {user!r}: no user {name!r} in the image's /etc/passwd")
    if grp:
        if grp.isdigit():
            gid = grp
        elif grp in groups:
            gid = groups[grp][2]
        else:
            raise ValueError(f"USER {user!r}: no group {grp!r} in the image's /etc/group")
    return f"{uid}:{gid}"


async def _resolve_user(image: TaskImage) -> TaskImage:
    """``image`` with its ``USER`` as ``uid:gid`` (see :func:`numeric_user`)."""
    user = image.user
    if not user or (all(part.isdigit() for part in user.split(":")) and ":" in user):
        return image
    try:
        spec = SandboxSpec(image=image.tag, forwarder=False, limits=Limits(wall_clock_s=60))
        async with await Sandbox.create(spec) as sb:
            texts = []
            for path in ("/etc/passwd", "/etc/group"):
                try:
                    texts.append((await sb.get_file(path, 1 << 20)).decode("utf-8", "replace"))
                except FileNotFoundError:
                    texts.append("")
        return dataclasses.replace(image, user=numeric_user(user, *texts))
    except (SandboxError, ValueError) as exc:
        raise TaskImageError(
            f"task image {image.tag}: cannot resolve USER {user!r}: {exc}"
        ) from exc


class TaskEnvironments:
    """Task images and verifier executors of one rollout runner (see the module docstring).

    Args:
        run_id: sandbox label of the verifier sandboxes.
        enabled: build task images (``False``: every task runs in the default root).
        podman: backend of the builds (default: a new :class:`~clawrl.sandbox.Podman`).
        build_timeout_s: limit of one ``podman build`` (a task's own
            ``timeouts.build_s`` applies when shorter).
    """

    def __init__(
        self,
        run_id: str | None = None,
        *,
        enabled: bool = True,
        podman: Podman | None = None,
        build_timeout_s: float = 1800.0,
    ) -> None:
        self.run_id = run_id
        self.enabled = enabled
        self.build_timeout_s = build_timeout_s
        self._podman = podman
        self._done: dict[str, TaskImage | TaskImageError] = {}
        self._building: dict[tuple[int, str], asyncio.Future[TaskImage | TaskImageError]] = {}
        self._executors: dict[tuple[Any, ...], SandboxExecutor] = {}
        self._lock = threading.Lock()

    async def image(self, task: Task) -> TaskImage | None:
        """The built image of ``task`` (``None`` when it has no Dockerfile or builds are off).

        Raises:
            TaskImageError: the build failed (now, or earlier in this runner's life).
        """
        if not self.enabled or task.dockerfile is None:
            return None
        key = str(task.dockerfile)
        done = self._done.get(key)
        if done is None:
            loop_key = (id(asyncio.get_running_loop()), key)
            fut = self._building.get(loop_key)
            if fut is None:
                fut = asyncio.ensure_future(self._build(task))
                self._building[loop_key] = fut
            done = await asyncio.shield(fut)
            self._done[key] = done
            self._building.pop(loop_key, None)
        if isinstance(done, TaskImageError):
            raise done
        return done

    async def _build(self, task: Task) -> TaskImage | TaskImageError:
        assert task.dockerfile is not None
        if self._podman is None:
            self._podman = Podman()
        try:
            image = await build_task_image(
                task.dockerfile,
                task.build_context or task.dockerfile.parent,
                self._podman,
                timeout_s=min(self.build_timeout_s, task.timeouts.build_s),
            )
            return await _resolve_user(image)
        except TaskImageError as exc:
            return exc

    @staticmethod
    def agent_fields(
        task: Task, image: TaskImage | None, agent_network: bool = False
    ) -> dict[str, Any]:
        """``SandboxSpec`` fields of the agent sandbox: ``image``, ``env`` (the image's
        environment, else the task's), ``user`` (the image's resolved ``USER``, else root)
        and ``network``: ``"none"`` unless ``agent_network`` (the ``--agent-network``
        opt-in) and the task declares a network, then :data:`VERIFIER_NETWORK`."""
        network = VERIFIER_NETWORK if agent_network and task.network else "none"
        if image is None:
            return {"image": None, "env": dict(task.env), "network": network, "user": "0:0"}
        user = image.user if ":" in image.user else "0:0"  # resolved by image()
        return {"image": image.tag, "env": dict(image.env), "network": network, "user": user}

    def verify_executor(self, task: Task, image: TaskImage | None, default: Executor) -> Executor:
        """The executor of ``task``'s verifier: ``default`` for a task without an image,
        else a :class:`~clawrl.bench.SandboxExecutor` of the image (cached per image,
        network and limits) with the task's network policy for the verifier phase."""
        if image is None:
            return default
        network = VERIFIER_NETWORK if task.network else "none"
        lim = task.limits
        key = (image.tag, network, lim.memory_mb, lim.cpus, lim.storage_mb, lim.pids)
        with self._lock:
            executor = self._executors.get(key)
            if executor is None:
                memory = f"{lim.memory_mb}m"
                spec = SandboxSpec(
                    image=image.tag,
                    env=dict(image.env),
                    network=network,
                    limits=Limits(
                        memory=memory,
                        cpus=lim.cpus,
                        pids=max(64, lim.pids),
                        workspace_size=f"{min(lim.storage_mb, lim.memory_mb)}m",
                    ),
                )
                executor = self._executors[key] = SandboxExecutor(spec, run_id=self.run_id)
        return executor

    def close(self) -> None:
        """Close the verifier executors (idempotent; they are made again when needed)."""
        with self._lock:
            executors, self._executors = list(self._executors.values()), {}
        for executor in executors:
            executor.close()

    def interrupt(self) -> None:
        """Cancel the verifier runs in progress and close the executors (a batch that
        stops early: no verifier outlives it)."""
        with self._lock:
            executors, self._executors = list(self._executors.values()), {}
        for executor in executors:
            executor.interrupt()
