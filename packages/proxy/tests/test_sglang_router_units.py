"""Fast checks of the router backend and launcher: bad arguments get typed errors before
anything starts, the router's command line, and the ``<version>@<worker>`` weight-version
tag. The real router with real workers is test_sglang_router_real.py (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.proxy import SGLangRouterBackend, launch_sglang_cluster, launch_sglang_router
from clawrl.proxy.backends.sglang import SGLangBackend
from clawrl.proxy.sglang_launcher import SGLangLaunchError
from clawrl.proxy.sglang_router_launcher import _router_command


def test_router_backend_arguments() -> None:
    with pytest.raises(ValueError, match="http"):
        SGLangRouterBackend("127.0.0.1:1")
    with pytest.raises(ValueError, match="worker_urls is empty"):
        SGLangRouterBackend("http://127.0.0.1:1", [])
    with pytest.raises(ValueError, match="health_interval_s"):
        SGLangRouterBackend("http://127.0.0.1:1", health_interval_s=0)
    b = SGLangRouterBackend("http://127.0.0.1:1/", ["http://127.0.0.1:2/"])
    assert b.router_url == "http://127.0.0.1:1" and b.workers == []


async def test_router_backend_start_fails_typed_when_nothing_answers() -> None:
    from clawrl.proxy.backends.sglang_wire import SGLangUnavailableError

    b = SGLangRouterBackend("http://127.0.0.1:1", connect_timeout=0.5)
    with pytest.raises(SGLangUnavailableError):
        await b.start()
    await b.close()


def test_launch_router_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        launch_sglang_router([])
    with pytest.raises(ValueError, match="http"):
        launch_sglang_router(["ftp://127.0.0.1:1"])
    with pytest.raises(SGLangLaunchError, match="no SGLang interpreter"):
        launch_sglang_router(["http://127.0.0.1:1"], python=tmp_path / "nope")
    with pytest.raises(ValueError, match="n_workers"):
        launch_sglang_cluster(tmp_path, 0)


def test_router_command() -> None:
    cmd = _router_command(
        Path("/env/bin/python"), ["http://a:1", "http://b:2"], "127.0.0.1", 9, "round_robin", 2, ()
    )
    assert cmd[:2] == ["/env/bin/python", "-c"] and "Router.from_args" in cmd[2]
    assert cmd[3] == "--worker-urls"
    assert cmd[4:6] == ["http://a:1", "http://b:2"]
    assert cmd[cmd.index("--policy") + 1] == "round_robin"
    assert cmd[cmd.index("--port") + 1] == "9"
    assert cmd[cmd.index("--health-check-interval-secs") + 1] == "2"


@pytest.mark.parametrize(
    ("raw", "version"),
    [("7@127.0.0.1:30000", 7), ("7", 7), ("default", 3), ("default@h:1", 3), ("x@h", -1)],
)
def test_tagged_weight_versions_parse(raw: str, version: int) -> None:
    b = SGLangBackend("http://127.0.0.1:1", initial_policy_version=3)
    assert b._parse_version(raw, -1) == version


def test_make_backend_builds_the_router_backend() -> None:
    from clawrl.proxy import BackendConfig, make_backend

    cfg = BackendConfig(
        kind="sglang",
        sglang_url="http://127.0.0.1:1",
        sglang_router=True,
        sglang_worker_urls=("http://127.0.0.1:2",),
    )
    b = make_backend(cfg)
    assert isinstance(b, SGLangRouterBackend) and b.router_url == "http://127.0.0.1:1"
    plain = make_backend(BackendConfig(kind="sglang", sglang_url="http://127.0.0.1:1"))
    assert type(plain) is SGLangBackend
