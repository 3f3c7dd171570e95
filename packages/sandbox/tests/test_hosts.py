"""SandboxHosts on the local podman: placement by free capacity, health, exclusion.

A second podman endpoint that dies mid-run is tested end to end in
tests/test_sandbox_hosts_e2e.py.
"""

from __future__ import annotations

import pytest
from clawrl.sandbox import (
    NoSandboxHostError,
    PoolTimeoutError,
    SandboxHost,
    SandboxHostDownError,
    SandboxHosts,
    SandboxPool,
    SandboxSpec,
    SandboxSpecError,
)

from .conftest import containers_of_run


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"name": "", "capacity": 1}, "name"),
        ({"name": "a", "capacity": -1}, "capacity"),
        ({"name": "a", "capacity": True}, "capacity"),
        ({"name": "a", "capacity": 1, "url": "unix:///s", "connection": "c"}, "not both"),
        ({"name": "a", "capacity": 1, "url": "/run/podman.sock"}, "url must start"),
    ],
)
def test_bad_host_is_a_spec_error(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(SandboxSpecError, match=needle):
        SandboxHost(**kwargs)  # type: ignore[arg-type]


def test_bad_host_set_is_a_spec_error() -> None:
    with pytest.raises(SandboxSpecError, match="unique"):
        SandboxHosts([SandboxHost("a", 1), SandboxHost("a", 2)])
    with pytest.raises(SandboxSpecError, match="no capacity"):
        SandboxHosts([SandboxHost("a", 0)])
    with pytest.raises(SandboxSpecError, match="at least one"):
        SandboxHosts([])


@pytest.mark.podman
async def test_placement_by_free_capacity_and_exclusion() -> None:
    """Two names for the local podman: each sandbox goes to the host with the most free
    slots (ties: the first); full hosts make creation wait; a host marked down takes no
    more sandboxes and its sandboxes raise SandboxHostDownError; none left."""
    run_id = "hosts-place"
    async with SandboxHosts([SandboxHost("a", 1), SandboxHost("b", 2)]) as hosts:
        sbs = [await hosts.create(SandboxSpec(), run_id=run_id) for _ in range(3)]
        assert [sb.host for sb in sbs] == ["b", "a", "b"]  # type: ignore[attr-defined]
        h = {x.name: x for x in hosts.health()}
        assert (h["a"].in_use, h["a"].free, h["b"].in_use, h["b"].free) == (1, 0, 2, 0)
        with pytest.raises(PoolTimeoutError):
            await hosts.create(SandboxSpec(), run_id=run_id, wait_timeout=0.3)
        await sbs[1].destroy()  # frees a slot on a
        again = await hosts.create(SandboxSpec(), run_id=run_id, wait_timeout=5)
        assert again.host == "a"  # type: ignore[attr-defined]
        hosts.mark_down("b", "test")
        with pytest.raises(SandboxHostDownError):
            await sbs[0].exec("true")
        await sbs[0].destroy()  # never raises: the container is stranded
        b = {x.name: x for x in hosts.health()}["b"]
        assert sorted(b.stranded) == sorted([sbs[0].id, sbs[2].id]) and b.lost == 2
        await again.destroy()
        third = await hosts.create(SandboxSpec(), run_id=run_id)
        assert third.host == "a"  # type: ignore[attr-defined]
        await third.destroy()
        hosts.mark_down("a", "test")
        with pytest.raises(NoSandboxHostError):
            await hosts.create(SandboxSpec(), run_id=run_id)
        # b answers (it was only marked down): close reaps what it stranded
    assert containers_of_run(run_id) == []


@pytest.mark.podman
async def test_a_sandbox_cannot_fake_its_host_down() -> None:
    """podman's own words for an unreachable service, printed by a sandbox program that
    exits 125, only make the host be probed: it answers, stays up, the exec is a result."""
    async with SandboxHosts([SandboxHost("a", 1)]) as hosts:
        sb = await hosts.create(SandboxSpec(), run_id="hosts-fake")
        fake = "Error: unable to connect to Podman socket: connection refused"
        r = await sb.exec(f"echo '{fake}' >&2; exit 125")
        assert r.exit_code == 125 and fake.encode() in r.stderr
        assert hosts.health()[0].up and hosts.health()[0].last_ok > 0
        await sb.destroy()


@pytest.mark.podman
async def test_pool_over_hosts_reports_their_health() -> None:
    hosts = SandboxHosts([SandboxHost("a", 1), SandboxHost("b", 1)])
    async with SandboxPool(hosts=hosts, run_id="hosts-pool") as pool:
        assert pool.max_sandboxes == 2
        async with pool.sandbox() as s1, pool.sandbox() as s2:
            assert {s1.host, s2.host} == {"a", "b"}  # type: ignore[attr-defined]
            assert [h.in_use for h in pool.health()] == [1, 1]
    assert containers_of_run("hosts-pool") == []
