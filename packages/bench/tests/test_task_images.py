"""Task images built offline from their Dockerfiles (real podman builds, local bases), the
network policy per phase, and Harbor's limits."""

from __future__ import annotations

import asyncio
import shutil
import textwrap
import uuid
from pathlib import Path

import pytest
from clawrl.bench import (
    RolloutOptions,
    RolloutRunner,
    RolloutStatus,
    TaskLoadError,
    aggregate,
    load_task,
    plan_rollouts,
    run_rollouts,
    withhold_network,
)
from clawrl.bench.base_images import base_recipe_for
from clawrl.bench.task_image import _context_digest, rewrite_froms

FIXTURES = Path(__file__).parent / "fixtures"
SLUGIFY = FIXTURES / "harbor_slugify"


# ------------------------------------------------------------------ no podman needed


def test_froms_are_rewritten_but_stages_and_flags_kept() -> None:
    text = textwrap.dedent(
        """\
        ARG PY=3.12
        FROM --platform=linux/amd64 python:${PY}-slim AS build
        RUN echo FROM python:3.11 is not an instruction here
        FROM build
        # FROM ubuntu:22.04 (a comment)
        FROM ubuntu:22.04
        """
    )
    seen: list[str] = []

    def sub(ref: str) -> str:
        seen.append(ref)
        return f"local/{ref.replace(':', '-')}"

    out, done = rewrite_froms(text, sub)
    assert seen == ["python:3.12-slim", "ubuntu:22.04"]
    assert "FROM local/python-3.12-slim AS build\n" in out  # --platform dropped, stage kept
    assert "\nFROM build\n" in out and "FROM local/ubuntu-22.04\n" in out
    assert "RUN echo FROM python:3.11 is not an instruction here" in out
    assert done == {
        "python:3.12-slim": "local/python-3.12-slim",
        "ubuntu:22.04": "local/ubuntu-22.04",
    }


def test_context_digest_sees_directory_symlinks_and_base_ids(tmp_path: Path) -> None:
    """The image cache key changes when a symlinked directory is retargeted (``COPY`` copies
    the link) or a base image is rebuilt under the same tag, not otherwise."""
    ctx = tmp_path / "ctx"
    (ctx / "a").mkdir(parents=True)
    (ctx / "b").mkdir()
    (ctx / "a" / "f.txt").write_text("x")
    (ctx / "link").symlink_to("a", target_is_directory=True)
    recipe = "FROM localhost/base\nCOPY . /app\n"
    first = _context_digest(ctx, recipe, ["sha256:1"])
    assert _context_digest(ctx, recipe, ["sha256:1"]) == first
    assert _context_digest(ctx, recipe, ["sha256:2"]) != first
    (ctx / "link").unlink()
    (ctx / "link").symlink_to("b", target_is_directory=True)
    assert _context_digest(ctx, recipe, ["sha256:1"]) != first


@pytest.mark.parametrize(
    ("ref", "suite", "extra"),
    [
        ("python:3.11-slim", "bookworm", ()),
        ("docker.io/library/python:3.13", "bookworm", ()),
        ("node:20-bookworm", "bookworm", ("nodejs", "npm")),
        ("ubuntu:24.04", "bookworm", ()),
        ("debian:trixie-slim", "trixie", ()),
        ("alpine:3.20", "bookworm", ()),
        ("ghcr.io/some/thing:1", "bookworm", ()),
    ],
)
def test_base_recipes(ref: str, suite: str, extra: tuple[str, ...]) -> None:
    recipe = base_recipe_for(ref)
    assert recipe.suite == suite and recipe.extra_packages == extra
    assert {"python3", "python3-pip", "python3-venv", "python-is-python3", "tmux"} <= set(
        recipe.packages
    )
    assert recipe.tag.startswith(f"localhost/clawrl-base:{suite}-")


def test_harbor_limits_and_env_without_a_build() -> None:
    task = load_task(SLUGIFY)
    assert task.limits.memory_mb == 2048 and task.limits.storage_mb == 4096  # "2G", "4G"
    assert task.timeouts.build_s == 600 and task.verifier.env["SLUG_SEPARATOR"] == "-"
    # $PATH and $APP_HOME expanded (not stored literally)
    assert task.env["PATH"].startswith("/root/.local/bin:/usr/local/sbin:")
    assert task.env["PYTHONPATH"] == "/app/src"
    runner = RolloutRunner(options=None)
    (spec,) = plan_rollouts([task], ["noop"])
    sb = runner.sandbox_spec(spec, SLUGIFY)
    assert sb.limits.memory_bytes == 2048 << 20 and sb.network == "none"


