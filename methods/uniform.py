"""The uniform baseline: every source weighted 1/k, task-homogeneous batches,
InfoNCE with hard + in-batch + cross-batch negatives (METHODS.md 0.3).

This is the tDRO paper's "Baseline" recipe and its reference model.  Everything it
needs is the shared trainer's default behaviour, so the method itself is only its
recipe at three scales (``presets``, plain data):

* ``paper``: the recipe as run by the tDRO authors
  [tdro: scripts/s0_train_baseline_model.sh, paper Table 6]: Qwen1.5-0.5B, full
  fine-tuning (the released scripts pass no ``--lora``), last-token pooling + EOS,
  cos / tau 0.002, global batch 2048 with 1 hard negative, lengths 128/512, 1000 steps
  (100 warmup), AdamW 1e-4 cosine to 0.1x, weight decay 0.1, bf16, gradient
  checkpointing, seed 42, query instructions (and document prompts for symmetric tasks).
* ``small``: the same recipe sized for the real all-MiniLM-L6-v2 on 2 CPU cores in
  minutes.  Model-dependent values follow MiniLM rather than Qwen: mean pooling
  (how MiniLM was trained), tau 0.05 (its training used a similarity scale of 20)
  and lr 2e-5 (a typical rate for full fine-tuning of a small BERT; 1e-4 with tau
  0.002 is tuned for a 0.5B decoder); no instructions (MiniLM was trained without
  them); fp32 on CPU.
* ``tiny``: a tiny random model on the synthetic world (seconds): lr 1e-3, tau 0.05,
  short sequences, 40 steps, no dropout.  The model is given by the caller (the synthetic
  world's tiny model).

Dropout follows the model's config during training (the trainer puts the model in train
mode; ``from_pretrained`` leaves it in eval mode): MiniLM trains with its 0.1 at ``small``
scale; Qwen1.5's config has none.
"""
from __future__ import annotations

from harness.errors import ConfigError
from harness.method import Method, register_method
from harness.recipe import preset, rebased

_PAPER = {
    "model": "Qwen/Qwen1.5-0.5B", "pooling": "last", "append_eos": True,
    "query_max_length": 128, "doc_max_length": 512,
    "use_instructions": True, "symmetric_doc_prompt": True,
    "similarity": "cos", "temperature": 0.002, "n_hard_negatives": 1,
    "in_batch_negatives": True, "cross_batch_negatives": True,
    "batch_size": 2048, "grad_accum": 1, "sampling": "homogeneous",
    "steps": 1000, "warmup_steps": 100, "lr": 1e-4, "schedule": "cosine", "min_lr_ratio": 0.1,
    "weight_decay": 0.1, "max_grad_norm": 1.0,
    "precision": "bf16", "gradient_checkpointing": True, "lora": None, "seed": 42,
    "save_every": 100,
}

_SMALL = {
    **_PAPER,
    "model": "minilm", "pooling": "mean", "append_eos": False,
    "query_max_length": 64, "doc_max_length": 256,
    "use_instructions": False,
    "temperature": 0.05, "batch_size": 32, "steps": 120, "warmup_steps": 12, "lr": 2e-5,
    "precision": "fp32", "gradient_checkpointing": False, "save_every": 40,
}

_TINY = {
    **_PAPER,
    "model": "minilm", "pooling": "mean", "append_eos": False,
    "query_max_length": 32, "doc_max_length": 64,
    "temperature": 0.05, "batch_size": 16, "steps": 40, "warmup_steps": 4, "lr": 1e-3, "weight_decay": 0.01,
    # Checkpoints every 50 steps: a killed suite resumes the cell instead of starting it again.  No
    # dropout: the tiny model stands in for the paper's decoder, whose config has none, and a seconds-long
    # run on planted structure should not spend its steps on dropout noise.
    "precision": "fp32", "gradient_checkpointing": False, "save_every": 50, "progress": False, "dropout": False,
}


_TDRO_S0 = "paper 000 Table 6 / tdro-llm/tdro scripts/s0_train_baseline_model.sh (METHODS.md 0.3)"
PAPER = preset(_PAPER, _TDRO_S0, [
    ("METHODS.md 1.5 item 5: the released scripts pass no --lora (full fine-tuning)", ["lora"]),
    ("harness default: 1.0, the Hugging Face Trainer's (the scripts train with it)", ["max_grad_norm"]),
    ("harness default: a checkpoint every 100 steps, so a killed run resumes", ["save_every"]),
])
SMALL = rebased(PAPER, _SMALL, "harness default: sized for all-MiniLM-L6-v2 on 2 CPU cores in minutes", [
    ("harness default: mean pooling, how MiniLM was trained", ["pooling"]),
    ("harness default: tau 0.05 (MiniLM's training used a similarity scale of 20)", ["temperature"]),
    ("harness default: 2e-5, a typical rate for full fine-tuning of a small BERT", ["lr"]),
    ("harness default: MiniLM was trained without instructions", ["use_instructions"]),
    ("harness default: fp32 on CPU", ["precision", "gradient_checkpointing"]),
])
TINY = rebased(PAPER, _TINY, "harness default: a tiny random model on the synthetic world, seconds", [
    ("harness default: no dropout (the paper's decoder has none; seconds-long runs on planted structure)",
     ["dropout"]),
    ("harness default: a checkpoint every 50 steps, so a killed suite resumes the cell", ["save_every"]),
])


@register_method("uniform")
class Uniform(Method):
    """Uniform dataset weights, homogeneous batches, HN + IBN + CBN InfoNCE (the trainer defaults)."""

    description = "uniform sampling baseline (tDRO paper baseline / reference model)"
    presets = {"tiny": TINY, "small": SMALL, "paper": PAPER}

    def dataset_weights(self, spec, data):
        if spec.dataset_weights is not None and len(set(spec.dataset_weights.values())) > 1:
            raise ConfigError("the uniform method samples every source equally; dataset_weights "
                              f"{spec.dataset_weights} belong to a reweighting method")
        return super().dataset_weights(spec, data)
