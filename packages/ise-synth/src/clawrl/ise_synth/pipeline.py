"""Stages 2–3 over an intent pool: bounded-concurrency, resumable synthesis runs.

:func:`synthesize` runs one session per intent (:func:`~clawrl.ise_synth.run_session`) with at
most ``concurrency`` sandboxes alive and appends each session as soon as it ends: a verified
success (its intent's execution checks passed — ``outcome.success``) to
``<out>/trajectories.jsonl``, a completed session that is not one (``outcome.label``
``failed``, ``unverified`` or ``unexecuted_call``) to ``<out>/failed.jsonl`` — kept apart, never
an SFT target unless the recipe asks (``failed_as_targets``: then they go to
``trajectories.jsonl`` too, still labelled) — and every discarded session to
``<out>/discarded.jsonl``. Intents already present in any of them are skipped (the resume
point); then it writes ``<out>/report.json`` (:func:`~clawrl.ise_synth.synthesis_report`,
with the simulator-vs-checks agreement).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawrl.ise_synth.execute import (
    AgentHook,
    SessionConfig,
    SessionResult,
    SimulatorFactory,
    run_session,
)
from clawrl.ise_synth.records import IntentRecord
from clawrl.ise_synth.simulator import LLMUserSimulator, UserSimulator
from clawrl.ise_synth.trajectory import append_jsonl, read_jsonl, synthesis_report
from clawrl.proxy import ModelEndpoint

__all__ = ["ProxySimulatorFactory", "SynthesisRun", "synthesize"]


class ProxySimulatorFactory:
    """An :class:`LLMUserSimulator` per session, each on its own proxy session (harness
    ``"user-simulator"``) of the given proxy, reached over its model unix socket with the
    ``openai`` SDK. Call :meth:`aclose` at the end (it also closes those proxy sessions)."""

    def __init__(
        self, endpoint: ModelEndpoint, model: str = "simulator", **sim_kwargs: Any
    ) -> None:
        import httpx

        self.endpoint = endpoint
        self.model = model
        self.sim_kwargs = sim_kwargs
        self.session_ids: list[str] = []
        self._http: Any = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(endpoint.model_socket)), timeout=600.0
        )

    async def for_session(self, intent: IntentRecord, run_id: str) -> UserSimulator:
        import openai

        s = await self.endpoint.admin.create_session(
            run_id=run_id, task_id=intent.id, harness="user-simulator", group_id=intent.id
        )
        self.session_ids.append(s.session_id)
        client = openai.AsyncOpenAI(
            base_url=s.openai_base_url,  # any host: the transport is the model socket
            api_key=s.api_key,
            http_client=self._http,
            max_retries=2,
        )
        return LLMUserSimulator(client, self.model, **self.sim_kwargs)

    async def aclose(self) -> None:
        from clawrl.proxy import ProxyError

        for sid in self.session_ids:
            with contextlib.suppress(ProxyError, OSError):
                await self.endpoint.admin.close_session(sid)
        self.session_ids.clear()
        await self._http.aclose()


@dataclass
class SynthesisRun:
    """Paths and counts of a :func:`synthesize` call (``skipped``: intents found done in the
    output files; ``completed`` / ``discarded``: sessions of this call; ``failed``: those of
    the completed ones that are not verified successes, written to ``failed_path``)."""

    trajectories_path: Path
    discarded_path: Path
    report_path: Path
    report: dict[str, Any]
    skipped: int
    completed: int
    discarded: int
    failed_path: Path | None = None
    failed: int = 0


async def synthesize(
    intents: Sequence[IntentRecord],
    simulator: UserSimulator | SimulatorFactory,
    endpoint: ModelEndpoint,
    out_dir: Path,
    config: SessionConfig | None = None,
    *,
    concurrency: int = 4,
    run_id: str = "ise",
    agent_hook: AgentHook | None = None,
    intent_stats: dict[str, Any] | None = None,
    on_session: Callable[[SessionResult], None] | None = None,
    image: str | None = None,
    failed_as_targets: bool = False,
    attempts: int = 1,
) -> SynthesisRun:
    """Run stages 2–3 for ``intents`` (see the module docstring). ``simulator`` is one
    simulator shared by all sessions or a factory building one per session;
    ``failed_as_targets`` writes completed sessions whose checks did not pass to
    ``trajectories.jsonl`` as well as ``failed.jsonl`` (labelled ``outcome.success = false``).

    ``attempts`` > 1 is best-of-n with execution filtering: an intent whose session is not a
    verified success (failed checks, or discarded) runs again, up to ``attempts`` sessions,
    until one passes its checks. Every session is written where it belongs (``failed.jsonl``,
    ``discarded.jsonl``) with its 0-based ``attempt``; a resumed call counts the sessions
    already written. Each call appends its wall time and outcome counts to ``runs.jsonl``, so
    the report gives the yield: verified trajectories per hour.

    Raises:
        ValueError: ``concurrency`` or ``attempts`` < 1.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    started = time.time()
    out_dir.mkdir(parents=True, exist_ok=True)
    traj_path = out_dir / "trajectories.jsonl"
    disc_path = out_dir / "discarded.jsonl"
    failed_path = out_dir / "failed.jsonl"
    for p in (traj_path, disc_path, failed_path):  # drop a half-written last line before appending
        if p.exists() and p.stat().st_size and not p.read_bytes().endswith(b"\n"):
            data = p.read_bytes()
            p.write_bytes(data[: data.rfind(b"\n") + 1])
    solved = {
        t["intent"]["id"] for t in read_jsonl(traj_path) if t["outcome"].get("success") is True
    }
    tried: Counter[str] = Counter(t["intent"]["id"] for t in read_jsonl(failed_path))
    tried.update(d["intent_id"] for d in read_jsonl(disc_path))
    todo = [i for i in intents if i.id not in solved and tried[i.id] < attempts]
    gate = asyncio.Semaphore(concurrency)
    counts = {"completed": 0, "discarded": 0, "failed": 0, "verified": 0, "sessions": 0}

    async def session(intent: IntentRecord, attempt: int) -> bool:
        async with gate:
            sim = (
                await simulator.for_session(intent, run_id)
                if hasattr(simulator, "for_session")
                else simulator
            )
            result = await run_session(
                intent,
                sim,
                endpoint,
                config,
                run_id=run_id,
                agent_hook=agent_hook,
                image=image,
            )
        counts["sessions"] += 1
        ok = False
        if result.trajectory is not None:
            counts["completed"] += 1
            traj = {**result.trajectory, "attempt": attempt}
            if traj["outcome"]["success"] is True:
                ok = True
                counts["verified"] += 1
                append_jsonl(traj_path, traj)
            else:
                counts["failed"] += 1
                append_jsonl(failed_path, traj)
                if failed_as_targets:
                    append_jsonl(traj_path, traj)
        else:
            append_jsonl(disc_path, {**result.discard_record(), "attempt": attempt})
            counts["discarded"] += 1
        if on_session is not None:
            on_session(result)
        return ok

    async def one(intent: IntentRecord) -> None:
        for attempt in range(tried[intent.id], attempts):
            if await session(intent, attempt):
                return

    tasks = [asyncio.create_task(one(i)) for i in todo]
    interrupted = False
    try:
        await asyncio.gather(*tasks)
    except BaseException:  # Ctrl-C, SIGTERM or an error: every session ends (sandbox removed,
        interrupted = True  # proxy session closed) before the endpoint closes under them
        for t in tasks:
            t.cancel()
        await asyncio.wait(tasks)
        raise
    finally:  # an interrupted call's time and sessions count towards the yield too
        append_jsonl(
            out_dir / "runs.jsonl",
            {
                "started": started,
                "wall_s": round(time.time() - started, 3),
                "concurrency": concurrency,
                "attempts": attempts,
                "interrupted": interrupted,
                **{k: counts[k] for k in ("sessions", "verified", "failed", "discarded")},
            },
        )
    report = synthesis_report(
        read_jsonl(traj_path),
        read_jsonl(disc_path),
        intent_stats,
        failed=read_jsonl(failed_path),
        runs=read_jsonl(out_dir / "runs.jsonl"),
    )
    report_path = out_dir / "report.json"
    report_path.write_text(json.dumps(report, indent=1) + "\n")
    return SynthesisRun(
        traj_path,
        disc_path,
        report_path,
        report,
        len(intents) - len(todo),
        counts["completed"],
        counts["discarded"],
        failed_path,
        counts["failed"],
    )
