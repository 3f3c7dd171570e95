# clawrl's trusted verifier environment, read by every non-interactive bash of the
# verifier through BASH_ENV (the verifier's own files, mounted read-only).
#
# * a command the verifier's top-level script cannot find is recorded in
#   $CLAWRL_REPORT_DIR/missing-commands (a command missing in a script the tests run,
#   e.g. the agent's, is not: its shell is not the verifier's);
# * `pytest`, `python -m pytest` and `python3 -m pytest` run through clawrl's runner,
#   which starts pytest with `-I` (no working directory, no script directory, no PYTHON*
#   variables, no user site ahead of the installed packages) and `--junitxml` into
#   $CLAWRL_REPORT_DIR, and records how pytest exited.
if [ -z "${CLAWRL_VERIFIER_SHELL:-}" ]; then
    export CLAWRL_VERIFIER_SHELL=$$
fi

command_not_found_handle() {
    local where="${BASH_SOURCE[1]:-$0}: line ${BASH_LINENO[0]:-?}"
    if [ "$$" = "${CLAWRL_VERIFIER_SHELL:-}" ] && [ -n "${CLAWRL_REPORT_DIR:-}" ]; then
        mkdir -p "$CLAWRL_REPORT_DIR" 2>/dev/null \
            && printf '%s (%s)\n' "$1" "$where" >>"$CLAWRL_REPORT_DIR/missing-commands" 2>/dev/null
    fi
    printf '%s: %s: command not found\n' "$where" "$1" >&2
    return 127
}

# the interpreter of an installed `pytest` script (its shebang, or pip's /bin/sh
# trampoline), else python3, else python
_clawrl_pytest_python() {
    local real first second py=""
    real=$(type -P pytest 2>/dev/null)
    if [ -n "$real" ] && [ -r "$real" ]; then
        { IFS= read -r first; IFS= read -r second; } <"$real"
        case "$first" in
        '#!/bin/sh'*)
            py=${second#*\'exec\' \"}
            py=${py%%\"*}
            ;;
        '#!/usr/bin/env '*)
            py=${first#\#!/usr/bin/env }
            py=$(type -P "${py%% *}" 2>/dev/null)
            ;;
        '#!'*)
            py=${first#\#!}
            py=${py%% *}
            ;;
        esac
    fi
    [ -n "$py" ] && [ -x "$py" ] || py=$(type -P python3 2>/dev/null) || py=$(type -P python 2>/dev/null)
    printf '%s' "$py"
}

_clawrl_pytest() {
    local py=$1 mode=$2
    shift 2
    if [ -z "$py" ]; then
        if [ -n "${CLAWRL_REPORT_DIR:-}" ]; then
            mkdir -p "$CLAWRL_REPORT_DIR" 2>/dev/null \
                && printf '%s\n' "pytest (no Python interpreter)" >>"$CLAWRL_REPORT_DIR/missing-commands" 2>/dev/null
        fi
        echo "bash: pytest: command not found" >&2
        return 127
    fi
    "$py" -I "$CLAWRL_RUNNER" "$mode" "$@"
}

pytest() {
    _clawrl_pytest "$(_clawrl_pytest_python)" script "$@"
}

python() {
    if [ "${1:-}" = -m ] && [ "${2:-}" = pytest ]; then
        shift 2
        _clawrl_pytest "$(type -P python 2>/dev/null)" module "$@"
    else
        command python "$@"
    fi
}

python3() {
    if [ "${1:-}" = -m ] && [ "${2:-}" = pytest ]; then
        shift 2
        _clawrl_pytest "$(type -P python3 2>/dev/null)" module "$@"
    else
        command python3 "$@"
    fi
}

export -f command_not_found_handle _clawrl_pytest_python _clawrl_pytest pytest python python3
