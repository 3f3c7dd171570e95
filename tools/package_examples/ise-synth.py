"""clawrl-ise-synth alone (no torch): template intents, deduplicated with TF-IDF (the README
example); load_embedder("auto") falls back to TF-IDF without the vendi extra."""

from clawrl.ise_synth import (
    IntentSampler,
    TemplateRenderer,
    dedup_intents,
    generate_intents,
    load_embedder,
    load_taxonomy,
)

sampler = IntentSampler(load_taxonomy(), seed=0)  # Persona x Domain x Task x Complexity
records, failures = generate_intents(sampler, 200, TemplateRenderer())
unique, stats = dedup_intents(records, load_embedder("auto"))
print(unique[0].intent)
print(stats.unique, round(stats.vendi, 1), stats.embedding)
assert stats.unique > 0 and stats.embedding.startswith("tfidf"), stats.embedding
print("ise-synth ok")