@pytest.mark.parametrize(
    ("line", "network"),
    [
        ("allow_internet = true", True),
        ('network_mode = "public"', True),
        # Harbor's default: a network unless the task says otherwise
        ("", True),
        ('network_mode = "none"', False),
    ],
)
def test_harbor_network_declarations(tmp_path: Path, line: str, network: bool) -> None:
    root = tmp_path / "t"
    shutil.copytree(SLUGIFY, root)
    toml = (root / "task.toml").read_text().replace("allow_internet = false", line)
    (root / "task.toml").write_text(toml)
    assert load_task(root).network is network


@pytest.mark.parametrize("memory", ['"lots"', "true"])
def test_bad_harbor_memory_is_a_load_error(tmp_path: Path, memory: str) -> None:
    root = tmp_path / "t"
    shutil.copytree(SLUGIFY, root)
    toml = (root / "task.toml").read_text().replace('memory = "2G"', f"memory = {memory}")
    (root / "task.toml").write_text(toml)
    with pytest.raises(TaskLoadError, match="memory"):
        load_task(root)


# ------------------------------------------------------------------ real builds


@pytest.mark.podman
@pytest.mark.slow
def test_base_image_from_several_event_loops() -> None:
    """Concurrent requests for one base in one event loop, then again in a new loop (the RL
    loop and the tests run a runner per asyncio.run): a lock bound to the first loop
    deadlocked the second."""
    from clawrl.bench.base_images import ensure_base_image
    from clawrl.sandbox import Podman

    async def three() -> set[str]:
        recipe, podman = base_recipe_for("python:3"), Podman()
        tags = asyncio.gather(*(ensure_base_image(recipe, podman) for _ in range(3)))
        return set(await asyncio.wait_for(tags, 600))

    assert asyncio.run(three()) == asyncio.run(three()) == {base_recipe_for("python:3").tag}


@pytest.mark.podman
@pytest.mark.slow
def test_harbor_task_in_its_built_image_oracle_passes_noop_scores_zero() -> None:
    """FROM python:3.11-slim (no registry: the local base), RUN pip install pytest (network
    at build time), ENV with $PATH, WORKDIR, COPY inside and outside the workspace: the
    oracle passes its pytest verifier in the image, the untouched workspace scores 0, and
    the image is built once (the second batch reuses it)."""
    task = load_task(SLUGIFY)
    results = asyncio.run(run_rollouts([task], ["oracle", "noop"], concurrency=2))
    by = {r.harness: r for r in results}
    assert by["oracle"].status is RolloutStatus.OK and by["oracle"].reward == 1.0, by["oracle"]
    assert by["noop"].status is RolloutStatus.OK and by["noop"].reward == 0.0, by["noop"]
    assert "2 passed" in by["oracle"].verifier.stdout  # pytest ran, in the image
    again = asyncio.run(run_rollouts([task], ["noop"], concurrency=1))
    assert again[0].timing["image"] < 5.0  # cached by digest: no build


def _task_with(tmp_path: Path, dockerfile: str, test_sh: str, **env: str) -> Path:
    root = tmp_path / "task"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "environment" / "Dockerfile").write_text(textwrap.dedent(dockerfile))
    (root / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test_sh))
    (root / "solution" / "solve.sh").write_text(
        "#!/bin/bash\n"
        "if curl -sS -m 5 -o /dev/null https://pypi.org/simple/ 2>/dev/null;"
        " then echo net > /app/agent_net; else echo none > /app/agent_net; fi\n"
    )
    (root / "instruction.md").write_text("Nothing.\n")
    extra = "".join(f"{k} = {v}\n" for k, v in env.items())
    (root / "task.toml").write_text(f'version = "1.0"\n[environment]\n{extra}')
    return root


