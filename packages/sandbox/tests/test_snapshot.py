"""snapshot_state / restore_state: what a used sandbox changed against its image (its
writable root's overlay layer, its tmpfs places), restored into a fresh sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.sandbox import Sandbox, SandboxSpec, restore_state, snapshot_state

pytestmark = pytest.mark.podman

CHANGE = r"""
set -e
echo hi > /etc/newfile
chmod 640 /etc/newfile && chown 1000:1000 /etc/newfile
rm /etc/shells
ls /etc/alternatives | head -1 > /tmp/had
rm -rf /etc/alternatives && mkdir /etc/alternatives && touch /etc/alternatives/only
mkdir -p /opt/zz && ln -s /etc/newfile /opt/zz/link
touch "/opt/zz/$(printf 'n\377m')"
mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt
mkdir -p /opt/mine && echo x > /opt/mine/own
echo key > /root/.key
"""

CHECK = r"""
set -e
[ "$(cat /etc/newfile)" = hi ]
[ "$(stat -c '%a %u:%g' /etc/newfile)" = "640 1000:1000" ]
[ ! -e /etc/shells ]
[ "$(ls /etc/alternatives)" = only ]
[ "$(readlink /opt/zz/link)" = /etc/newfile ]
[ -e "/opt/zz/$(printf 'n\377m')" ]
[ ! -e /logs/verifier/reward.txt ]
[ ! -e /opt/mine ]
[ "$(cat /root/.key)" = key ]
echo restored
"""


async def test_a_used_sandbox_is_restored_into_a_fresh_one(tmp_path: Path) -> None:
    """Added, changed (mode, owner), deleted entries, a directory removed and made again
    (the image's entries stay gone), a symlink, a name that is not UTF-8 and the home
    directory's files are restored; an ``exclude`` path is listed but not restored, an
    ``ignore`` path neither."""
    spec = SandboxSpec(read_only_root=False)
    async with await Sandbox.create(spec) as sb:
        res = await sb.exec(["sh", "-c", CHANGE])
        assert res.exit_code == 0, res
        had = (await sb.get_file("/tmp/had")).decode().strip()
        assert had  # the image's /etc/alternatives held entries
        await sb.kill_all()
        state = await snapshot_state(
            sb,
            tmp_path / "s.tar",
            places=("/root",),
            exclude=("/logs/verifier",),
            ignore=("/opt/mine",),
        )
    changes = set(state.changes)
    assert {
        ("A", "/etc/newfile"),
        ("D", "/etc/shells"),
        ("A", "/opt/zz/link"),
        ("A", "/opt/zz/n\\xffm"),
        ("A", "/logs/verifier/reward.txt"),
        ("A", "/root/.key"),
    } <= changes, changes
    assert not any(p.startswith("/opt/mine") for _, p in changes)
    assert "/etc/alternatives" in state.deleted
    async with await Sandbox.create(spec) as fresh:
        assert await restore_state(fresh, state) == ""
        res = await fresh.exec(["sh", "-c", CHECK])
        assert res.exit_code == 0 and res.text.strip() == "restored", res
