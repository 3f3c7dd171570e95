"""Intent -> Simulate -> Execute synthesis of execution-grounded multi-turn trajectories.

Stage 1 (intents): :func:`load_taxonomy` → :class:`IntentSampler` → :class:`TemplateRenderer`
or :class:`LLMRenderer` → :func:`dedup_intents` (exact + embedding near-duplicates, Vendi Score).
"""

from clawrl.ise_synth.dedup import DedupResult, dedup_exact, dedup_near, normalize_text
from clawrl.ise_synth.embeddings import (
    Embedder,
    SentenceTransformerEmbedder,
    TfidfEmbedder,
    default_mpnet_dir,
    fetch_mpnet,
    load_embedder,
)
from clawrl.ise_synth.errors import EmbeddingError, IseSynthError, RenderError, TaxonomyError
from clawrl.ise_synth.intents import IntentStats, dedup_intents, generate_intents
from clawrl.ise_synth.records import IntentRecord, read_intents, write_intents
from clawrl.ise_synth.render import LLMRenderer, TemplateRenderer, llm_messages
from clawrl.ise_synth.sampling import DomainSelection, IntentSampler, IntentSpec
from clawrl.ise_synth.taxonomy import (
    Complexity,
    Domain,
    Persona,
    Task,
    Taxonomy,
    load_taxonomy,
)
from clawrl.ise_synth.vendi import entropy_exp, vendi_score, vendi_score_from_kernel

__version__ = "0.1.0"

__all__ = [
    "Complexity",
    "DedupResult",
    "Domain",
    "DomainSelection",
    "Embedder",
    "EmbeddingError",
    "IntentRecord",
    "IntentSampler",
    "IntentSpec",
    "IntentStats",
    "IseSynthError",
    "LLMRenderer",
    "Persona",
    "RenderError",
    "SentenceTransformerEmbedder",
    "Task",
    "Taxonomy",
    "TaxonomyError",
    "TemplateRenderer",
    "TfidfEmbedder",
    "__version__",
    "dedup_exact",
    "dedup_intents",
    "dedup_near",
    "default_mpnet_dir",
    "entropy_exp",
    "fetch_mpnet",
    "generate_intents",
    "llm_messages",
    "load_embedder",
    "load_taxonomy",
    "normalize_text",
    "read_intents",
    "vendi_score",
    "vendi_score_from_kernel",
    "write_intents",
]
