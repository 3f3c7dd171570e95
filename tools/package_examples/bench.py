"""clawrl-bench alone (no torch): two built-in tasks through the oracle and the reference
harness, the scripted test backend on a model folder (the README example).

Usage: python bench.py MODEL_DIR  (an HF model folder, e.g. the kit's tiny model)
"""

import asyncio
import sys

from clawrl.bench import load_builtin_suite, run_rollouts
from clawrl.bench.harness import oracle_completions
from clawrl.proxy.testing import ScriptedBackend

model_dir = sys.argv[1]
tasks = [t for t in load_builtin_suite() if t.id in {"csv_to_markdown", "fix_median"}]
backend = ScriptedBackend.from_model_dir(model_dir)


async def script(session, spec):  # feed the reference harness each task's oracle as tool calls
    backend.script(session.session_id, oracle_completions(spec.task))


results = asyncio.run(
    run_rollouts(
        tasks,
        ["oracle", "reference"],
        backend=backend,
        model_dir=model_dir,
        session_hook=script,
        concurrency=2,
    )
)
for r in results:
    print(r.task_id, r.harness, r.status.value, r.reward, r.n_calls)
assert len(results) == 4 and all(r.reward == 1.0 for r in results), results
print("bench ok")
