"""The ``sandbox`` CLI (doctor, ls, run) and the synchronous wrapper, against real podman."""

from __future__ import annotations

import uuid

import orjson
import pytest
from clawrl.sandbox import SandboxSpec, SyncSandbox
from clawrl.sandbox.cli import main

RUN_CLI_LS = f"t-cli-ls-{uuid.uuid4().hex[:6]}"


def test_doctor_passes_here(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "[ ok ] sandbox: default rootfs create+exec+destroy" in out
    assert "[FAIL]" not in out


def test_sync_wrapper_and_ls(capsys: pytest.CaptureFixture[str]) -> None:
    with SyncSandbox(SandboxSpec(files={"a.txt": "A"}), run_id=RUN_CLI_LS) as sb:
        r = sb.exec("cat a.txt")
        assert r.ok and r.stdout == b"A"
        sb.put_file("b.txt", "B")
        assert sb.get_file("b.txt") == b"B"
        assert main(["ls", "--json"]) == 0
        rows = orjson.loads(capsys.readouterr().out)
        mine = [row for row in rows if row["run_id"] == RUN_CLI_LS]
        assert len(mine) == 1 and mine[0]["owner"] == "alive" and mine[0]["state"] == "running"
        assert main(["ls"]) == 0
        assert RUN_CLI_LS in capsys.readouterr().out
    assert main(["ls", "--json"]) == 0
    assert not [r for r in orjson.loads(capsys.readouterr().out) if r["run_id"] == RUN_CLI_LS]


def test_run_one_off(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--env", "X=42", "--", "/bin/sh", "-c", "echo x=$X; exit 3"]) == 3
    assert "x=42" in capsys.readouterr().out
    assert main(["run", "--timeout", "1", "--", "sleep", "30"]) == 124
    assert main(["run", "--env", "no-equals-sign", "--", "true"]) == 2
