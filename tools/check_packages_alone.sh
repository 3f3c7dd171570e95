#!/usr/bin/env bash
# Install each workspace package alone (with only the workspace packages it depends on) into
# a fresh virtual environment and run its example (tools/package_examples/<package>.py).
# The lean packages (all but rl-core) must install without torch. Versions are pinned to
# uv.lock, so the uv cache serves every wheel. Prints each environment's size (du).
#
#   bash tools/check_packages_alone.sh [PACKAGE...]     (default: all six)
#
# Needs uv, the synced workspace (it builds the kit's tiny model with it once: the examples
# of proxy and bench serve it without torch) and podman (sandbox, bench). Set
# KEEP_VENVS=DIR to keep the environments under DIR.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
packages=("$@")
[ ${#packages[@]} -gt 0 ] || packages=(prefixtree sandbox proxy bench ise-synth rl-core)

work=${KEEP_VENVS:-$(mktemp -d /tmp/packages-alone.XXXXXX)}
mkdir -p "$work"
[ -n "${KEEP_VENVS:-}" ] || trap 'rm -rf "$work"' EXIT

# the workspace packages each one needs (itself first)
declare -A needs=(
    [prefixtree]="prefixtree"
    [sandbox]="sandbox"
    [proxy]="proxy"
    [bench]="bench proxy sandbox prefixtree"
    [ise-synth]="ise-synth bench proxy sandbox prefixtree"
    [rl-core]="rl-core prefixtree"
)
lean=" prefixtree sandbox proxy bench ise-synth "

uv export --frozen --all-packages --all-extras --no-hashes --no-emit-workspace --no-dev \
    --quiet -o "$work/constraints.txt"
model_dir=""
for p in "${packages[@]}"; do
    [ -n "${needs[$p]:-}" ] || { echo "check_packages_alone: unknown package $p" >&2; exit 2; }
    if [[ -z "$model_dir" && ( $p == proxy || $p == bench ) ]]; then
        model_dir=$(uv run --frozen --no-sync python -c \
            'from clawrl.proxy import build_default_model; print(build_default_model("byte"))')
    fi
done

for p in "${packages[@]}"; do
    venv="$work/$p"
    rm -rf "$venv"
    uv venv --quiet "$venv"
    paths=()
    for dep in ${needs[$p]}; do paths+=("$root/packages/$dep"); done
    uv pip install --quiet --python "$venv/bin/python" -c "$work/constraints.txt" "${paths[@]}"
    if [[ $lean == *" $p "* ]] && "$venv/bin/python" -c 'import torch' 2>/dev/null; then
        echo "check_packages_alone: $p pulled torch" >&2
        exit 1
    fi
    # run from the work folder: only the installed packages are importable
    (cd "$work" && "$venv/bin/python" "$root/tools/package_examples/$p.py" $model_dir)
    echo "check_packages_alone: $p ok, $(du -sh "$venv" | cut -f1) installed"
done
