"""Benchmark clawrl-sandbox on this machine and write tools/perf/results/sandbox.json.

Measures (real podman, default host-/usr rootfs):
  * cold: create + exec("true") + destroy, one after another (p50/p95, with the parts);
  * exec: latency of a trivial exec in a live sandbox;
  * warm acquire: SandboxPool.acquire when a warm sandbox is idle (p50/p95);
  * concurrency: N sandboxes alive at once, all running `sleep 2` together (windows must
    overlap; each runs `sleep max(8, 0.3 N)`); the largest N that succeeded is "max concurrent sustained".

Usage:  uv run python tools/perf/bench_sandbox.py [--cold 20] [--warm 40] [--levels 8,16,32,48,64]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
from clawrl.sandbox import Limits, Podman, Sandbox, SandboxPool, SandboxSpec
from latency import summary


def hold_s(k: int) -> float:
    """Each of k sandboxes runs `sleep hold_s(k)`; all must be running at one instant.

    Starting k podman execs takes time on 2 cores (~0.2 s each), so the hold grows with k.
    """
    return max(8.0, 0.3 * k)


GOALS = {"warm_acquire_p50_s": 0.05, "cold_p50_s": 0.5, "concurrent": 32}
SPEC = SandboxSpec(limits=Limits(memory="128m", cpus=0.5))


async def bench_cold(n: int) -> dict[str, Any]:
    total, create, exe, destroy = [], [], [], []
    for _ in range(n):
        t0 = time.monotonic()
        sb = await Sandbox.create(SPEC, run_id="bench-cold")
        t1 = time.monotonic()
        r = await sb.exec("true")
        t2 = time.monotonic()
        await sb.destroy()
        t3 = time.monotonic()
        assert r.ok
        total.append(t3 - t0)
        create.append(t1 - t0)
        exe.append(t2 - t1)
        destroy.append(t3 - t2)
    return {
        "total": summary(total),
        "create": summary(create),
        "exec": summary(exe),
        "destroy": summary(destroy),
    }


async def bench_exec(n: int) -> dict[str, Any]:
    async with await Sandbox.create(SPEC, run_id="bench-exec") as sb:
        xs = []
        for _ in range(n):
            r = await sb.exec("true")
            assert r.ok
            xs.append(r.duration_s)
    return summary(xs)


async def bench_warm(n: int) -> dict[str, Any]:
    xs = []
    async with SandboxPool(max_sandboxes=6, warm=[(SPEC, 2)], run_id="bench-warm") as pool:
        for _ in range(n):
            for _ in range(600):
                if pool.metrics().idle >= 1:
                    break
                await asyncio.sleep(0.05)
            t0 = time.monotonic()
            sb = await pool.acquire(SPEC)
            xs.append(time.monotonic() - t0)
            await pool.release(sb)
        m = pool.metrics()
    return {**summary(xs), "created": m.created, "acquired": m.acquired}


async def bench_concurrency(levels: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"levels": []}
    best = 0
    for k in levels:
        t0 = time.monotonic()
        made = await asyncio.gather(
            *(Sandbox.create(SPEC, run_id=f"bench-conc-{k}") for _ in range(k)),
            return_exceptions=True,
        )
        sbs = [s for s in made if isinstance(s, Sandbox)]
        create_s = time.monotonic() - t0
        ok = len(sbs) == k
        overlap = False
        exec_s = 0.0
        skew = float("nan")
        if ok:
            t1 = time.monotonic()
            res = await asyncio.gather(
                *(
                    s.exec(f"date +%s.%N; sleep {hold_s(k):g}; date +%s.%N", timeout=180)
                    for s in sbs
                )
            )
            exec_s = time.monotonic() - t1
            ok = all(r.ok for r in res)
            if ok:
                w = [tuple(float(x) for x in r.stdout.split()) for r in res]
                overlap = max(s for s, _ in w) < min(e for _, e in w)
                skew = max(s for s, _ in w) - min(s for s, _ in w)
        await asyncio.gather(*(s.destroy() for s in sbs))
        row: dict[str, Any] = {
            "n": k,
            "created": len(sbs),
            "create_all_s": round(create_s, 2),
            "exec_all_s": round(exec_s, 2),
            "all_ok": ok,
            "windows_overlap": overlap,
            "start_skew_s": round(skew, 2),
            "hold_s": hold_s(k),
        }
        errors = [repr(e)[:200] for e in made if not isinstance(e, Sandbox)]
        if errors:
            row["first_error"] = errors[0]
        out["levels"].append(row)
        print(row, flush=True)
        if ok and overlap:
            best = k
        else:
            break
    out["max_concurrent_sustained"] = best
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", type=int, default=20)
    ap.add_argument("--warm", type=int, default=40)
    ap.add_argument("--exec", type=int, default=20)
    ap.add_argument("--levels", default="8,16,32,48,64")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "sandbox.json"))
    args = ap.parse_args()
    pm = Podman()
    version = subprocess.run(["podman", "--version"], capture_output=True, text=True).stdout.strip()
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "kernel": platform.release(),
            "podman": version,
            "runtime": pm.runtime or "podman default",
            "load_avg_start": os.getloadavg(),
        },
        "spec": {"rootfs": "default (host /usr read-only)", "memory": "128m", "cpus": 0.5},
        "goals": GOALS,
    }
    print("cold ...", flush=True)
    result["cold_create_exec_destroy_s"] = await bench_cold(args.cold)
    print(result["cold_create_exec_destroy_s"], flush=True)
    print("exec ...", flush=True)
    result["exec_s"] = await bench_exec(args.exec)
    print(result["exec_s"], flush=True)
    print("warm acquire ...", flush=True)
    result["warm_acquire_s"] = await bench_warm(args.warm)
    print(result["warm_acquire_s"], flush=True)
    print("concurrency ...", flush=True)
    result["concurrency"] = await bench_concurrency([int(x) for x in args.levels.split(",")])
    result["machine"]["load_avg_end"] = os.getloadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
