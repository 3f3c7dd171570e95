#!/usr/bin/env bash
# Installs what clawrl and its tests need on a fresh Debian/Ubuntu machine, then syncs the
# uv workspace. Idempotent: every step is skipped when already done.
#   bash tools/setup.sh            # system packages (as root) + uv + `uv sync --locked`
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*"; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

# --- system packages: podman + runc for sandboxes (crun fails on hybrid-cgroup hosts) ---
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
# sandboxes on other podman hosts reach the model through socat relays (packages/sandbox
# README, "Sandboxes on several hosts"; tests/test_sandbox_hosts_e2e.py)
command -v socat >/dev/null 2>&1 || need+=(socat)
# podman --init (the sandboxes' PID 1, reaps orphans) needs catatonit
[ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
# the SGLang installer (tools/sglang/install.sh) builds a stub libcuda with cc and nm
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v nm >/dev/null 2>&1 || need+=(binutils)
# sandboxes see the host's /usr: the reference harness, mini-swe-agent's venv and most task
# checks run /usr/bin/python3 (with sqlite3); fix_js_cart's oracle and checks run
# /usr/bin/node; the npm harnesses' tests (tests/test_harness_node_real.py, skipped without npm)
# install them with npm; tools/harnesses/install.sh takes its lock with flock
[ -x /usr/bin/python3 ] || need+=(python3)
[ -x /usr/bin/node ] || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
# bench's viewer tests (packages/bench/tests/test_view*.py) drive Debian's headless Chromium
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
# uv is installed with pip when missing
command -v uv >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    log "installing ${need[*]} (apt-get)"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
  else
    log "WARNING: please install ${need[*]} with your package manager"
  fi
fi

# --- uv ---
if ! command -v uv >/dev/null 2>&1; then
  log "installing uv (pip)"
  # Debian 12+ marks its python3 externally managed (PEP 668): plain pip refuses there
  python3 -m pip install -q uv 2>/dev/null || python3 -m pip install -q --break-system-packages uv
fi

log "uv sync --locked"
uv sync --locked

# --- the local base of task images (bench builds Harbor Dockerfiles offline, their FROM
# replaced by it): debootstrap from the Debian mirror, ~1.5 min once; podman keeps it
if [ "$(id -u)" = 0 ] && command -v debootstrap >/dev/null 2>&1; then
  log "local task base image (python:3 stand-in)"
  uv run --no-sync python -c 'import sys; from clawrl.bench.base_images import main; sys.exit(main(["python:3"]))' \
    || log "WARNING: the local task base did not build (bench builds it on first use)"
fi
