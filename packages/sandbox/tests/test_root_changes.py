"""root_changes on a writable root: the root lives on a size-capped tmpfs overlay that
``podman diff`` cannot see, so the changes are read from that overlay's upper directory."""

from __future__ import annotations

import pytest
from clawrl.sandbox import Sandbox, SandboxSpec, root_changes

pytestmark = pytest.mark.podman


async def test_root_changes_of_a_capped_writable_root_are_seen() -> None:
    sb = await Sandbox.create(SandboxSpec(read_only_root=False))
    try:
        assert (await root_changes(sb)).all() == []
        res = await sb.exec(
            [
                "sh",
                "-c",
                "echo hi > /etc/newfile && rm /etc/shells && mkdir -p /opt/zz && touch /opt/zz/a"
                " && echo tmp > /tmp/not-root",
            ]
        )
        assert res.exit_code == 0, res
        changes = await root_changes(sb)
        assert "/etc/newfile" in changes.added
        assert "/opt/zz/a" in changes.added
        assert "/etc/shells" in changes.deleted
        assert "/etc" in changes.changed
        # /tmp is a tmpfs place of its own, not part of the root
        assert not any(p.startswith("/tmp") for _, p in changes.all())
    finally:
        await sb.destroy()
