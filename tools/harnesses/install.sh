#!/usr/bin/env bash
# Installs the real agent harnesses at the versions pinned in versions.json, each into its own
# cached prefix under ${CLAWRL_HARNESS_CACHE:-~/.cache/clawrl/harnesses}/<name>-<version>/.
# Idempotent: a prefix with a ".complete" stamp is reused. Prints where each binary lives.
#   bash tools/harnesses/install.sh                 # all five
#   bash tools/harnesses/install.sh codex pi        # only some
# Needs: npm (any Node for the installs), uv; network to the npm registry and PyPI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${CLAWRL_HARNESS_CACHE:-$HOME/.cache/clawrl/harnesses}"
mkdir -p "$cache"
# one installer at a time (concurrent runs would remove each other's half-made prefixes)
exec 9>"$cache/.install.lock"
flock 9

log() { printf '[harnesses] %s\n' "$*" >&2; }
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]].get(sys.argv[3], ""))' "$here/versions.json" "$1" "$2"; }

npm_install() {  # prefix, spec...
  local prefix="$1"; shift
  mkdir -p "$prefix"
  [ -f "$prefix/package.json" ] || echo '{"private": true}' >"$prefix/package.json"
  (cd "$prefix" && npm install --no-audit --no-fund --loglevel=error --save-exact "$@" >&2)
}

install_one() {
  local name="$1" pkg version bin dest t0
  pkg="$(field "$name" package)"; version="$(field "$name" version)"; bin="$(field "$name" bin)"
  dest="$cache/$name-$version"
  if [ -f "$dest/.complete" ]; then
    log "$name $version: cached at $dest"
  else
    t0=$(date +%s)
    rm -rf "$dest"
    case "$name" in
      mini-swe-agent)
        log "$name $version: uv venv on $(field "$name" python) + uv pip install (~3 min)"
        uv venv -q --python "$(field "$name" python)" "$dest/venv"
        VIRTUAL_ENV="$dest/venv" uv pip install -q "$pkg==$version"
        mkdir -p "$dest/bin"; ln -sf "../venv/bin/$bin" "$dest/bin/$bin"
        ;;
      *)
        local node; node="$(field "$name" node)"
        mkdir -p "$dest/bin"
        if [ -z "$node" ]; then  # a native binary
          log "$name $version: npm install $pkg@$version"
          npm_install "$dest" "$pkg@$version"
          ln -sf "../node_modules/.bin/$bin" "$dest/bin/$bin"
        else
          # task images have no Node: the harness brings the pinned one from the npm registry,
          # installed first (install scripts may check its version) and first on its launcher's PATH
          log "$name $version: node@$node from the npm registry, then $pkg"
          npm_install "$dest" "node@$node"
          PATH="$dest/node_modules/node/bin:$PATH" npm_install "$dest" "$pkg@$version"
          cat >"$dest/bin/$bin" <<WRAP
#!/usr/bin/env bash
export PATH="$dest/node_modules/node/bin:\$PATH"
exec "$dest/node_modules/.bin/$bin" "\$@"
WRAP
          chmod +x "$dest/bin/$bin"
        fi
        ;;
    esac
    touch "$dest/.complete"
    log "$name $version: installed in $(( $(date +%s) - t0 )) s ($(du -sh "$dest" | cut -f1))"
  fi
  printf '%s\t%s\t%s\n' "$name" "$version" "$dest/bin/$bin"
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(claude-code openclaw codex pi mini-swe-agent)
for n in "${names[@]}"; do install_one "$n"; done
