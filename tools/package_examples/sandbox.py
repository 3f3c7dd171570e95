"""clawrl-sandbox alone: a podman workspace, a command, files in and out (the README example)."""

import asyncio

from clawrl.sandbox import Limits, Sandbox, SandboxSpec


async def main() -> None:
    spec = SandboxSpec(
        files={"task.md": "Count the lines of data.txt", "data.txt": "a\nb\nc\n"},
        limits=Limits(memory="512m", cpus=1, pids=256, workspace_size="64m"),
    )
    async with await Sandbox.create(spec) as sb:
        r = await sb.exec("wc -l < data.txt", timeout=10)
        assert (r.exit_code, r.stdout) == (0, b"3\n"), r
        await sb.put_file("answer.txt", r.stdout)
        assert await sb.get_file("/workspace/answer.txt") == b"3\n"
    print("sandbox ok")


asyncio.run(main())
