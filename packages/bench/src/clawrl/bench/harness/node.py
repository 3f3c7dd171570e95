"""Adapters for the real npm agent harnesses: Claude Code, Codex CLI, pi and OpenClaw.

Each one follows the four steps of :class:`~clawrl.bench.harness.HarnessAdapter`:

1. ``prepare`` installs the pinned npm package once into
   ``<cache>/<name>-<version>/`` (:func:`~clawrl.bench.harness.harness_cache_dir`, the layout
   and lock of ``tools/harnesses/install.sh``, so either installs it for both) with ``npm``,
   reporting npm's output lines as progress; a ``.complete`` stamp marks a finished install;
2. ``mounts`` mounts that prefix **read-only at the same path** in the sandbox (OpenClaw's
   launcher holds absolute paths; Node 24 for OpenClaw comes from the npm ``node`` package
   inside the prefix — the sandbox only sees the host's ``/usr``, whose Debian Node is 20);
3. ``launch`` writes the harness's provider configuration into a fresh in-sandbox ``HOME``
   (``<log_dir>/home`` = ``/tmp/clawrl-harness/home``) and runs it headless against the
   rollout's proxy session (each harness's documented headless invocation, verified offline);
4. ``outcome`` reads the exit status (and Claude Code's final ``result`` event).

Facts per harness (their documentation, ``packages/proxy/tests/fixtures/harness_requests``):

=============  ==========================  ===========================  =====================
harness        wire API                    shell tool (oracle schema)   first install
=============  ==========================  ===========================  =====================
claude-code    Anthropic Messages          ``Bash`` ``{command}``       ~26 s, 384 MB
codex          OpenAI Responses            ``exec_command`` ``{cmd}``   ~18 s
pi             Chat Completions            ``bash`` ``{command}``       ~55 s
openclaw       any of the three (option)   ``exec`` ``{command}``       ~80 s, 650 MB + Node 24
=============  ==========================  ===========================  =====================

Versions are pinned in :data:`NODE_HARNESS_VERSIONS` (mirrors ``tools/harnesses/versions.json``;
a test keeps them equal) and written into results through :meth:`describe`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from clawrl.bench.harness.base import (
    HARNESS_LOG_DIR,
    HarnessAdapter,
    HarnessContext,
    HarnessInstallError,
    HarnessLaunch,
    HarnessOutcome,
    ProgressFn,
    WireAPI,
    exit_code_outcome,
    failed_exit_outcome,
)
from clawrl.bench.harness.install import CachedHarness, harness_cache_dir, run_streamed
from clawrl.bench.harness.oracle import oracle_completions, oracle_shell_command
from clawrl.bench.task import Task
from clawrl.proxy import format_assistant_text

__all__ = [
    "NODE_HARNESS_NAMES",
    "NODE_HARNESS_VERSIONS",
    "ClaudeCodeHarness",
    "CodexHarness",
    "NodeHarness",
    "OpenClawHarness",
    "PiHarness",
    "demonstration_turns",
    "scripted_oracle",
]

#: name -> npm package, version, bin (and OpenClaw's Node version); = tools/harnesses/versions.json
NODE_HARNESS_VERSIONS: dict[str, dict[str, str]] = {
    "claude-code": {"package": "@anthropic-ai/claude-code", "version": "2.1.332", "bin": "claude"},
    "openclaw": {
        "package": "openclaw",
        "version": "2026.9.6",
        "bin": "openclaw",
        "node": "24.21.0",
    },
    # codex's and pi's launchers are Node scripts; Claude Code's is a native binary
    "codex": {"package": "@openai/codex", "version": "0.171.0", "bin": "codex", "node": "24.21.0"},
    "pi": {
        "package": "@mariozechner/pi-coding-agent",
        "version": "0.73.1",
        "bin": "pi",
        "node": "24.21.0",
    },
}

#: The in-sandbox home directory of every npm harness, ``<log_dir>/home`` (fresh per rollout:
#: /tmp is per sandbox).
SANDBOX_HOME = f"{HARNESS_LOG_DIR}/home"

OpenClawAPI = Literal["openai-completions", "anthropic-messages", "openai-responses"]
_OPENCLAW_WIRE: dict[str, WireAPI] = {
    "openai-completions": "openai.chat",
    "anthropic-messages": "anthropic.messages",
    "openai-responses": "openai.responses",
}


def _home(ctx: HarnessContext) -> str:
    return f"{ctx.log_dir}/home"


def _home_env(ctx: HarnessContext) -> dict[str, str]:
    home = _home(ctx)
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "NO_COLOR": "1",
        "CI": "1",
    }


def _provider_model(ctx: HarnessContext, context_window: int, **extra: Any) -> dict[str, Any]:
    """The one model entry of a pi / OpenClaw provider (no reasoning, the output cap)."""
    return {
        "id": ctx.model,
        **extra,
        "reasoning": False,
        "contextWindow": context_window,
        "maxTokens": ctx.max_tokens or 4096,
    }


class NodeHarness(CachedHarness):
    """Shared install / mount logic of the npm harnesses (abstract: subclasses launch).

    Args:
        version: npm version (default: the pin in :data:`NODE_HARNESS_VERSIONS`).
        cache_dir: runtime cache root (default :func:`~clawrl.bench.harness.harness_cache_dir`).
        npm: the ``npm`` executable used to install (default: found on ``PATH``).
    """

    #: the harness's shell tool and its command argument (for :func:`scripted_oracle`)
    shell_tool: tuple[str, str] = ("bash", "command")

    def __init__(
        self, version: str | None = None, cache_dir: Path | None = None, npm: str | None = None
    ) -> None:
        pin = NODE_HARNESS_VERSIONS[self.key]
        self.package = pin["package"]
        self.version = version or pin["version"]
        self.bin_name = pin["bin"]
        #: the Node pinned with the harness (installed from npm into its prefix, first on its
        #: launcher's PATH), or None: the harness is a native binary. Task images (ClawGym's
        #: Python image, Harbor's) have no Node of their own.
        self.node_version: str | None = pin.get("node")
        self.cache_dir = cache_dir or harness_cache_dir()
        self.npm = npm

    @property
    def binary(self) -> Path:
        """The launcher: ``<prefix>/bin/<bin>``."""
        return self.prefix / "bin" / self.bin_name

    def _npm_install(self, say: ProgressFn, env: dict[str, str], *specs: str) -> None:
        npm = self.npm or shutil.which("npm")
        if npm is None:
            raise HarnessInstallError(f"{self.key}: `npm` is not on PATH (apt-get install npm)")
        self.prefix.mkdir(parents=True, exist_ok=True)
        pkg = self.prefix / "package.json"
        if not pkg.exists():
            pkg.write_text('{"private": true}\n')
        argv = [npm, "install", "--no-audit", "--no-fund", "--save-exact", *specs]
        say(f"{self.key}: npm install {' '.join(specs)}")
        rc, tail = run_streamed(argv, say, env=env, cwd=self.prefix)
        if rc != 0:
            raise HarnessInstallError(
                f"{self.key} install failed (npm install {' '.join(specs)}): "
                + "\n".join(tail[-5:])
            )

    @property
    def node_bin(self) -> Path:
        """The directory of the pinned Node's ``node`` in the prefix."""
        return self.prefix / "node_modules" / "node" / "bin"

    def installed(self) -> bool:
        # an install from before the harness pinned its Node has no node: install again
        node_ok = self.node_version is None or (self.node_bin / "node").exists()
        return super().installed() and node_ok

    def _install(self, say: ProgressFn) -> None:
        (self.prefix / "bin").mkdir(parents=True, exist_ok=True)
        if self.node_version is None:  # a native binary
            self._npm_install(say, dict(os.environ), f"{self.package}@{self.version}")
            link = self.prefix / "bin" / self.bin_name
            if not link.is_symlink():
                link.symlink_to(f"../node_modules/.bin/{self.bin_name}")
            return
        say(f"{self.key} {self.version}: node@{self.node_version} from npm, then {self.package}")
        self._npm_install(say, dict(os.environ), f"node@{self.node_version}")
        env = dict(os.environ)
        # install scripts may check the Node version: install with the pinned Node first
        env["PATH"] = f"{self.node_bin}:{env.get('PATH', '')}"
        self._npm_install(say, env, f"{self.package}@{self.version}")
        self.binary.write_text(
            "#!/usr/bin/env bash\n"
            f'export PATH="{self.node_bin}:$PATH"\n'
            f'exec "{self.prefix}/node_modules/.bin/{self.bin_name}" "$@"\n'
        )
        self.binary.chmod(0o755)

    def mounts(self, task: Task) -> dict[str, str]:
        return {str(self.prefix): str(self.prefix)}

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        """Exit 0 = ended by itself with a final answer."""
        return exit_code_outcome(exit_code, "final_answer")

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "package": self.package,
            "prefix": str(self.prefix),
            "node": self.node_version,
        }


