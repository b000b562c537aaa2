"""Echo-Mistral-SPLADE (paper 003, METHODS.md 4.2): SPLADE term weights from a decoder's own LM head,
read through echo templates, trained with LoRA on the projection layers.

Public kernels (tensors in and out; tests pin them, oracle S4):

* :func:`build_echo_inputs` ``(tokenizer, texts, template, max_length, include_eos, prompt)`` ->
  ``(input_ids, attention_mask, pooling_mask)``: pieces tokenised separately with no special tokens
  added, each braced piece cut to ``max_length`` separately, right padding; the pooling mask marks the
  second occurrence of the text (plus the final EOS with ``include_eos``).  The template syntax and
  defaults are those of the echo-embeddings code (:mod:`harness.encoders.echo_inputs`, re-exported here);
* the pooling is :func:`methods.splade.splade_pool` over the pooling mask; losses, FLOPS/L1 and the
  lambda warm-up are the ``splade`` method's (:class:`EchoSplade` subclasses :class:`methods.splade.Splade`);
  every preset trains with paper 003's in-batch negatives only (``candidates: paper``, no mined negatives);
* :func:`top_terms_in_text` / :func:`term_share_summary`: the interpretability check the paper argues
  about, the share of a text's top-20 weighted vocabulary terms that occur in the text.

:class:`EchoSplade` (registered ``echo-splade``) on the shared trainer:

* the backbone is loaded with ``AutoModelForCausalLM`` (its own LM head; a model without one, e.g. a
  ``LlamaModel`` or a BERT encoder, is refused); queries and documents are filled into the echo (or, with
  ``echo: false``, plain) templates; the head pools the marked positions (:class:`EchoSpladeHead`);
* with ``lora`` in the spec (the presets: r 16, alpha 8, dropout 0.1 at paper scale) only LoRA adapters on
  the projection layers (q/k/v/o, gate/up/down) train; without it the whole body trains and the input
  embeddings and the LM head stay frozen (the paper's "frozen head" alternative).  Either way the
  embeddings and the head are bit-identical after training, which the export verifies and records;
* ``quantization: 4bit`` is QLoRA (bitsandbytes NF4, LoRA required): refused before any compute unless
  ``bitsandbytes`` imports and a CUDA GPU is present; a dry-run plan works anywhere;
* a tied head (SmolLM2) makes "frozen head" the same as "frozen embeddings": the run logs it and records
  ``tied_head: true``, since the untied-head question (LoRA vs full fine-tuning with a frozen head) can only
  be answered on an untied model (a tiny random one, or Mistral);
* the interpretability share is computed on the first ``interpretability_texts`` training passages before
  training (the loaded model) and after it, and stored in ``method/echo_splade.json``;
* the trained ``final/`` folder holds ``harness_echo.json`` (echo, include_eos, custom templates, query prompt,
  base model; default templates are left to the encoder, which picks the instructed query template when an
  evaluation protocol sets a query prompt), so
  ``harness eval --model <run>`` encodes it through :class:`~harness.encoders.sparse.EchoSparseEncoder`.

Options (``TrainSpec.method_options``; defaults in brackets): those of ``splade`` -- ``pooling`` [max],
``regularizer`` [flops], ``lambda_q`` [3e-4], ``lambda_d`` [1e-4], ``lambda_warmup_steps`` [50000],
``lambda_schedule`` [splade], ``candidates`` [official; every preset here: paper]
-- and ``echo`` [true], ``include_eos`` [false], ``query_template`` /
``doc_template`` [null: the mode's defaults, ``ECHO_TEMPLATES`` / ``PLAIN_TEMPLATES``], ``query_prompt``
[""; fills ``%%prompt%%`` and selects the instructed query template], ``quantization`` [null | 4bit],
``interpretability_texts`` [64], ``interpretability_k`` [20], ``eval_top_k`` [null: keep every term; else the
trained folder's encoder keeps each text's largest ``eval_top_k`` weights, recorded in ``harness_echo.json``;
the small preset uses 256, since a barely trained LM head still weights almost the whole vocabulary].
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from harness.encoders.echo_inputs import (
    ECHO_TEMPLATES,
    PLAIN_TEMPLATES,
    build_echo_inputs,
    default_templates,
    echo_token_rows,
    marked_mask,
    pad_echo_rows,
    pad_id_of,
    parse_template,
    text_token_ids,
)
from harness.encoders.heads import MarkedSparseHead
from harness.encoders.sparse import EchoSparseEncoder
from harness.encoders.sparse_echo import EchoSettings, check_causal_lm, write_echo_settings
from harness.errors import ConfigError
from harness.io import atomic_write_json
from harness.method import register_method
from harness.recipe import option, rebased
from harness.train.api import FINAL_DIR, build_batch
from methods.splade import Splade, SpladeOptions

if TYPE_CHECKING:
    from harness.train.api import Checkpoint, TrainBatch, TrainContext, TrainSpec

log = logging.getLogger(__name__)

QUANTIZATIONS = (None, "4bit")
# The transformer projection layers of Llama/Mistral-style blocks: the only LoRA targets (paper 003).
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RESULT_FILE = "echo_splade.json"


# ---------------------------------------------------------------------- interpretability
def top_terms_in_text(weights: torch.Tensor | np.ndarray, token_ids_of_text: list[int] | np.ndarray,
                      k: int = 20) -> float:
    """The share of the ``k`` largest positive term weights (a ``(V,)`` vector) whose vocabulary id occurs
    among the text's own token ids; fewer than ``k`` positive weights: the share of those; none: NaN."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"top_terms_in_text: k must be a positive integer, got {k!r}")
    w = weights.detach().float().cpu().numpy() if isinstance(weights, torch.Tensor) else np.asarray(weights, float)
    if w.ndim != 1:
        raise ConfigError(f"top_terms_in_text: weights must be one (V,) vector, got shape {w.shape}")
    positive = np.flatnonzero(w > 0)
    if len(positive) == 0:
        return float("nan")
    top = positive[np.argsort(-w[positive], kind="stable")[:k]]
    return float(np.isin(top, np.asarray(list(token_ids_of_text), dtype=np.int64)).mean())


