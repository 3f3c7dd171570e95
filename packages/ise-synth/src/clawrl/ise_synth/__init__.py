"""Intent -> Simulate -> Execute synthesis of execution-grounded multi-turn trajectories.

Stage 1 (intents): :func:`load_taxonomy` → :class:`IntentSampler` → :class:`TemplateRenderer`
or :class:`LLMRenderer` → :func:`dedup_intents` (exact + embedding near-duplicates, Vendi Score).
Stage 2 (role-locked user simulator): :class:`LLMUserSimulator` (drift detection and
regeneration); the test simulator and scripted test agent are in :mod:`clawrl.ise_synth.testing`. Stage 3 (execution):
:func:`run_session` (one podman sandbox per session, the reference harness per user turn),
:func:`synthesize` (resumable, bounded concurrency) → trajectories (:func:`build_trajectory`,
:func:`validate_trajectory`) and :func:`synthesis_report`. Checkable intents (:class:`CheckableIntentGenerator`): concrete
workspace files and execution checks, for verified trajectories and held-out evaluation
(:func:`export_bench_suite` → ``uv run bench --suite``).
"""

from clawrl.ise_synth.checkable import (
    CHECK_KINDS,
    STEP_KINDS,
    CheckableIntentGenerator,
    check_program,
    export_bench_suite,
    generate_checkable_intents,
    is_checkable,
)
from clawrl.ise_synth.dedup import DedupResult, dedup_exact, dedup_near, normalize_text
from clawrl.ise_synth.embeddings import (
    Embedder,
    SentenceTransformerEmbedder,
    TfidfEmbedder,
    default_mpnet_dir,
    fetch_mpnet,
    load_embedder,
)
from clawrl.ise_synth.errors import (
    EmbeddingError,
    ExecutionError,
    IseSynthError,
    RenderError,
    SimulatorDriftError,
    SimulatorError,
    TaxonomyError,
)
from clawrl.ise_synth.execute import (
    SessionConfig,
    SessionResult,
    requested_files,
    run_session,
    workspace_changes,
)
from clawrl.ise_synth.intents import IntentStats, dedup_intents, generate_intents
from clawrl.ise_synth.pipeline import ProxySimulatorFactory, SynthesisRun, synthesize
from clawrl.ise_synth.records import IntentRecord, load_intents, read_intents, write_intents
from clawrl.ise_synth.render import LLMRenderer, TemplateRenderer, llm_messages
from clawrl.ise_synth.rl import LLMSimulatedUserHarness, SimulatedUserHarness
from clawrl.ise_synth.sampling import DomainSelection, IntentSampler, IntentSpec
from clawrl.ise_synth.simulator import (
    AgentTurn,
    LLMUserSimulator,
    SimulatorReply,
    SimulatorTurn,
    UserSimulator,
    detect_drift,
    parse_reply,
    simulator_messages,
    summarise_tool_calls,
)
from clawrl.ise_synth.taxonomy import (
    Complexity,
    Domain,
    Persona,
    Task,
    Taxonomy,
    load_taxonomy,
)
from clawrl.ise_synth.trajectory import (
    TrajectoryError,
    append_jsonl,
    build_trajectory,
    call_shaped_text,
    read_jsonl,
    report_table,
    simulator_agreement,
    synthesis_report,
    tool_call_stats,
    validate_trajectory,
)
from clawrl.ise_synth.vendi import vendi_score, vendi_score_from_kernel

__version__ = "0.1.0"

__all__ = [
    "CHECK_KINDS",
    "STEP_KINDS",
    "AgentTurn",
    "CheckableIntentGenerator",
    "Complexity",
    "DedupResult",
    "Domain",
    "DomainSelection",
    "Embedder",
    "EmbeddingError",
    "ExecutionError",
    "IntentRecord",
    "IntentSampler",
    "IntentSpec",
    "IntentStats",
    "IseSynthError",
    "LLMRenderer",
    "LLMSimulatedUserHarness",
    "LLMUserSimulator",
    "Persona",
    "ProxySimulatorFactory",
    "RenderError",
    "SentenceTransformerEmbedder",
    "SessionConfig",
    "SessionResult",
    "SimulatedUserHarness",
    "SimulatorDriftError",
    "SimulatorError",
    "SimulatorReply",
    "SimulatorTurn",
    "SynthesisRun",
    "Task",
    "Taxonomy",
    "TaxonomyError",
    "TemplateRenderer",
    "TfidfEmbedder",
    "TrajectoryError",
    "UserSimulator",
    "__version__",
    "append_jsonl",
    "build_trajectory",
    "call_shaped_text",
    "check_program",
    "dedup_exact",
    "dedup_intents",
    "dedup_near",
    "default_mpnet_dir",
    "detect_drift",
    "export_bench_suite",
    "fetch_mpnet",
    "generate_checkable_intents",
    "generate_intents",
    "is_checkable",
    "llm_messages",
    "load_embedder",
    "load_intents",
    "load_taxonomy",
    "normalize_text",
    "parse_reply",
    "read_intents",
    "read_jsonl",
    "report_table",
    "requested_files",
    "run_session",
    "simulator_agreement",
    "simulator_messages",
    "summarise_tool_calls",
    "synthesis_report",
    "synthesize",
    "tool_call_stats",
    "validate_trajectory",
    "vendi_score",
    "vendi_score_from_kernel",
    "workspace_changes",
    "write_intents",
]
