"""Simulator-only drift of the ISE user simulator (docs/results.md, "ISE simulator under the
JSON contract").

    uv run python tools/ise_sim_drift.py 8        # 8 checkable train intents (seed 11)

A model-kit model (default qwen2.5-coder-0.5b-instruct, embedded in the proxy) answers as the
LLM user simulator: per intent the opening turn, then one follow-up after a canned agent turn
that ran the intent's oracle (its bash call and result summarised). Prints the running counts
per intent and a final JSON line (generations, drifted, invalid, rates, rejection reasons).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from clawrl.ise_synth import (
    AgentTurn,
    ProxySimulatorFactory,
    SimulatorDriftError,
    generate_checkable_intents,
    summarise_tool_calls,
)
from clawrl.proxy import BackendConfig, make_backend, resolve_model, serve
from clawrl.sandbox import owned_tempdir


async def main(n: int, model: str) -> None:
    model_dir = resolve_model(model)
    backend = make_backend(BackendConfig(kind="embedded", model_dir=model_dir, dtype="bf16"))
    intents = generate_checkable_intents(n, seed=11, split="train")
    tot = {"generations": 0, "drifted": 0, "invalid": 0, "turns": 0, "discarded": 0}
    reasons: list[str] = []
    t0 = time.time()
    async with serve(backend, model_dir, tempdir=owned_tempdir) as ep:
        await ep.admin.set_sampling(temperature=0.7)
        fac = ProxySimulatorFactory(ep, max_regenerations=2, max_tokens=160, max_user_turns=4)
        try:
            for it in intents:
                sim = await fac.for_session(it, "drift")
                history: list[AgentTurn] = []
                for _ in range(2):
                    try:
                        turn = await sim.respond(it, history)
                    except SimulatorDriftError as e:
                        tot["generations"] += e.generations
                        tot["drifted"] += e.drifted
                        tot["invalid"] += e.invalid
                        tot["discarded"] += 1
                        reasons += e.reasons
                        break
                    tot["generations"] += turn.generations
                    tot["drifted"] += turn.drifted
                    tot["invalid"] += turn.invalid
                    tot["turns"] += 1
                    reasons += turn.drift_reasons
                    if turn.reply.completed:
                        break
                    call = {"command": it.extra["solution"]}
                    msgs: list[dict[str, Any]] = [
                        {
                            "role": "assistant",
                            "content": "",
                            "tool_calls": [
                                {
                                    "id": "c1",
                                    "type": "function",
                                    "function": {"name": "bash", "arguments": json.dumps(call)},
                                }
                            ],
                        },
                        {"role": "tool", "tool_call_id": "c1", "content": "exit code 0\n"},
                    ]
                    changes = "; ".join(
                        f"added {c['path']} (8 B)" for c in it.extra["checks"] if "path" in c
                    )
                    reply = "Done: I ran the commands and wrote the files."
                    history.append(
                        AgentTurn(turn.reply.query, reply, changes, summarise_tool_calls(msgs))
                    )
                print(it.id, tot, flush=True)
        finally:
            await fac.aclose()
    g = max(tot["generations"], 1)
    rates = {"drift_rate": tot["drifted"] / g, "invalid_rate": tot["invalid"] / g}
    print(json.dumps({**tot, **rates, "wall_s": round(time.time() - t0), "reasons": reasons}))


if __name__ == "__main__":
    asyncio.run(
        main(
            int(sys.argv[1]) if len(sys.argv) > 1 else 8,
            sys.argv[2] if len(sys.argv) > 2 else "qwen2.5-coder-0.5b-instruct",
        )
    )