def term_share_summary(shares: list[float], k: int) -> dict[str, Any]:
    """Corpus average of :func:`top_terms_in_text` values (texts without any positive weight counted apart)."""
    values = np.asarray(shares, dtype=float)
    kept = values[~np.isnan(values)]
    return {"k": k, "texts": int(len(values)), "without_terms": int(np.isnan(values).sum()),
            "mean_share": float(kept.mean()) if len(kept) else None}


def interpretability_report(encoder: EchoSparseEncoder, texts: list[str], k: int = 20) -> dict[str, Any]:
    """The top-``k`` in-text share of ``texts`` encoded as documents by an evaluation encoder (any saved model)."""
    vectors = encoder.encode_docs(texts, progress=False)
    ids = encoder.text_token_ids(texts, "doc")
    return term_share_summary([top_terms_in_text(vectors.to_dense()[i], ids[i], k) for i in range(len(texts))], k)


def model_term_share(model: torch.nn.Module, tokenizer, texts: list[str], template: str, max_length: int,
                     include_eos: bool, k: int = 20, batch_size: int = 16,
                     device: torch.device | None = None) -> dict[str, Any]:
    """The top-``k`` in-text share of ``texts`` under a training model (backbone + :class:`EchoSpladeHead`),
    in eval mode without gradients (the RNG is not touched)."""
    device = device or next(model.parameters()).device
    rows = echo_token_rows(tokenizer, texts, template, max_length, include_eos)
    ids = text_token_ids(tokenizer, texts, max_length)
    was_training = model.training
    model.eval()
    shares: list[float] = []
    try:
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                input_ids, attention, pooling = pad_echo_rows(rows[start:start + batch_size], pad_id_of(tokenizer))
                weights = model(input_ids=input_ids.to(device),
                                attention_mask=marked_mask(attention, pooling).to(device))
                shares.extend(top_terms_in_text(w, ids[start + i], k) for i, w in enumerate(weights))
    finally:
        model.train(was_training)
    return term_share_summary(shares, k)


