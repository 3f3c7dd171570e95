"""clawrl-proxy alone (no torch): ``proxy serve`` with the scripted backend on a model folder,
one OpenAI-style chat call over the unix socket, its call record read back.

Usage: python proxy.py MODEL_DIR  (an HF model folder, e.g. the kit's tiny model)
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from clawrl.proxy import AdminClient, format_assistant_text

model_dir = sys.argv[1]
tmp = Path(tempfile.mkdtemp(prefix="proxy-alone-"))
model_sock, admin_sock = tmp / "model.sock", tmp / "admin.sock"
proxy_bin = Path(sys.executable).parent / "proxy"
server = subprocess.Popen(
    [
        str(proxy_bin),
        "serve",
        "--model",
        model_dir,
        "--backend",
        "scripted",
        "--socket",
        str(model_sock),
        "--admin-socket",
        str(admin_sock),
        "--capture-dir",
        str(tmp / "capture"),
    ]
)
try:
    deadline = time.monotonic() + 60
    while not (model_sock.exists() and admin_sock.exists()):
        assert server.poll() is None, "proxy serve exited"
        assert time.monotonic() < deadline, "proxy serve did not come up in 60 s"
        time.sleep(0.2)
    with AdminClient(socket=str(admin_sock)) as admin:
        s = admin.create_session(run_id="demo", task_id="t1", harness="httpx")
        admin.script(
            s.session_id, [format_assistant_text(tool_calls=[("bash", {"command": "ls"})])]
        )
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(model_sock))) as http:
            r = http.post(
                f"{s.openai_base_url}/chat/completions",
                headers={"Authorization": f"Bearer {s.api_key}"},
                json={
                    "model": "tiny",
                    "messages": [{"role": "user", "content": "hi"}],
                    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
                },
                timeout=60,
            )
        r.raise_for_status()
        call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        assert call["name"] == "bash", call
        (rec,) = admin.records(s.session_id)
        assert rec["completion_ids"], rec
    print("proxy ok:", call)
finally:
    server.terminate()
    server.wait(timeout=30)
