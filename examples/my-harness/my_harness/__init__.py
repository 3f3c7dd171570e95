"""A harness for clawrl: runs ``agent.sh`` (next to this file) in each rollout's sandbox."""

from pathlib import Path

from clawrl.bench.harness import HarnessAdapter, HarnessContext, HarnessLaunch

AGENT = Path(__file__).with_name("agent.sh")


class ShellAgent(HarnessAdapter):
    name = "shell-agent"  # the name results and reports use

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        # every file a launch writes goes under ctx.log_dir (in the sandbox)
        agent, task = f"{ctx.log_dir}/agent.sh", f"{ctx.log_dir}/task.md"
        return HarnessLaunch(
            argv=("bash", agent),
            env={
                "OPENAI_BASE_URL": ctx.openai_base_url,  # this rollout's proxy session
                "OPENAI_API_KEY": ctx.api_key,
                "MODEL": ctx.model,
                "MAX_TURNS": str(ctx.max_turns),
                "TASK_FILE": task,
            },
            workdir=ctx.task.workspace_path,
            files={agent: AGENT, task: ctx.task.instruction},
        )