# ---------------------------------------------------------------------- head
def qlora_unavailable() -> str | None:
    """Why QLoRA cannot run here (None: it can): it needs bitsandbytes and a CUDA GPU."""
    missing = [what for what, ok in (("the bitsandbytes package", importlib.util.find_spec("bitsandbytes") is not None),
                                     ("a CUDA GPU", torch.cuda.is_available())) if not ok]
    return " and ".join(missing) + " (missing)" if missing else None


def check_quantization(value: Any) -> None:
    """Refuse a quantisation other than none (null) or ``4bit``."""
    if value not in QUANTIZATIONS:
        raise ConfigError(f"method echo-splade: unknown quantization {value!r}: quantization must be null (none) "
                          "or '4bit' (QLoRA)")


class EchoSpladeHead(MarkedSparseHead):
    """SPLADE pooling over the echo positions of a causal LM whose input embeddings and LM head are frozen
    (the body trains, or only LoRA adapters do); optionally loaded in 4 bits (QLoRA)."""

    def __init__(self, aggregation: str = "max", quantization: str | None = None):
        super().__init__(aggregation, lm="causal")
        check_quantization(quantization)
        self.quantization = quantization

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "frozen": ["input_embeddings", "lm_head"], "quantization": self.quantization}

    def load_kwargs(self) -> dict[str, Any]:
        if self.quantization is None:
            return {}
        reason = qlora_unavailable()
        if reason:
            raise ConfigError(f"method echo-splade: quantization 4bit (QLoRA) needs {reason}")
        from transformers import BitsAndBytesConfig

        return {"quantization_config": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                          bnb_4bit_use_double_quant=True,
                                                          bnb_4bit_compute_dtype=torch.bfloat16),
                "device_map": {"": torch.cuda.current_device()}}

    def prepare_backbone(self, backbone: torch.nn.Module) -> None:
        super().prepare_backbone(backbone)
        if self.quantization is not None:
            from peft import prepare_model_for_kbit_training

            prepare_model_for_kbit_training(backbone, use_gradient_checkpointing=False)
        for module in frozen_modules(backbone).values():
            module.requires_grad_(False)


def _base_model(backbone: Any) -> Any:
    return backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone


def frozen_modules(backbone: Any) -> dict[str, Any]:
    """The input embeddings and the LM head of a causal LM (through a LoRA wrapper)."""
    base = _base_model(backbone)
    return {"input_embeddings": base.get_input_embeddings(), "lm_head": base.get_output_embeddings()}


def is_tied(backbone: Any) -> bool:
    """True when the LM head is the input embedding matrix (SmolLM2, BERT), not a parameter of its own."""
    mods = frozen_modules(backbone)
    return mods["lm_head"].weight.data_ptr() == mods["input_embeddings"].weight.data_ptr()


def _digest(module: Any) -> str:
    weight = module.weight.detach().to("cpu", torch.float32).contiguous()
    return hashlib.blake2b(weight.numpy().tobytes(), digest_size=16).hexdigest()


