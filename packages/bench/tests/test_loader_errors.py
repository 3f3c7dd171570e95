"""Bad task directories raise TaskLoadError with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clawrl.bench import BenchError, TaskLoadError, load_suite, load_task

GOOD_TOML = 'id = "t1"\ninstruction = "do x"\ncategory = "systems"\ndifficulty = "easy"\n'


def builtin(root: Path, toml: str = GOOD_TOML, verifier: str | None = "check.py") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text(toml)
    if verifier:
        (root / "tests").mkdir(exist_ok=True)
        (root / "tests" / verifier).write_text("pass\n")
    return root


def clawgym(root: Path, entry: object, reward_sh: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "data_entry.json").write_text(entry if isinstance(entry, str) else json.dumps(entry))
    if reward_sh:
        (root / "reward").mkdir(exist_ok=True)
        (root / "reward" / "reward.sh").write_text("echo 0\n")
    return root


def expect_error(path: Path, fragment: str) -> TaskLoadError:
    with pytest.raises(TaskLoadError) as info:
        load_task(path)
    assert fragment in info.value.reason, info.value.reason
    assert info.value.path == path.resolve() or info.value.path == path
    assert isinstance(info.value, BenchError)
    return info.value


def test_valid_minimal_builtin(tmp_path: Path) -> None:
    task = load_task(builtin(tmp_path / "t"))
    assert task.id == "t1" and task.verifier.command == ("python3", "/tests/check.py")
    assert task.timeouts.agent_s == 600 and task.solution is None


def test_test_sh_preferred(tmp_path: Path) -> None:
    root = builtin(tmp_path / "t", verifier="test.sh")
    assert load_task(root).verifier.command == ("bash", "/tests/test.sh")


def test_not_a_directory(tmp_path: Path) -> None:
    expect_error(tmp_path / "missing", "not a directory")
    (tmp_path / "file").write_text("x")
    expect_error(tmp_path / "file", "not a directory")


def test_no_task_files(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    expect_error(tmp_path / "empty", "no task.toml")


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ("id = [", "not valid TOML"),
        ('id = ""\ninstruction = "x"\ncategory = "systems"\ndifficulty = "easy"\n', "`id`"),
        ('id = "t"\ncategory = "systems"\ndifficulty = "easy"\n', "no instruction"),
        (
            'id = "t"\ninstruction = 3\ncategory = "systems"\ndifficulty = "easy"\n',
            "must be a string",
        ),
        ('id = "t"\ninstruction = "x"\ncategory = "cooking"\ndifficulty = "easy"\n', "category"),
        (
            'id = "t"\ninstruction = "x"\ncategory = "systems"\ndifficulty = "trivial"\n',
            "difficulty",
        ),
        (GOOD_TOML + "network = 1\n", "`network`"),
        (GOOD_TOML + "colour = 'red'\n", "unknown keys"),
        (GOOD_TOML + "timeouts = 5\n", "[timeouts] must be a table"),
        (GOOD_TOML + "[timeouts]\nagent_s = -1\n", "agent_s"),
        (GOOD_TOML + "[timeouts]\nagent_s = 'long'\n", "agent_s"),
        (GOOD_TOML + "[limits]\nmemory_mb = 0\n", "memory_mb"),
        (GOOD_TOML + "[limits]\ngpus = 1\n", "gpus"),
    ],
)
def test_builtin_errors(tmp_path: Path, toml: str, fragment: str) -> None:
    expect_error(builtin(tmp_path / "t", toml), fragment)


def test_builtin_missing_verifier(tmp_path: Path) -> None:
    expect_error(builtin(tmp_path / "t", verifier=None), "no verifier")


def test_instruction_both_inline_and_file(tmp_path: Path) -> None:
    root = builtin(tmp_path / "t")
    (root / "instruction.md").write_text("also here")
    expect_error(root, "both")


def test_instruction_not_utf8(tmp_path: Path) -> None:
    root = builtin(tmp_path / "t", GOOD_TOML.replace('instruction = "do x"\n', ""))
    (root / "instruction.md").write_bytes(b"\xff\xfe bad")
    expect_error(root, "not UTF-8")


def test_harbor_errors(tmp_path: Path) -> None:
    root = tmp_path / "h"
    root.mkdir()
    (root / "task.toml").write_text("[agent]\ntimeout_sec = 10\n")
    expect_error(root, "instruction.md is missing")
    (root / "instruction.md").write_text("x")
    expect_error(root, "tests/test.sh is missing")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    expect_error(root, "timeout_sec must be a number")
    (root / "task.toml").write_text("[environment]\nallow_internet = 'yes'\n")
    expect_error(root, "allow_internet")
    (root / "task.toml").write_text("")
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM x\nCOPY ../secret /app/\n")
    expect_error(root, "COPY source")


def test_harbor_copy_of_a_missing_file_loads_the_suite(tmp_path: Path) -> None:
    """Two public Harbor tasks COPY a data file their repository lacks; the suite still
    loads (the build fails as that task's env-error) and the load notes the path."""
    suite = tmp_path / "suite"
    for name, copy in (("broken", "COPY data/access.log /workspace/access.log\n"), ("ok", "")):
        root = suite / name
        (root / "tests").mkdir(parents=True)
        (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
        (root / "instruction.md").write_text("x")
        (root / "task.toml").write_text("")
        (root / "environment").mkdir()
        (root / "environment" / "Dockerfile").write_text(f"FROM x\nWORKDIR /workspace\n{copy}")
    tasks = {t.id: t for t in load_suite(suite)}
    assert set(tasks) == {"broken", "ok"}
    assert tasks["broken"].workspace_sources == ()
    assert any("data/access.log" in n for n in tasks["broken"].notes), tasks["broken"].notes


def test_harbor_copy_outside_workdir_is_noted(tmp_path: Path) -> None:
    root = tmp_path / "h"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "instruction.md").write_text("x")
    (root / "task.toml").write_text("")
    (root / "environment").mkdir()
    (root / "environment" / "cfg.txt").write_text("c")
    (root / "environment" / "Dockerfile").write_text(
        'FROM x\nWORKDIR /srv\nWORKDIR app\nCOPY cfg.txt /etc/cfg.txt\nCOPY ["cfg.txt", "./"]\n'
    )
    task = load_task(root)
    assert task.workspace_path == "/srv/app"
    assert [s.dest for s in task.workspace_sources] == ["cfg.txt"]
    assert any("outside the workspace" in n for n in task.notes)


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("{broken", "not valid JSON"),
        ("[]", "JSON object"),
        ({"user_query": "q", "input_mount_dir": "/w"}, "`task_id`"),
        ({"task_id": "a", "input_mount_dir": "/w"}, "`user_query`"),
        ({"task_id": "a", "user_query": "  ", "input_mount_dir": "/w"}, "`user_query`"),
        ({"task_id": "a", "user_query": "q"}, "`input_mount_dir`"),
        ({"task_id": "a", "user_query": "q", "input_mount_dir": "relative"}, "absolute"),
        ({"task_id": "a", "user_query": "q", "input_mount_dir": "/w/../etc"}, "absolute"),
    ],
)
def test_clawgym_errors(tmp_path: Path, entry: object, fragment: str) -> None:
    expect_error(clawgym(tmp_path / "c", entry), fragment)


def test_clawgym_missing_reward(tmp_path: Path) -> None:
    root = clawgym(
        tmp_path / "c",
        {"task_id": "a", "user_query": "q", "input_mount_dir": "/w"},
        reward_sh=False,
    )
    expect_error(root, "reward/reward.sh is missing")


def test_suite_errors(tmp_path: Path) -> None:
    with pytest.raises(TaskLoadError, match="not a directory"):
        load_suite(tmp_path / "nope")
    (tmp_path / "suite").mkdir()
    with pytest.raises(TaskLoadError, match="no task directories"):
        load_suite(tmp_path / "suite")
    builtin(tmp_path / "suite" / "a")
    builtin(tmp_path / "suite" / "b")
    with pytest.raises(TaskLoadError, match="duplicate task id 't1'"):
        load_suite(tmp_path / "suite")
    # a broken task in a suite is reported, not skipped
    builtin(tmp_path / "suite" / "b", GOOD_TOML.replace("t1", "t2").replace("easy", "?"))
    with pytest.raises(TaskLoadError, match="difficulty"):
        load_suite(tmp_path / "suite")
