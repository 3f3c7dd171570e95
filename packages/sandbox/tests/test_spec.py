"""Pure-Python parts: sizes, spec validation, path normalisation, tar building, rootfs, labels."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

import clawrl.sandbox as sbx
import pytest
from clawrl.sandbox.podman import conmon_dir
from clawrl.sandbox.reaper import ContainerInfo, current_identity, process_start_ticks
from clawrl.sandbox.sandbox import _build_tar
from clawrl.sandbox.spec import check_sandbox_path
from hypothesis import given
from hypothesis import strategies as st


def test_version_and_api() -> None:
    assert sbx.__version__ == "0.1.0"
    for name in sbx.__all__:
        assert hasattr(sbx, name), name


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("512m", 512 << 20),
        ("1g", 1 << 30),
        ("64K", 64 << 10),
        ("1.5GiB", 3 << 29),
        (4096, 4096),
        ("10", 10),
    ],
)
def test_parse_size(text: str | int, n: int) -> None:
    assert sbx.parse_size(text) == n


@pytest.mark.parametrize("bad", ["", "abc", "-1m", "0", 0, -5, "12q", True, 1.5])
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises(sbx.SandboxSpecError):
        sbx.parse_size(bad)  # type: ignore[arg-type]


@given(st.integers(1, 1 << 40), st.sampled_from(["", "k", "m", "g"]))
def test_parse_size_roundtrip(n: int, unit: str) -> None:
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]
    assert sbx.parse_size(f"{n}{unit}") == n * mult


@given(
    st.lists(st.sampled_from(["a", "b", "..", ".", "", "workspace", "etc"]), max_size=8),
    st.booleans(),
)
def test_sandbox_paths_never_escape(parts: list[str], absolute: bool) -> None:
    raw = ("/" if absolute else "") + "/".join(parts)
    try:
        p = check_sandbox_path(raw or ".")
    except sbx.SandboxSpecError:
        return  # rejected ('..' above the root): fine
    pp = PurePosixPath(p)
    assert pp.is_absolute() and ".." not in pp.parts and "." not in pp.parts
    if not raw.startswith("/") and ".." not in parts:
        assert p == "/workspace" or p.startswith("/workspace/")


def test_relative_paths_are_under_workspace() -> None:
    assert check_sandbox_path("a/b.txt") == "/workspace/a/b.txt"
    assert check_sandbox_path("/etc/x") == "/etc/x"
    with pytest.raises(sbx.SandboxSpecError):
        check_sandbox_path("/../../etc")


def test_spec_validation() -> None:
    with pytest.raises(sbx.SandboxSpecError):
        sbx.SandboxSpec(image="x", rootfs=Path("/tmp"))
    with pytest.raises(sbx.SandboxSpecError):
        sbx.SandboxSpec(env={"BAD-NAME": "1"})
    with pytest.raises(sbx.SandboxSpecError):
        sbx.SandboxSpec(user="root")
    with pytest.raises(sbx.SandboxSpecError):
        sbx.SandboxSpec(labels={"clawrl.run_id": "x"})
    with pytest.raises(sbx.SandboxSpecError):
        sbx.Limits(pids=2)
    with pytest.raises(sbx.SandboxSpecError):
        sbx.Limits(memory="lots")
    with pytest.raises(sbx.SandboxSpecError):
        sbx.SandboxSpec(files={"../../x": b""})


def test_spec_key_is_stable_and_content_sensitive() -> None:
    a = sbx.SandboxSpec(files={"a": b"1"}, env={"X": "1"})
    b = sbx.SandboxSpec(files={"a": b"1"}, env={"X": "1"})
    c = sbx.SandboxSpec(files={"a": b"2"}, env={"X": "1"})
    assert a.key() == b.key() != c.key()
    assert sbx.SandboxSpec().key() != sbx.SandboxSpec(limits=sbx.Limits(memory="2g")).key()


def test_exec_result_timeout_is_never_success() -> None:
    r = sbx.ExecResult(exit_code=0, stdout=b"", stderr=b"", timed_out=True, duration_s=1.0)
    assert not r.ok
    assert sbx.ExecResult(0, b"x", b"", False, 0.1).ok


def test_build_tar_places_files_and_dirs(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f.txt").write_text("deep")
    (tmp_path / "d" / "link").symlink_to("/etc/passwd")  # host symlinks are skipped
    data = _build_tar({"x/y.txt": "hi", "/etc/z": b"\x00", "tree": tmp_path / "d"}, 1000, 1000)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile(members["workspace/x/y.txt"]).read() == b"hi"  # type: ignore[union-attr]
        assert members["workspace/x"].isdir() and members["workspace/x"].uid == 1000
        assert "workspace" not in members  # top-level dirs keep their owner
        assert "workspace/tree/e/f.txt" in members
        assert not any(n.endswith("link") for n in members)
        assert members["etc/z"].size == 1


def test_default_rootfs_has_own_etc_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWRL_SANDBOX_CACHE", str(tmp_path))
    root = sbx.default_rootfs()
    assert root == sbx.default_rootfs()  # cached
    assert os.readlink(root / "bin") == "usr/bin"
    assert os.readlink(root / "lib64") == "usr/lib64"
    passwd = (root / "etc" / "passwd").read_text()
    assert passwd.startswith("root:x:0:0:") and "sandbox:x:1000:1000:" in passwd
    assert "nameserver" not in (root / "etc" / "resolv.conf").read_text()
    assert not (root / "etc" / "shadow").exists()
    for d in ("workspace", "tmp", "root", "usr", "proc"):
        assert (root / d).is_dir()
    assert list((root / "root").iterdir()) == []
    for link in (root / "etc" / "alternatives").iterdir():
        assert os.readlink(link).startswith("/usr/")


def test_identity_and_liveness() -> None:
    me = current_identity()
    assert me.pid == os.getpid() and me.start_ticks == process_start_ticks(os.getpid())
    labels = me.labels()
    assert labels["clawrl.sandbox"] == "1" and labels["clawrl.run_id"] == me.run_id
    alive = ContainerInfo("id", "n", "running", labels, 0.0)
    assert alive.owner_alive() is True
    dead_pid = dict(labels, **{"clawrl.owner_start": str(me.start_ticks + 1)})  # pid reused
    assert ContainerInfo("id", "n", "running", dead_pid, 0.0).owner_alive() is False
    rebooted = dict(labels, **{"clawrl.boot_id": "another-boot"})
    assert ContainerInfo("id", "n", "running", rebooted, 0.0).owner_alive() is False
    foreign = dict(labels, **{"clawrl.owner_host": "some-other-host"})
    assert ContainerInfo("id", "n", "running", foreign, 0.0).owner_alive() is None


def test_owned_tempdirs_of_dead_processes_are_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``kill -9`` leaves (the owner's exit never removed it) goes; the directories of
    live processes and other names stay."""
    code = (
        "import os, clawrl.sandbox as s\n"
        "d = s.owned_tempdir('clawrl-rollout-')\n"
        "open(os.path.join(d.name, 'f'), 'w').write('x')\n"
        "print(d.name, flush=True)\n"
        "os._exit(0)\n"  # no cleanup, like SIGKILL
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        check=True,
    )
    dead = Path(res.stdout.strip())
    assert dead.parent == tmp_path and (dead / "f").exists()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other = tmp_path / "clawrl-rollout-abc12345"  # no owner in the name: not ours to judge
    other.mkdir()
    reused = tmp_path / f"clawrl-px-{os.getpid()}.{process_start_ticks(os.getpid())}9-x"
    reused.mkdir()  # our pid with another start time: a dead process whose pid was reused
    with sbx.owned_tempdir("clawrl-train-px-") as live:
        assert Path(live).name.startswith(f"clawrl-train-px-{os.getpid()}.")
        assert sorted(sbx.gc_tempdirs()) == sorted([dead, reused])
        assert Path(live).is_dir() and other.is_dir() and not dead.exists()
    assert not Path(live).exists()
    assert sbx.gc_tempdirs(tmp_path) == []
    with pytest.raises(ValueError, match="prefix"):
        sbx.owned_tempdir("rollout")


def test_podman_working_directory_survives_a_wiped_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLAWRL_SANDBOX_CACHE", "rel-cache")  # a relative cache is made absolute
    first = conmon_dir()
    assert first == str(tmp_path / "rel-cache" / "conmon") and os.path.isdir(first)
    shutil.rmtree(tmp_path / "rel-cache")
    assert conmon_dir() == first and os.path.isdir(first)  # re-created, not a stale path