# --------------------------------------------------------------------------- Claude Code


class ClaudeCodeHarness(NodeHarness):
    """Claude Code (npm ``@anthropic-ai/claude-code``), headless, Anthropic Messages.

    ``claude -p <task> --dangerously-skip-permissions --output-format stream-json --verbose
    --model <model> --max-turns <n>`` with ``ANTHROPIC_BASE_URL`` = the session's Anthropic
    URL, ``IS_SANDBOX=1`` (skipping permissions as root), no non-essential traffic, and — with
    ``lean`` (default) — the proxy-friendly extras ``CLAUDE_CODE_DISABLE_THINKING=1
    CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1 ENABLE_TOOL_SEARCH=false
    CLAUDE_CODE_ATTRIBUTION_HEADER=0`` (the last removes a per-prompt hash at the start of
    the system prompt that would break prefix sharing). ``max_tokens`` becomes
    ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``. Its stream-json output is stdout; the final
    ``result`` event gives the end (``success`` / ``error_max_turns``) and the turn count;
    a ``success`` result with ``is_error`` (exit 1: the model's answer was rejected, e.g. the
    output cap hit on every continuation attempt) counts as ended by itself
    (``error_result``).
    """

    name = "claude-code"
    key = "claude-code"
    api: WireAPI | None = "anthropic.messages"
    shell_tool = ("Bash", "command")

    def __init__(self, lean: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        self.lean = lean

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        env = _home_env(ctx)
        env.update(
            ANTHROPIC_BASE_URL=ctx.anthropic_base_url,
            ANTHROPIC_API_KEY=ctx.api_key,
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            IS_SANDBOX="1",
            DISABLE_AUTOUPDATER="1",
            # its HTTP client's limit (default 10 min) no shorter than the rollout's: on a slow
            # backend a long prefill must not turn into the harness giving up
            API_TIMEOUT_MS=str(ctx.client_timeout_s * 1000),
        )
        if self.lean:
            env.update(
                CLAUDE_CODE_DISABLE_THINKING="1",
                CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS="1",
                ENABLE_TOOL_SEARCH="false",
                CLAUDE_CODE_ATTRIBUTION_HEADER="0",
            )
        if ctx.max_tokens:
            env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(ctx.max_tokens)
        argv = [
            str(self.binary),
            "-p", ctx.task.instruction,
            "--dangerously-skip-permissions",
            "--output-format", "stream-json",
            "--verbose",
            "--model", ctx.model,
            "--max-turns", str(ctx.max_turns),
        ]  # fmt: skip
        return HarnessLaunch(
            argv=tuple(argv),
            env=env,
            workdir=ctx.task.workspace_path,
            files={f"{_home(ctx)}/.keep": ""},
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        result: dict[str, Any] = {}
        for line in stdout.splitlines():
            if line.startswith("{") and '"type":"result"' in line.replace(" ", ""):
                try:
                    result = json.loads(line)
                except json.JSONDecodeError:
                    continue
        turns = result.get("num_turns")
        turns = turns if isinstance(turns, int) else None
        sub = str(result.get("subtype") or "")
        if sub == "success" and exit_code == 0:
            return HarnessOutcome(ok=True, end_reason="final_answer", turns=turns)
        if sub == "success" and result.get("is_error"):
            # Claude Code ended by itself on a model answer it rejects (e.g. the output token
            # cap hit again after its 3 continuation attempts): a model failure, exit 1
            return HarnessOutcome(ok=True, end_reason="error_result", turns=turns)
        if sub == "error_max_turns":
            return HarnessOutcome(ok=True, end_reason="turn_limit", turns=turns)
        if exit_code == 0:
            return HarnessOutcome(ok=True, end_reason=sub or "exited", turns=turns)
        return failed_exit_outcome(exit_code, sub, turns=turns)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "lean": self.lean}


# --------------------------------------------------------------------------------- Codex


class CodexHarness(NodeHarness):
    """Codex CLI (npm ``@openai/codex``), ``codex exec``, OpenAI Responses (streamed).

    A provider ``p`` (``wire_api="responses"``, ``base_url`` = the session's OpenAI URL, key
    from ``P_KEY``) given with ``-c``; ``CODEX_HOME`` and ``HOME`` are fresh in-sandbox
    folders; ``--dangerously-bypass-approvals-and-sandbox`` (the podman sandbox is the
    sandbox) and ``--skip-git-repo-check``. Codex has no turn limit option (the runner's
    timeout applies). ``--json`` makes its event stream the stdout.
    """

    name = "codex"
    key = "codex"
    api: WireAPI | None = "openai.responses"
    shell_tool = ("exec_command", "cmd")

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        codex_home = f"{ctx.log_dir}/codex-home"
        env = _home_env(ctx)
        env.update(CODEX_HOME=codex_home, P_KEY=ctx.api_key)
        # the stream's idle limit (default 5 min) no shorter than the rollout's
        provider = (
            f'{{name="p",base_url="{ctx.openai_base_url}",env_key="P_KEY",wire_api="responses",'
            f"stream_idle_timeout_ms={ctx.client_timeout_s * 1000}}}"
        )
        argv = [
            str(self.binary),
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--json",
            "-c", "model_provider=p",
            "-c", f"model_providers.p={provider}",
            "-m", ctx.model,
        ]  # fmt: skip
        if ctx.max_tokens:
            argv += ["-c", f"model_max_output_tokens={ctx.max_tokens}"]
        argv.append(ctx.task.instruction)
        return HarnessLaunch(
            argv=tuple(argv),
            env=env,
            workdir=ctx.task.workspace_path,
            files={f"{_home(ctx)}/.keep": "", f"{codex_home}/.keep": ""},
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        turns = sum(1 for line in stdout.splitlines() if '"turn.completed"' in line) or None
        if exit_code == 0:
            return HarnessOutcome(ok=True, end_reason="final_answer", turns=turns)
        return super().outcome(exit_code, logs, stdout)


# ------------------------------------------------------------------------------------ pi


class PiHarness(NodeHarness):
    """pi (npm ``@mariozechner/pi-coding-agent``), Chat Completions (streamed), with the pinned Node.

    Provider ``clawrl`` in ``$HOME/.pi/agent/models.json`` (``api: "openai-completions"``,
    ``reasoning: false``, ``contextWindow``, ``maxTokens``); ``pi -p --provider clawrl --model
    <model> --mode json <task>``.

    Args:
        context_window: the window pi is told about (tokens).
    """

    name = "pi"
    key = "pi"
    api: WireAPI | None = "openai.chat"
    shell_tool = ("bash", "command")

    def __init__(self, context_window: int = 32768, **kw: Any) -> None:
        super().__init__(**kw)
        self.context_window = context_window

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        provider = {
            "baseUrl": ctx.openai_base_url,
            "api": "openai-completions",
            "apiKey": ctx.api_key,
            "models": [_provider_model(ctx, self.context_window)],
        }
        models = {"providers": {"clawrl": provider}}
        argv = [
            str(self.binary),
            "-p",
            "--provider", "clawrl",
            "--model", ctx.model,
            "--mode", "json",
            ctx.task.instruction,
        ]  # fmt: skip
        return HarnessLaunch(
            argv=tuple(argv),
            env=_home_env(ctx),
            workdir=ctx.task.workspace_path,
            files={f"{_home(ctx)}/.pi/agent/models.json": json.dumps(models, indent=2)},
        )


# ------------------------------------------------------------------------------ OpenClaw


class OpenClawHarness(NodeHarness):
    """OpenClaw (npm ``openclaw``) one-shot: ``openclaw agent exec --config cfg.json5 --model
    clawrl/<model> --cwd <workspace> --json <task>`` (no gateway), on Node 24 from the npm
    ``node`` package installed in the same prefix (its launcher puts it first on ``PATH``).

    Args:
        api_mode: the provider's wire API — ``openai-completions`` (Chat Completions, default),
            ``anthropic-messages`` (base URL without ``/v1``) or ``openai-responses``.
        context_window: the window OpenClaw is told about (tokens).

    Exit status: 0 ok, 1 error, 2 its own timeout. Start-up takes 40-70 s on 2 cores.
    """

    name = "openclaw"
    key = "openclaw"
    shell_tool = ("exec", "command")

    def __init__(
        self, api_mode: OpenClawAPI = "openai-completions", context_window: int = 32768, **kw: Any
    ) -> None:
        super().__init__(**kw)
        if api_mode not in _OPENCLAW_WIRE:
            raise ValueError(f"api_mode must be one of {sorted(_OPENCLAW_WIRE)}, got {api_mode!r}")
        self.api_mode = api_mode
        self.api = _OPENCLAW_WIRE[api_mode]
        self.context_window = context_window
        if api_mode != "openai-completions":
            self.name = f"openclaw-{api_mode}"

    def config(self, ctx: HarnessContext) -> dict[str, Any]:
        """The ``openclaw.json5`` of one rollout: provider ``clawrl`` + the agent defaults."""
        base = (
            ctx.anthropic_base_url if self.api_mode == "anthropic-messages" else ctx.openai_base_url
        )
        cost = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
        model = _provider_model(ctx, self.context_window, name=ctx.model, input=["text"], cost=cost)
        provider = {
            "baseUrl": base,
            "apiKey": ctx.api_key,
            "api": self.api_mode,
            "models": [model],
            # its request and first-event limits (5 min for a local model) no shorter than
            # the rollout's: a prefill queued behind others must not end the rollout
            "timeoutSeconds": ctx.client_timeout_s,
        }
        defaults = {
            "model": {"primary": f"clawrl/{ctx.model}"},
            "workspace": ctx.task.workspace_path,
        }
        return {"models": {"providers": {"clawrl": provider}}, "agents": {"defaults": defaults}}

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        cfg_path = f"{ctx.log_dir}/openclaw.json5"
        env = _home_env(ctx)
        env["OPENCLAW_STATE_DIR"] = f"{_home(ctx)}/.openclaw"
        argv = [
            str(self.binary),
            "agent",
            "exec",
            "--config", cfg_path,
            "--model", f"clawrl/{ctx.model}",
            "--cwd", ctx.task.workspace_path,
            "--json",
            # its own deadline (default 600 s) no shorter than the rollout's
            "--timeout", str(ctx.client_timeout_s),
            ctx.task.instruction,
        ]  # fmt: skip
        return HarnessLaunch(
            argv=tuple(argv),
            env=env,
            workdir=ctx.task.workspace_path,
            files={
                cfg_path: json.dumps(self.config(ctx), indent=2),
                f"{_home(ctx)}/.keep": "",
            },
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        if exit_code == 2:
            return HarnessOutcome(ok=False, end_reason="openclaw_timeout", reason="exit code 2")
        return super().outcome(exit_code, logs, stdout)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "api_mode": self.api_mode}


# ---------------------------------------------------------------------- scripted oracle


def scripted_oracle(harness: NodeHarness, task: Task, final_text: str = "Done.") -> list[str]:
    """Model turns (model-format text, for the proxy's ScriptedBackend) that make
    ``harness`` solve ``task`` through its own shell tool: one call running
    :func:`~clawrl.bench.harness.oracle_shell_command`, then a final answer.

    Raises:
        ValueError: the task has no solution.
    """
    tool, arg = harness.shell_tool
    args: dict[str, object] = {arg: oracle_shell_command(task)}
    if harness.key == "claude-code":
        args["description"] = "Run the solution"
    return [
        format_assistant_text(tool_calls=[(tool, args)]),
        format_assistant_text(content=final_text),
    ]


def demonstration_turns(
    harness: HarnessAdapter, task: Task, final_text: str = "Done."
) -> list[str]:
    """Model turns (model-format text, for the proxy's ScriptedBackend) that solve ``task``
    step by step through ``harness``'s own shell tool, one command per turn: the task's
    ``demonstration`` commands (its metadata: look, do, check — the chores family has them),
    then the harness's way to finish (mini-swe-agent's submit command; a final answer
    otherwise). A task without a demonstration gets :func:`scripted_oracle` (npm harnesses)
    or :func:`~clawrl.bench.harness.oracle_completions` (the others).

    Raises:
        ValueError: the task has neither a demonstration nor a solution.
    """
    demo = task.metadata.get("demonstration")
    if not (isinstance(demo, list) and demo and all(isinstance(c, str) for c in demo)):
        if isinstance(harness, NodeHarness):
            return scripted_oracle(harness, task, final_text)
        return oracle_completions(task, final_text)
    tool, arg = getattr(harness, "shell_tool", ("bash", "command"))
    turns = []
    for command in demo:
        args: dict[str, object] = {arg: command}
        if isinstance(harness, ClaudeCodeHarness):  # its Bash tool asks for one
            args["description"] = command.splitlines()[0][:60]
        turns.append(format_assistant_text(tool_calls=[(tool, args)]))
    finish = getattr(harness, "finish_command", None)
    if isinstance(finish, str):
        turns.append(format_assistant_text(tool_calls=[(tool, {arg: finish})]))
    else:
        turns.append(format_assistant_text(content=final_text))
    return turns


# ------------------------------------------------------------------------------ registry

#: registry name -> constructor with the defaults (used by :func:`~clawrl.bench.harness.get_harness`)
NODE_HARNESS_FACTORIES: dict[str, Callable[[], NodeHarness]] = {
    "claude-code": ClaudeCodeHarness,
    "codex": CodexHarness,
    "pi": PiHarness,
    "openclaw": OpenClawHarness,
    "openclaw-anthropic-messages": lambda: OpenClawHarness(api_mode="anthropic-messages"),
    "openclaw-openai-responses": lambda: OpenClawHarness(api_mode="openai-responses"),
}
#: the registry names of the npm harnesses
NODE_HARNESS_NAMES = tuple(NODE_HARNESS_FACTORIES)


def make_node_harness(name: str) -> NodeHarness:
    """The adapter registered as ``name`` in :data:`NODE_HARNESS_NAMES` (defaults).

    Raises:
        ValueError: unknown name.
    """
    try:
        return NODE_HARNESS_FACTORIES[name]()
    except KeyError:
        known = ", ".join(NODE_HARNESS_NAMES)
        raise ValueError(f"unknown npm harness {name!r}; known: {known}") from None