# ---------------------------------------------------------------------- presets
_LORA_PAPER = {"r": 16, "alpha": 8, "dropout": 0.1, "target_modules": list(PROJECTIONS)}
_PAPER = {
    # Paper 003: SPLADE's paper preset (batch 512, lengths 256 -- the echo doubles them --, lr 2e-5 linear with
    # 6000 warmup steps, 150k steps, lambda warm-up to 50k) on Mistral-7B-v0.3 with QLoRA r 16 alpha 8 dropout
    # 0.1 on the projections, in-batch negatives only (candidates 'paper', from the splade paper preset), bf16.
    # The paper's own inconsistencies: section 3.2 says LoRA, section 4.1 QLoRA (here QLoRA, the training recipe;
    # quantization null is plain LoRA); "a maximum length of 256" is read per occurrence of the text
    # (build_echo_inputs cuts each braced piece at 256), before echo doubles the sequence; "4 NVIDIA DGX A100
    # GPUs" (4 GPUs or 4 nodes) only bears on the global batch of 512, which is what is set.
    **Splade.presets["paper"],
    "model": "mistralai/Mistral-7B-v0.3", "pooling": "last", "n_hard_negatives": 0, "precision": "bf16",
    "lora": _LORA_PAPER,
    "method_options": {**Splade.presets["paper"]["method_options"], "quantization": "4bit"},
}
# SmolLM2-135M-Instruct (tied head), LoRA without quantisation, sized for a CPU: echo doubles every text.  Measured
# on a shared 2-core machine under heavy load: about 110 s per step of 8 MS MARCO echo pairs at lengths 32/64 (the
# 50 steps: about 1.5 hours), and 2-3.5 s per plain 128-token SciFact passage to encode; a GPU makes it minutes.
_SMALL = {
    **_PAPER, "model": "smollm2", "query_max_length": 32, "doc_max_length": 64, "batch_size": 8, "steps": 50,
    "warmup_steps": 5, "lr": 1e-4, "precision": "fp32", "gradient_checkpointing": False, "save_every": 10,
    "lora": {**_LORA_PAPER, "r": 16, "alpha": 32}, "method_options": {"lambda_warmup_steps": 25, "eval_top_k": 256,
                                                                       "candidates": "paper"},
}
# Seconds on CPU: the default synthetic world's tiny decoder with its LM head untied (alias
# tiny-decoder-untied), so the frozen-head comparison means at tiny scale what it means for Mistral.
_TINY = {
    **_SMALL, "model": "tiny-decoder-untied", "query_max_length": 32, "doc_max_length": 64,
    "batch_size": 16, "steps": 40, "warmup_steps": 4, "lr": 1e-3, "save_every": 20, "progress": False,
    "dropout": False, "lora": {**_LORA_PAPER, "r": 8, "alpha": 16, "dropout": 0.0},
    "method_options": {"lambda_warmup_steps": 20, "candidates": "paper"},
}


_ECHO = "jakespringer/echo-embeddings README.md, echo_embeddings.py"


@dataclass(frozen=True)
class EchoSpladeOptions(SpladeOptions):
    """Echo-SPLADE's options: SPLADE's, the echo templates, QLoRA and the interpretability check."""

    echo: bool = option(True, doc="echo templates (each text twice, the second occurrence pooled); false: plain "
                                  "templates", source="paper 003 (echo embeddings; " + _ECHO + ")")
    include_eos: bool = option(False, doc="also pool the final EOS token after the echoed text",
                               source="METHODS.md 4.2 choice: the second occurrence only (the echo code's dense "
                                      "pooling includes </s>)")
    query_template: str | None = option(None, doc="query template (null: the mode's default, ECHO_TEMPLATES or "
                                                  "PLAIN_TEMPLATES)", source=_ECHO + " (its templates)")
    doc_template: str | None = option(None, doc="document template (null: the mode's default)",
                                      source=_ECHO + " (its templates)")
    query_prompt: str = option("", doc="fills %%prompt%% and selects the instructed query template",
                               source="METHODS.md 4.2 choice: no query instruction (paper 003 mentions none)")
    quantization: str | None = option(None, doc="4bit: QLoRA (bitsandbytes NF4, LoRA and a CUDA GPU required); "
                                                "null: none", choices=("4bit",),
                                      source="harness default: none (the paper preset sets 4bit, paper 003's QLoRA)")
    interpretability_texts: int = option(64, doc="training passages the top-term share is measured on, before and "
                                                 "after training", bounds="[0, inf)",
                                         source="harness default: a stable share in seconds")
    interpretability_k: int = option(20, doc="top weighted vocabulary terms per text in the share", bounds="[1, inf)",
                                     source="paper 003 (top-20 terms)")
    eval_top_k: int | None = option(None, doc="the trained encoder keeps each text's largest k weights (null: "
                                              "every term)", bounds="[1, inf)",
                                    source="harness default: keep every term (the small preset sets 256)")


PAPER = rebased(Splade.presets["paper"], _PAPER, "paper 003 Echo-Mistral-SPLADE (METHODS.md 4.2)", [
    ("paper 003 (QLoRA on the projections; METHODS.md 4.2)", ["lora", "method_options"]),
    ("harness default: the echo code's 'last' (the sparse head pools the marked positions)", ["pooling"]),
])
SMALL = rebased(PAPER, _SMALL, "harness default: SmolLM2-135M-Instruct with LoRA, sized for a CPU")
TINY = rebased(SMALL, _TINY, "harness default: the synthetic world's tiny untied decoder, seconds on CPU")


