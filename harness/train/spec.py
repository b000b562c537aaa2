"""``TrainSpec``: every option that changes what a training run produces.

A spec is plain data: it is built from dicts (YAML presets, suite files, CLI
overrides), validated here, hashed for caches, and saved next to the checkpoints so
that a resumed run can refuse a changed configuration.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError

SIMILARITIES = ("cos", "dot")
SCHEDULES = ("cosine", "linear", "constant")
SAMPLINGS = ("homogeneous", "mixed")
PRECISIONS = ("fp32", "bf16", "fp16")
FILL_NEGATIVES = ("random", "mask")
DEFAULT_INSTRUCTION_TEMPLATE = "Instruct: {prompt}\nQuery: {text}"
# What a smoke run may cap (``TrainSpec.limits``): the recipe is otherwise unchanged.
LIMIT_KEYS = ("steps", "batch_size", "query_max_length", "doc_max_length")


@dataclass
class LoraSpec:
    """LoRA adapters through ``peft`` (rank, scaling alpha, dropout, target module names)."""

    r: int = 8
    alpha: int = 32
    dropout: float = 0.1
    target_modules: list[str] | str | None = None   # None: peft's default for the architecture
    merge_on_save: bool = False                      # final export: merged full model instead of an adapter folder


@dataclass
class TrainSpec:
    """A training run, end to end.  Field groups:

    Model and encoding
        ``model``: name/alias/path of the backbone; ``pooling`` (cls/mean/last) and
        ``normalize`` default to the model's own defaults when None; ``append_eos``
        (None: True for last-token pooling); ``query_max_length``/``doc_max_length``.
    Prompts
        ``use_instructions``: prefix queries with the source's instruction in
        ``instruction_template``; ``symmetric_doc_prompt``: documents of symmetric
        sources get the same prefix (the tDRO code, METHODS.md 0.2).
    Loss
        InfoNCE with ``similarity`` (cos/dot) / ``temperature``, ``n_hard_negatives``
        per query, ``in_batch_negatives``, ``cross_batch_negatives`` (gathered across
        ranks); ``fill_negatives`` says what to do when a row has fewer hard negatives
        than needed and none at all: draw random positives of other rows of the same
        source ("random") or mask the slot out of the softmax ("mask").
    Batching
        ``batch_size`` queries per optimizer step over all ranks,
        ``grad_accum`` micro-batches per step; ``sampling`` = "homogeneous" (one
        source per global micro-batch) or "mixed" (per-example); ``dataset_weights``
        (None: the method decides, uniform for the baseline).
    Optimisation
        AdamW ``lr``, ``weight_decay``, ``adam_betas``, ``adam_eps``, ``max_grad_norm``
        (0 = no clipping); ``schedule`` with ``warmup_steps`` and ``min_lr_ratio``;
        ``dropout`` (True: the model trains in train mode, its dropout active, as standard
        fine-tuning does; False: eval mode throughout, e.g. COCO's default).
    Memory and precision
        ``precision`` (fp32/bf16/fp16 autocast; the low precisions need a GPU),
        ``gradient_checkpointing``, ``gradcache_chunk_size`` (None = no gradient cache),
        ``lora`` (None = full fine-tuning).
    Bookkeeping
        ``steps``, ``seed``, ``save_every`` (0 = only at the end), ``save_initial`` (also a checkpoint of
        step 0, the model before any training step: the start of a learning curve), ``keep_checkpoints``,
        ``log_every``, ``tensorboard``, ``progress``; ``method_options`` for the method.
    Smoke runs
        ``limits`` (None: none): caps on ``steps``, ``batch_size``, ``query_max_length`` and
        ``doc_max_length`` applied to the resolved recipe (a suite's smoke scale: the paper recipe on a
        tiny stand-in); warmup keeps its share of the steps, ``grad_accum`` is kept where the capped batch
        allows, and every stage a method trains first inherits the same caps.
    """

    model: str = "minilm"
    pooling: str | None = None
    normalize: bool | None = None
    append_eos: bool | None = None
    query_max_length: int = 128
    doc_max_length: int = 512

    use_instructions: bool = True
    instruction_template: str = DEFAULT_INSTRUCTION_TEMPLATE
    symmetric_doc_prompt: bool = True

    similarity: str = "cos"
    temperature: float = 0.002
    n_hard_negatives: int = 1
    in_batch_negatives: bool = True
    cross_batch_negatives: bool = True
    fill_negatives: str = "random"

    batch_size: int = 2048
    grad_accum: int = 1
    sampling: str = "homogeneous"
    dataset_weights: dict[str, float] | None = None

    steps: int = 1000
    lr: float = 1e-4
    schedule: str = "cosine"
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    dropout: bool = True

    precision: str = "bf16"
    gradient_checkpointing: bool = True
    gradcache_chunk_size: int | None = None
    lora: LoraSpec | None = None

    seed: int = 42
    save_every: int = 0
    save_initial: bool = False
    keep_checkpoints: int = 2
    log_every: int = 1
    tensorboard: bool = False
    progress: bool = True
    method_options: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, int] | None = None

    # Fields that do not change the trained weights (excluded from the hash).
    NON_RESULT_FIELDS = ("save_every", "save_initial", "keep_checkpoints", "log_every", "tensorboard", "progress")

    def __post_init__(self) -> None:
        # Types first: a string where a number belongs would otherwise surface as a TypeError
        # deep in validate() or in the trainer.
        for f in dataclasses.fields(self):
            setattr(self, f.name, _coerce(getattr(self, f.name), _hints(TrainSpec)[f.name]))
        problems = field_problems({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if problems:
            raise ConfigError("train spec: " + "; ".join(f"{key}: {msg}" for key, msg in problems))
        if isinstance(self.lora, Mapping):
            self.lora = LoraSpec(**_known(LoraSpec, dict(self.lora), "lora"))
        if isinstance(self.adam_betas, list):
            self.adam_betas = tuple(self.adam_betas)
        if self.limits:
            self._apply_limits(self.limits)
        self.validate()

    def _apply_limits(self, limits: Mapping[str, int]) -> None:
        """Cap the recipe for a smoke run (idempotent: a capped spec stays as it is)."""
        unknown = sorted(set(limits) - set(LIMIT_KEYS))
        if unknown:
            raise ConfigError(f"train spec: limits: unknown {', '.join(unknown)} (limits cap {', '.join(LIMIT_KEYS)})")
        bad = [k for k, v in limits.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1]
        if bad:
            raise ConfigError(f"train spec: limits: {', '.join(bad)} must be positive integers")
        steps = limits.get("steps")
        if steps is not None and self.steps > steps:
            # the schedule keeps its shape: warmup stays the same share of the steps
            share = round(self.warmup_steps * steps / self.steps)
            self.warmup_steps = min(steps, max(share, 1) if self.warmup_steps else 0)
            self.steps = steps
        batch = limits.get("batch_size")
        if batch is not None and self.batch_size > batch:
            self.grad_accum = min(self.grad_accum, batch)
            self.batch_size = batch - batch % self.grad_accum
        for name in ("query_max_length", "doc_max_length"):
            cap = limits.get(name)
            if cap is not None:
                setattr(self, name, min(getattr(self, name), cap))

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"train spec: {msg}")

        need(self.similarity in SIMILARITIES, f"similarity must be one of {SIMILARITIES}, got {self.similarity!r}")
        need(self.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        need(self.sampling in SAMPLINGS, f"sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        need(self.precision in PRECISIONS, f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        need(self.fill_negatives in FILL_NEGATIVES, f"fill_negatives must be one of {FILL_NEGATIVES}")
        need(self.pooling in (None, "cls", "mean", "last"), f"pooling must be cls, mean or last, got {self.pooling!r}")
        need(self.temperature > 0, "temperature must be > 0")
        need(self.n_hard_negatives >= 0, "n_hard_negatives must be >= 0")
        need(self.batch_size >= 1 and self.grad_accum >= 1, "batch_size and grad_accum must be >= 1")
        need(self.batch_size % self.grad_accum == 0,
             f"batch_size {self.batch_size} is not divisible by grad_accum {self.grad_accum}")
        need(self.steps >= 1, "steps must be >= 1")
        need(0 <= self.warmup_steps <= self.steps, "warmup_steps must be in [0, steps]")
        need(0.0 <= self.min_lr_ratio <= 1.0, "min_lr_ratio must be in [0, 1]")
        need(self.lr > 0, "lr must be > 0")
        need(self.query_max_length >= 2 and self.doc_max_length >= 2, "max lengths must be >= 2")
        need(self.gradcache_chunk_size is None or self.gradcache_chunk_size >= 1, "gradcache_chunk_size must be >= 1")
        need(self.save_every >= 0 and self.keep_checkpoints >= 1, "save_every >= 0 and keep_checkpoints >= 1")
        need("{text}" in self.instruction_template, "instruction_template must contain {text}")
        if self.dataset_weights is not None:
            need(all(w >= 0 for w in self.dataset_weights.values()), "dataset_weights must be >= 0")
            need(sum(self.dataset_weights.values()) > 0, "dataset_weights must not all be 0")

    def micro_batch_size(self, world_size: int = 1) -> int:
        """Queries per rank per micro-batch."""
        global_micro = self.batch_size // self.grad_accum
        if global_micro % world_size:
            raise ConfigError(f"train spec: batch_size/grad_accum = {global_micro} is not divisible by "
                              f"{world_size} processes")
        return global_micro // world_size

    # ---------------------------------------------------------------- (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["adam_betas"] = list(self.adam_betas)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainSpec:
        return cls(**_known(cls, dict(data), "train spec"))

    def replace(self, **changes: Any) -> TrainSpec:
        """A copy with ``changes`` applied (nested ``lora`` dicts merge into the current one)."""
        data = self.to_dict()
        for key, value in changes.items():
            if key == "lora" and isinstance(value, Mapping) and data.get("lora"):
                data["lora"] = {**data["lora"], **value}
            elif key == "method_options" and isinstance(value, Mapping):
                data["method_options"] = {**data["method_options"], **value}
            else:
                data[key] = value
        return TrainSpec.from_dict(data)

    def config_dict(self) -> dict[str, Any]:
        """The fields that change the trained weights, as written (model paths kept): what a method
        hands on as the spec of a run it depends on (tDRO's reference), loadable again."""
        out = self.to_dict()
        for key in self.NON_RESULT_FIELDS:
            out.pop(key, None)
        if out.get("limits") is None:        # only smoke runs have limits: every other key stays as it was
            out.pop("limits", None)
        return out

    def result_dict(self) -> dict[str, Any]:
        """:meth:`config_dict` for keys: every local model folder in it (the spec's own, and those of
        specs nested in ``method_options``) stands as the digest of its files (:func:`model_identity`),
        so cache keys do not depend on where a model lies (the cache directory of a synthetic model,
        a user's checkout)."""
        return _with_model_identities(self.config_dict())

    def fingerprint(self) -> str:
        """Hash of every field that changes the trained weights."""
        text = json.dumps(self.result_dict(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:24]


# Keys naming a model in a spec or in method options (tDRO's proxy/reference models and nested specs).
MODEL_KEYS = ("model", "proxy_model", "reference_model")
# Method options listing corpora a method reads itself (COCO's pretraining corpora): keyed by content.
CORPUS_KEYS = ("corpora",)


def _with_model_identities(value: Any) -> Any:
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if k in MODEL_KEYS and isinstance(v, str):
                out[k] = model_identity(v)
            elif k in CORPUS_KEYS and isinstance(v, (list, tuple)):
                out[k] = [corpus_identity(c) if isinstance(c, str) else _with_model_identities(c) for c in v]
            else:
                out[k] = _with_model_identities(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_with_model_identities(v) for v in value]
    return value


def corpus_identity(corpus: str) -> str:
    """A local corpus (a BEIR-layout folder or its ``corpus.jsonl[.gz]``): ``corpus:<digest>`` of the corpus
    file's bytes (remembered like model files), so keys follow the documents, not the path; a path that does
    not exist (an unset placeholder in a dry run) stays as written.  A re-compressed ``.gz`` file of the same
    documents gets another digest (its header holds a time): a new key, never a wrong shared one."""
    path = Path(str(corpus)).expanduser()
    try:
        local = path.exists()
    except OSError:
        local = False
    if not local:
        return str(corpus)
    from harness.data.beir import find_file  # lazy (start-up speed): imports numpy
    from harness.encoders.backbone import file_digest  # lazy (start-up speed): imports numpy, torch, tqdm

    file = path if path.is_file() else find_file(path, "corpus.jsonl")
    return f"corpus:{file_digest(file)[:24]}"


def model_identity(model: str) -> str:
    """A local model folder or file: its content fingerprint (``local:<digest>``, every byte hashed, digests
    remembered in the harness cache); a name (alias, hub id, ``bm25``) stays as written, since resolving it
    would make keys depend on the installation or on what the hub cache holds."""
    path = Path(str(model)).expanduser()
    try:
        local = path.exists()
    except OSError:  # a name too long or odd for the file system is a name
        local = False
    if not local:
        return str(model)
    from harness.encoders.backbone import model_fingerprint  # lazy (start-up speed): imports numpy, torch, tqdm

    return model_fingerprint(str(path))


def _known(cls, data: dict[str, Any], what: str) -> dict[str, Any]:
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        hints = "".join(f" ({u!r}: did you mean {s!r}?)" for u in unknown if (s := closest(u, names)))
        raise ConfigError(f"{what}: unknown option(s) {', '.join(unknown)}{hints}; known: {', '.join(sorted(names))}")
    return data


# ----------------------------------------------------------------------------- field types

def closest(name: str, known: typing.Iterable[str]) -> str | None:
    """The known name most like ``name`` (difflib), or None when nothing is close."""
    match = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.6)
    return match[0] if match else None


@functools.cache
def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def field_problems(data: Mapping[str, Any], cls: type = TrainSpec) -> list[tuple[str, str]]:
    """``(key, problem)`` for every unknown key of ``data`` and every value of the wrong type for the
    dataclass ``cls`` (TrainSpec by default; nested ``lora`` mappings are checked against LoraSpec).
    Nothing is raised, so a caller can report every problem of a file at once."""
    hints = _hints(cls)
    problems: list[tuple[str, str]] = []
    for key, value in data.items():
        if key not in hints:
            suggestion = closest(key, hints)
            problems.append((str(key), "unknown option" + (f" (did you mean {suggestion!r}?)" if suggestion else "")))
            continue
        tp = hints[key]
        value = _coerce(value, tp)
        nested = _dataclass_in(tp)
        if nested is not None and isinstance(value, Mapping):
            problems.extend((f"{key}.{k}", msg) for k, msg in field_problems(value, nested))
        elif not _matches(value, tp):
            problems.append((str(key), f"expected {describe_type(tp)}, got {value!r} ({type(value).__name__})"))
    return problems


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _dataclass_in(tp: Any) -> type | None:
    for option in (_args(tp) if _is_union(tp) else (tp,)):
        if isinstance(option, type) and dataclasses.is_dataclass(option):
            return option
    return None


def _is_dataclass_type(tp: Any) -> bool:
    return _dataclass_in(tp) is not None


def _coerce(value: Any, tp: Any) -> Any:
    """YAML 1.1 reads ``1e-4`` as a string: accept numeric strings where a float belongs."""
    options = _args(tp) if _is_union(tp) else (tp,)
    if float in options and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _matches(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    if _is_union(tp):
        return any(_matches(value, option) for option in _args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return isinstance(value, (tp, Mapping))
    origin, args = typing.get_origin(tp), _args(tp)
    if origin is list:
        return isinstance(value, (list, tuple)) and all(_matches(v, args[0]) for v in value)
    if origin is tuple:
        return (isinstance(value, (list, tuple)) and len(value) == len(args)
                and all(_matches(v, a) for v, a in zip(value, args)))
    if origin is dict:
        return isinstance(value, Mapping) and all(_matches(k, args[0]) and _matches(v, args[1])
                                                 for k, v in value.items())
    return isinstance(value, tp) if isinstance(tp, type) else True


def describe_type(tp: Any) -> str:
    """A reader's name for a field type: ``an integer``, ``a number or null``, ``a list of strings``."""
    if _is_union(tp):
        return " or ".join(describe_type(a) for a in _args(tp))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null",
             Any: "any value"}
    if tp in names:
        return names[tp]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"a mapping of {tp.__name__} fields"
    origin, args = typing.get_origin(tp), _args(tp)
    if origin is list:
        return f"a list of {describe_type(args[0]).removeprefix('an ').removeprefix('a ')}s"
    if origin is tuple:
        return f"a list of {len(args)} numbers" if all(a is float for a in args) else f"a list of {len(args)} values"
    if origin is dict:
        return f"a mapping of {describe_type(args[0]).removeprefix('a ')} to {describe_type(args[1])}"
    return getattr(tp, "__name__", str(tp))


def load_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file of spec overrides (a mapping of TrainSpec fields)."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: spec file does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: malformed YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a spec file must be a mapping of options, got {type(data).__name__}")
    return data
