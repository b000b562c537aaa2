"""Paper 004's retriever fine-tuning recipe (Tevatron), one preset per backbone, and its named modes.

Paper 004 fine-tunes every backbone with Tevatron on MIRACL train (App. B.1; the released trainer is
xir_BDUMDR ``Src/tevatron``), a recipe distinct from the tDRO presets of :mod:`methods.uniform`
(last-token pooling, EOS, cosine schedule, weight decay 0.1, tau 0.002):

============================ =========================================== =====================================
setting                      value                                       source
============================ =========================================== =====================================
pooling                      [CLS], no EOS                               Tevatron ``modeling/dense.py`` (``[:, 0]``)
optimizer                    Adam: AdamW with weight decay 0             paper B.1 ("Adam"); HF Trainer defaults
betas / eps / clipping       (0.9, 0.999) / 1e-8 / max_grad_norm 1.0     Hugging Face TrainingArguments defaults
schedule                     linear decay to 0, 10% warmup               HF ``lr_scheduler_type`` default;
                                                                         Tevatron ``arguments.py`` warmup_ratio
lengths                      query 64, passage 256                       paper B.1; README ``--q_max_len 64
                                                                         --p_max_len 256``
negatives                    1 positive + 7 hard negatives               paper B.1; README ``--train_n_passages 8``
precision                    fp16                                        README ``--fp16``
lr / epochs                  3e-6 / 16 (mBERT, mDPR); 2e-6 / 20 (mE5,    paper B.1
                             BGE-M3)
============================ =========================================== =====================================

Epochs, not steps: the engine counts optimizer steps, so each preset's ``steps`` is
``ceil(epochs * train_queries / global_batch)`` (:func:`epoch_steps`) over the 36,183 training queries
that remain of Table 10's 40,203 MIRACL train queries (16 languages) after the paper's random 10%
validation split (§4.1), and ``warmup_steps`` is Tevatron's 10% of them.

Named modes where paper and code disagree (:data:`MODES`; the default is what produced the numbers):

* ``similarity``: ``dot`` (default; Tevatron's ``compute_similarity`` is a plain matrix product of
  unnormalised [CLS] vectors, no temperature) or ``cos`` (paper §3.5 writes cosine similarity; it states no
  temperature, and Tevatron applies none, so tau stays 1).
* ``hardware``: ``1x24`` (default; paper B.1: one A100, batch 24) or ``4x12`` (the README's command:
  4 processes x ``--per_device_train_batch_size 12`` with ``--negatives_x_device``, 48 queries per step).
  Tevatron's cross-device loss gathers every process's queries and passages and scores each query against
  all of them (times the world size, undoing DDP's mean), so P processes x B queries train as one batch of
  P*B with in-batch negatives: a mode is its global batch (the engine's ``batch_size``, cross-batch
  negatives gathered over whatever processes run it).  A 2 x 12 launch is therefore the 1x24 recipe, not a
  mode of its own.

This module is plug-in code (it imports the engine's recipe helpers only).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError
from harness.recipe import Preset, preset
from harness.train.api import TrainSpec
from suites.training_data.mining import printed_train_queries

# Paper 004, Appendix A Table 10: MIRACL train queries of the 16 languages (no de, yo), read from the transcription
# (reports/papers/004/table10.yaml; the sum of the 16 cells is its printed All, 40,203, which verify checks).
# Table 13's topic distribution sums to 40,197 (6 fewer: id and ja; suites/training_data/mining.py says where).
MIRACL_TRAIN_QUERIES = sum(printed_train_queries(10).values())
VALIDATION_SHARE = 0.1     # paper 004 §4.1: "The validation set is 10% of the training set with a random sample."
TRAIN_QUERIES = MIRACL_TRAIN_QUERIES - round(MIRACL_TRAIN_QUERIES * VALIDATION_SHARE)   # 36,183
WARMUP_RATIO = 0.1         # xir_BDUMDR Src/tevatron/src/tevatron/arguments.py: warmup_ratio 0.1


@dataclass(frozen=True)
class Backbone:
    """One backbone of paper 004 (Table 1, Tables 15/16) and its B.1 learning rate and epochs."""

    key: str
    model: str
    lr: float
    epochs: int
    model_source: str


BACKBONES: dict[str, Backbone] = {
    "mbert": Backbone("mbert", "bert-base-multilingual-cased", 3e-6, 16,
                      "paper 004 §4.1 (mBERT [devlin2019bert]; the cased multilingual BERT-base checkpoint)"),
    "mdpr": Backbone("mdpr", "castorini/mdpr-tied-pft-msmarco", 3e-6, 16,
                     "xir_BDUMDR README.md (mDPR: castorini/mdpr-tied-pft-msmarco)"),
    "me5": Backbone("me5", "intfloat/multilingual-e5-large", 2e-6, 20,
                    "xir_BDUMDR README.md (mE5-large: intfloat/multilingual-e5-large)"),
    "bge-m3": Backbone("bge-m3", "BAAI/bge-m3", 2e-6, 20, "xir_BDUMDR README.md (BGE: BAAI/bge-m3)"),
}

# Named modes: {mode axis: {mode name: (TrainSpec fields, source)}}; the first of each axis is the default.
MODES: dict[str, dict[str, tuple[dict[str, Any], str]]] = {
    "similarity": {
        "dot": ({"similarity": "dot", "normalize": False, "temperature": 1.0},
                "xir_BDUMDR Src/tevatron/src/tevatron/modeling/dense.py compute_similarity (q @ p^T, unnormalised "
                "[CLS]; no temperature in loss.py / encoder.py)"),
        "cos": ({"similarity": "cos", "normalize": True, "temperature": 1.0},
                "paper 004 §3.5 (cosine similarity; no temperature stated, Tevatron applies none)"),
    },
    "hardware": {
        "1x24": ({"batch_size": 24}, "paper 004 App. B.1 (one A100 80G, batch size 24)"),
        "4x12": ({"batch_size": 48}, "xir_BDUMDR README.md train command (--nproc_per_node=4 "
                                     "--per_device_train_batch_size 12 --negatives_x_device)"),
    },
}
PROCESSES = {"1x24": 1, "4x12": 4}

_B1 = "paper 004 App. B.1"
# The engine's instruction template (unused: Tevatron adds no instruction; set so every field names its source)
_TEMPLATE = next(f.default for f in dataclasses.fields(TrainSpec) if f.name == "instruction_template")
_README = "xir_BDUMDR README.md train command"
_HF = "Hugging Face TrainingArguments default (Tevatron's trainer is the HF Trainer; the README command leaves it)"


def epoch_steps(epochs: int, batch_size: int, queries: int = TRAIN_QUERIES) -> int:
    """Optimizer steps of ``epochs`` passes over ``queries`` training queries at global batch ``batch_size``
    (the HF Trainer's count: ceil of the batches per epoch, times the epochs; the last batch of an epoch is
    kept, as its DataLoader keeps it)."""
    if epochs < 1 or batch_size < 1 or queries < 1:
        raise ConfigError(f"epoch_steps: epochs, batch_size and queries must be >= 1, got {epochs}, {batch_size}, "
                          f"{queries}")
    return epochs * math.ceil(queries / batch_size)


def tevatron_recipe(backbone: str, *, similarity: str = "dot", hardware: str = "1x24") -> Preset:
    """The TrainSpec preset of paper 004's fine-tuning of ``backbone`` (a key of :data:`BACKBONES`) in the
    named ``similarity`` and ``hardware`` modes, every field with its source."""
    if backbone not in BACKBONES:
        raise ConfigError(f"unknown paper-004 backbone {backbone!r}; choose one of {', '.join(BACKBONES)}")
    for axis, value in (("similarity", similarity), ("hardware", hardware)):
        if value not in MODES[axis]:
            raise ConfigError(f"unknown {axis} mode {value!r}; choose one of {', '.join(MODES[axis])}")
    b = BACKBONES[backbone]
    sim_fields, sim_source = MODES["similarity"][similarity]
    hw_fields, hw_source = MODES["hardware"][hardware]
    steps = epoch_steps(b.epochs, int(hw_fields["batch_size"]))
    values: dict[str, Any] = {
        "model": b.model, "pooling": "cls", "append_eos": False,
        "query_max_length": 64, "doc_max_length": 256,
        "use_instructions": False, "symmetric_doc_prompt": False,
        "instruction_template": _TEMPLATE,
        **sim_fields,
        "n_hard_negatives": 7, "in_batch_negatives": True, "cross_batch_negatives": True,
        "fill_negatives": "random",
        **hw_fields, "grad_accum": 1, "sampling": "mixed",
        "steps": steps, "warmup_steps": math.ceil(WARMUP_RATIO * steps),
        "lr": b.lr, "schedule": "linear", "min_lr_ratio": 0.0,
        "weight_decay": 0.0, "adam_betas": (0.9, 0.999), "adam_eps": 1e-8, "max_grad_norm": 1.0, "dropout": True,
        "precision": "fp16", "gradient_checkpointing": False, "lora": None, "seed": 42,
        "save_every": 10000,
    }
    epochs = (f"{_B1}: {b.epochs} epochs for {backbone} = {b.epochs} x ceil({TRAIN_QUERIES:,} training queries "
              f"(Table 10's {MIRACL_TRAIN_QUERIES:,} less the §4.1 10% validation split) / batch "
              f"{hw_fields['batch_size']})")
    return preset(values, _B1, [
        (b.model_source, ["model"]),
        ("xir_BDUMDR Src/tevatron/src/tevatron/modeling/dense.py (p_hidden[:, 0]: [CLS], no EOS appended)",
         ["pooling", "append_eos"]),
        (f"{_B1} (maximum query and paragraph lengths 64 and 256); {_README} --q_max_len 64 --p_max_len 256",
         ["query_max_length", "doc_max_length"]),
        ("xir_BDUMDR Src/tevatron/src/tevatron/datasets/preprocessor.py (raw query and passage text, no "
         "instruction or prefix)", ["use_instructions", "symmetric_doc_prompt", "instruction_template"]),
        (sim_source, list(sim_fields)),
        (f"{_B1} (one positive and 7 hard negatives per query); {_README} --train_n_passages 8",
         ["n_hard_negatives"]),
        ("xir_BDUMDR Src/tevatron/src/tevatron/modeling/encoder.py (scores against every passage of the batch, "
         "gathered across devices with --negatives_x_device)", ["in_batch_negatives", "cross_batch_negatives"]),
        ("xir_BDUMDR Src/tevatron/src/tevatron/data.py (a query with too few negatives repeats drawn ones; the "
         "harness draws other rows' positives only for a row with none)", ["fill_negatives"]),
        (hw_source, list(hw_fields)),
        (f"{_README} (no --gradient_accumulation_steps)", ["grad_accum"]),
        ("xir_BDUMDR Src/tevatron/src/tevatron/trainer.py (one shuffled mix of all languages; paper 004 §4.1 "
         "\"mixing all languages as training data\")", ["sampling"]),
        (epochs, ["steps"]),
        ("xir_BDUMDR Src/tevatron/src/tevatron/arguments.py warmup_ratio 0.1 of the steps", ["warmup_steps"]),
        (f"{_B1} (lr {b.lr:g} for {backbone})", ["lr"]),
        (_HF + ": lr_scheduler_type linear, decaying to 0", ["schedule", "min_lr_ratio"]),
        (f"{_B1} (Adam); " + _HF + ": weight_decay 0 (AdamW with no decay is Adam)", ["weight_decay"]),
        (_HF + ": adam_beta1 0.9, adam_beta2 0.999, adam_epsilon 1e-8, max_grad_norm 1.0",
         ["adam_betas", "adam_eps", "max_grad_norm"]),
        (_HF + ": the Trainer trains in train mode, the backbone's dropout active", ["dropout"]),
        (f"{_README} --fp16 (no gradient checkpointing, full fine-tuning)",
         ["precision", "gradient_checkpointing", "lora"]),
        (_HF + ": seed 42", ["seed"]),
        (f"{_README} --save_steps 10000", ["save_every"]),
    ])


# Method presets: 'paper' is the Table 2 backbone (BGE-M3); 'tevatron-<backbone>' the four backbones of
# Table 1 / Tables 15-16 (a suite scale names one with 'preset:').
# 'tevatron-<backbone>-cos' and 'tevatron-<backbone>-4x12' are the non-default modes.
TEVATRON_PRESETS: dict[str, Preset] = {
    **{f"tevatron-{key}": tevatron_recipe(key) for key in BACKBONES},
    **{f"tevatron-{key}-cos": tevatron_recipe(key, similarity="cos") for key in BACKBONES},
    **{f"tevatron-{key}-4x12": tevatron_recipe(key, hardware="4x12") for key in BACKBONES},
}

__all__ = ["BACKBONES", "MIRACL_TRAIN_QUERIES", "MODES", "PROCESSES", "TEVATRON_PRESETS", "TRAIN_QUERIES",
           "Backbone", "epoch_steps", "tevatron_recipe"]