@register_method("echo-splade")
class EchoSplade(Splade):
    """Echo-Mistral-SPLADE on the shared trainer (options and behaviour: see the module docstring)."""

    description = ("Echo-Mistral-SPLADE (paper 003): SPLADE weights from a decoder's LM head over echo templates, "
                   "LoRA on the projections with embeddings and LM head frozen")
    presets = {"tiny": TINY, "small": SMALL, "paper": PAPER}
    Options = EchoSpladeOptions

    def __init__(self) -> None:
        super().__init__()
        self.templates: dict[str, str] = {}
        self.record: dict[str, Any] = {}

    # ------------------------------------------------------------------ plan time
    def sequence_length_factor(self, spec: TrainSpec) -> float:
        """Echo templates hold each text twice (compute estimates double the tokens)."""
        return 2.0 if self.resolve_options(spec.method_options)["echo"] else 1.0

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The options with defaults, their values checked (suite validation and dry runs call this)."""
        opts = super().resolve_options(options)
        self._templates(opts)       # parses (and refuses) the templates
        return opts

    @staticmethod
    def _templates(opts: dict[str, Any]) -> dict[str, str]:
        defaults = default_templates(bool(opts["echo"]))
        query = opts["query_template"] or defaults["query_instructed" if opts["query_prompt"] else "query"]
        templates = {"query": query, "document": opts["doc_template"] or defaults["document"]}
        for side, template in templates.items():
            try:
                parse_template(template)
            except ConfigError as exc:
                raise ConfigError(f"method echo-splade: {side} template: {exc}") from None
        if opts["query_prompt"] and "%%prompt%%" not in templates["query"]:
            raise ConfigError(f"method echo-splade: query_prompt is set but the query template {query!r} has no "
                              "%%prompt%% piece")
        return templates

    def representation_head(self, spec: TrainSpec) -> EchoSpladeHead:
        options = self.resolve_options(dict(spec.method_options))
        check_causal_lm(spec.model, "method echo-splade")
        if spec.lora is not None:
            targets = spec.lora.target_modules
            names = [targets] if isinstance(targets, str) else list(targets or [])
            outside = [n for n in names if n not in PROJECTIONS]
            if not names or outside:
                raise ConfigError(f"method echo-splade: LoRA goes on the projection layers only "
                                  f"({', '.join(PROJECTIONS)}); lora.target_modules is {targets!r}")
        if options["quantization"] is not None and spec.lora is None:
            raise ConfigError("method echo-splade: quantization 4bit is QLoRA and needs lora in the spec "
                              "(4-bit weights cannot be fine-tuned in full)")
        return EchoSpladeHead(options["pooling"], options["quantization"])

    def validate(self, spec: TrainSpec) -> None:
        """Refuse QLoRA where it cannot run, before anything is loaded or written."""
        options = self.resolve_options(dict(spec.method_options))
        if options["quantization"] is not None:
            reason = qlora_unavailable()
            if reason:
                raise ConfigError(f"method echo-splade: quantization 4bit (QLoRA) needs {reason}; run it on a GPU "
                                  "machine with bitsandbytes installed, or drop quantization (plain LoRA)")

    # ------------------------------------------------------------------ training
    def configure(self, ctx: TrainContext) -> None:
        super().configure(ctx)
        if ctx.spec.use_instructions:
            raise ConfigError("method echo-splade puts a query prompt into its template (option query_prompt); "
                              "set use_instructions: false")
        self.templates = self._templates(self.options)
        backbone = ctx.model.backbone
        tied = is_tied(backbone)
        if tied:
            log.warning("echo-splade: the LM head of %s is tied to its input embeddings, so 'frozen head' also "
                        "means frozen embeddings and the untied-head question (LoRA vs full fine-tuning with a "
                        "frozen head) cannot be shown with this model; recorded as tied_head in %s",
                        ctx.spec.model, RESULT_FILE)
        trainable = sum(p.numel() for p in ctx.model.parameters() if p.requires_grad)
        self.record = {"tied_head": tied, "tuning": ("qlora" if self.options["quantization"] else "lora")
                       if ctx.spec.lora is not None else "full-frozen-head",
                       "trainable_parameters": int(trainable),
                       "frozen_digests": {n: _digest(m) for n, m in frozen_modules(backbone).items()},
                       "interpretability": {"before": self._term_share(ctx)}}

    def _probe_texts(self, ctx: TrainContext) -> list[str]:
        """The first positives of the training rows, taken round-robin over the sources (deterministic)."""
        n, texts = int(self.options["interpretability_texts"]), list[str]()
        sources = ctx.data.sources
        for r in range(max((len(s.rows) for s in sources), default=0)):
            for source in sources:
                if r < len(source.rows) and len(texts) < n:
                    texts.append(source.rows[r].pos[0])
            if len(texts) >= n:
                break
        return texts

    def _term_share(self, ctx: TrainContext) -> dict[str, Any] | None:
        texts = self._probe_texts(ctx)
        if not texts:
            return None
        return model_term_share(ctx.model, ctx.tokenizer, texts, self.templates["document"], ctx.spec.doc_max_length,
                                bool(self.options["include_eos"]), int(self.options["interpretability_k"]),
                                device=ctx.device)

    def make_batch(self, examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> TrainBatch:
        """The default rows (queries, positives, negatives), filled into the echo templates with marked masks."""
        batch = build_batch(examples, ctx.data, ctx.spec, micro_index, ctx.rank, ctx.world_size)
        o = self.options
        for view, texts, side, length, prompt in (
                ("query", batch.queries, "query", ctx.spec.query_max_length, o["query_prompt"]),
                ("passage", batch.passages, "document", ctx.spec.doc_max_length, "")):
            ids, attention, pooling = build_echo_inputs(ctx.tokenizer, texts, self.templates[side], length,
                                                        bool(o["include_eos"]), prompt)
            batch.features[view] = {"input_ids": ids, "attention_mask": marked_mask(attention, pooling)}
        return batch

    # ------------------------------------------------------------------ results
    def export(self, ctx: TrainContext, directory: Path) -> None:
        """``echo_splade.json`` (options, lambdas, tuning, tied head, frozen check, interpretability before and
        after) and ``harness_echo.json`` in ``final/`` (how the trained model reads texts)."""
        lam_q, lam_d = self.lambdas(max(self.calls, 1))
        digests = {n: _digest(m) for n, m in frozen_modules(ctx.model.backbone).items()}
        record = dict(self.record)
        record["frozen_unchanged"] = {n: digests[n] == record.get("frozen_digests", {}).get(n) for n in digests}
        record["interpretability"] = {**record.get("interpretability", {}), "after": self._term_share(ctx)}
        atomic_write_json(directory / RESULT_FILE, {"options": self.options, "steps": self.calls,
                                                    "lambda_q": lam_q, "lambda_d": lam_d,
                                                    "templates": self.templates, **record})
        o = self.options
        write_echo_settings(directory.parent / FINAL_DIR,
                            EchoSettings(echo=bool(o["echo"]), include_eos=bool(o["include_eos"]),
                                         query_template=o["query_template"], doc_template=o["doc_template"],
                                         base_model=ctx.spec.model, query_prompt=o["query_prompt"] or None,
                                         top_k=o["eval_top_k"]))

    def encoder(self, ckpt: Checkpoint, **kwargs: Any) -> EchoSparseEncoder:
        """The trained model as an echo sparse encoder (its ``harness_echo.json`` templates and lengths)."""
        return EchoSparseEncoder(str(ckpt.path), **kwargs)


__all__ = ["ECHO_TEMPLATES", "PLAIN_TEMPLATES", "PROJECTIONS", "QUANTIZATIONS", "build_echo_inputs",
           "top_terms_in_text", "term_share_summary", "interpretability_report", "model_term_share",
           "qlora_unavailable", "EchoSpladeHead", "EchoSplade", "frozen_modules", "is_tied"]
