"""``[[sandbox_hosts]]`` in a bench configuration: podman hosts of the agent sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench.config import ConfigError, load_config
from clawrl.sandbox import SandboxHost


def test_sandbox_hosts_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(
        """
[[sandbox_hosts]]
name = "local"
capacity = 2
[[sandbox_hosts]]
name = "box2"
capacity = 16
url = "ssh://root@box2/run/podman/podman.sock"
model_socket = "/run/clawrl-relay/model.sock"
[[sandbox_hosts]]
name = "box3"
capacity = 0
connection = "box3"
"""
    )
    cfg = load_config(path)
    assert [h.host() for h in cfg.sandbox_hosts] == [
        SandboxHost("local", 2),
        SandboxHost(
            "box2",
            16,
            url="ssh://root@box2/run/podman/podman.sock",
            model_socket=Path("/run/clawrl-relay/model.sock"),
        ),
        SandboxHost("box3", 0, connection="box3"),
    ]
    assert load_config().sandbox_hosts == []  # default: the local podman only


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ('name = "a"\ncapacity = 1\nurl = "x"\nconnection = "c"', "not both"),
        ('name = "a"\ncapacity = 1\nurl = "http://h"', "url must start"),
        ('name = "a b"\ncapacity = 1', "name must match"),
        ('name = "a"\ncapacity = -1', "capacity"),
        ('name = "a"', "capacity"),
        ('name = "a"\ncapacity = 1\nport = 3', "port"),
        ('name = "a"\ncapacity = 1\n[[sandbox_hosts]]\nname = "a"\ncapacity = 1', "unique"),
        ('name = "a"\ncapacity = 0', "no capacity"),
    ],
)
def test_bad_sandbox_host_is_a_config_error(tmp_path: Path, table: str, needle: str) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(f"[[sandbox_hosts]]\n{table}\n")
    with pytest.raises(ConfigError, match="sandbox_hosts") as info:
        load_config(path)
    assert needle in str(info.value)