@pytest.mark.podman
@pytest.mark.slow
def test_failed_build_is_an_env_error_kept_out_of_scores(tmp_path: Path) -> None:
    root = _task_with(
        tmp_path,
        "FROM debian:bookworm-slim\nRUN echo about to fail && exit 3\n",
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    results = asyncio.run(run_rollouts([load_task(root)], ["noop", "noop"], concurrency=1))
    for r in results:
        assert r.status is RolloutStatus.ENV_ERROR and r.attempts == 1, r
        assert "exited" in r.reason and "about to fail" in r.reason  # the log tail
    stats = aggregate([r.scored() for r in results]).by_harness["noop"]
    assert stats.n_env_error == 2 and stats.n_scored == 0 and stats.mean_score is None


@pytest.mark.podman
@pytest.mark.slow
def test_build_step_that_cannot_reach_its_host_is_an_env_error(tmp_path: Path) -> None:
    """A real Harbor task installs Rust with ``curl … sh.rustup.rs | sh``: the pipe exits 0
    where the host is unreachable, so the build passed and the oracle then failed as if the
    agent had. The log's name-resolution failure makes it an env-error, and the image is not
    kept (a second build fails the same way instead of reusing it)."""
    from clawrl.bench.task_image import TaskImageError, build_task_image
    from clawrl.sandbox import Podman

    root = _task_with(
        tmp_path,
        f"FROM debian:bookworm-slim\n# {uuid.uuid4()}: a new image, never one left by a run\n"
        "RUN curl -sSf https://clawrl-unreachable.invalid/install.sh | sh\nWORKDIR /app\n",
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    dockerfile = root / "environment" / "Dockerfile"
    podman = Podman()
    for _ in range(2):
        with pytest.raises(TaskImageError, match="could not reach its host") as info:
            asyncio.run(build_task_image(dockerfile, dockerfile.parent, podman))
        assert "clawrl-unreachable.invalid" in info.value.reason
    (r,) = asyncio.run(run_rollouts([load_task(root)], ["noop"], concurrency=1))
    assert r.status is RolloutStatus.ENV_ERROR and "could not reach" in r.reason, r


_NET_TEST = """\
if curl -sS -m 20 -o /dev/null https://pypi.org/simple/pytest/ && [ "$(cat /app/agent_net)" = none ]
then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


@pytest.mark.podman
@pytest.mark.slow
def test_alpine_apk_add_through_the_shim(tmp_path: Path) -> None:
    """FROM alpine (a public Harbor example: RUN apk add --no-cache bash) builds on the
    Debian stand-in: apk add installs the same-named Debian packages."""
    root = _task_with(
        tmp_path,
        "FROM alpine:3.20\nRUN apk update && apk add --no-cache bash jq py3-yaml\nWORKDIR /work\n",
        "command -v jq && python3 -c 'import yaml' && echo 1 > /logs/verifier/reward.txt\n",
    )
    (r,) = asyncio.run(run_rollouts([load_task(root)], ["noop"], concurrency=1))
    assert r.status is RolloutStatus.OK and r.reward == 1.0, r


@pytest.mark.podman
@pytest.mark.slow
def test_agent_network_opt_in(tmp_path: Path) -> None:
    """``agent_network=True`` gives the agent phase of a task that declares a network the
    bridge network (the oracle's curl reaches PyPI); a task that declares none stays
    offline even then."""
    test_sh = (
        '[ "$(cat /app/agent_net)" = net ] && echo 1 > /logs/verifier/reward.txt'
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    rewards = []
    for allow in ("true", "false"):
        root = _task_with(
            tmp_path / allow, "FROM debian:bookworm-slim\nWORKDIR /app\n", test_sh,
            allow_internet=allow,
        )  # fmt: skip
        opts = RolloutOptions(agent_network=True)
        (r,) = asyncio.run(run_rollouts([load_task(root)], ["oracle"], options=opts))
        assert r.status is RolloutStatus.OK, r
        rewards.append(r.reward)
    assert rewards == [1.0, 0.0]


@pytest.mark.podman
@pytest.mark.slow
@pytest.mark.parametrize("withheld", [False, True])
def test_network_per_phase(tmp_path: Path, withheld: bool) -> None:
    """The agent phase never has a network by default (the oracle's curl fails even when
    the task allows the internet); the verifier phase has the one the task declares —
    unless the run withholds it, and then the verifier's failure is a ``verifier-error``
    naming the network, not a 0."""
    root = _task_with(
        tmp_path,
        "FROM debian:bookworm-slim\nWORKDIR /app\n",
        _NET_TEST,
        allow_internet="true",
    )
    tasks = [load_task(root)]
    if withheld:
        tasks = withhold_network(tasks)
    (r,) = asyncio.run(run_rollouts(tasks, ["oracle"], concurrency=1))
    if not withheld:
        assert r.status is RolloutStatus.OK and r.reward == 1.0, (r.reason, r.verifier)
    else:
        assert r.status is RolloutStatus.VERIFIER_ERROR, r
        assert "network, which this run withheld" in r.reason, r.reason
