"""Multilingual instruction fine-tuning (MIFT) of the negative generator (paper 004 §3.4, stage 2).

Paper 004 fine-tunes the generator LLM on "the summarization-related instructions from the Alpaca dataset",
translated into each language by Google Translate, before it writes summaries and queries (positive-driven
back-forward generation).  The released recipe is LLaMA-Factory's LoRA SFT
(xir_BDUMDR ``Src/LLM_generation/llama3_lora_sft_ds3.yaml``): LoRA rank 8 on every linear layer
(``lora_target: all``), lr 1e-3, 5 epochs, cosine schedule with 10% warmup, 4 per device x 4 accumulation,
cutoff 2048 tokens, at most 1000 samples, bf16; then the adapter is merged into the model
(``llama3_lora_sft.yaml``, export).  LLaMA-Factory's defaults fill the rest: lora_alpha = 2 x rank,
lora_dropout 0, the loss on the answer tokens only.

:func:`mift_train` runs that recipe with ``peft`` on a causal LM folder or hub id and saves the merged model
(plus ``mift.json``: settings, examples, per-step losses); :func:`summarisation_examples` selects the
summarisation instructions from (translated) Alpaca rows (``instruction``/``input``/``output``; translated
rows also carry ``original_instruction``, as the released ``translate.py`` writes them).  The mined method
runs it as part of mining (option ``mift``), keyed by content under ``<cache>/mift/<key>/``, and then
generates with the merged model.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.io import atomic_write_json
from suites.training_data.alpaca import SUMMARY_STEMS, is_summarisation, read_rows

log = logging.getLogger(__name__)

_CODE = "xir_BDUMDR Src/LLM_generation/llama3_lora_sft_ds3.yaml"


@dataclass(frozen=True)
class MiftSettings:
    """The LoRA SFT recipe (defaults: the released LLaMA-Factory config, see the module docstring)."""

    rank: int = 8                   # lora_rank 8
    alpha: int = 16                 # LLaMA-Factory default: 2 x rank
    dropout: float = 0.0            # LLaMA-Factory default
    lr: float = 1e-3                # learning_rate 1.0e-3
    epochs: int = 5                 # num_train_epochs 5.0
    batch_size: int = 4             # per_device_train_batch_size 4
    grad_accum: int = 4             # gradient_accumulation_steps 4
    max_length: int = 2048          # cutoff_len 2048
    max_samples: int = 1000         # max_samples 1000
    warmup_ratio: float = 0.1       # warmup_ratio 0.1 (cosine schedule)
    seed: int = 42                  # the HF Trainer's default seed

    def check(self) -> None:
        for name in ("rank", "alpha", "epochs", "batch_size", "grad_accum", "max_length", "max_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"mift: {name} must be a positive integer, got {value!r}")
        if not (self.lr > 0 and 0 <= self.dropout < 1 and 0 <= self.warmup_ratio < 1):
            raise ConfigError(f"mift: lr > 0, dropout and warmup_ratio in [0, 1) needed, got {self}")


SOURCE = _CODE + " (LoRA SFT: rank 8, all linear layers, lr 1e-3, 5 epochs, cosine, warmup 0.1)"


def read_instruction_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of an Alpaca-style file: a JSON list (the original ``alpaca_data.json``) or JSON lines (the
    released ``translate.py`` output, or what the data builder 'mift-alpaca' writes), each with ``instruction``
    and ``output`` (``input`` optional; translated rows ``lang`` and ``original_instruction``).  A bad row fails
    naming the file, its line and the problem (``suites.training_data.alpaca.read_rows``)."""
    return read_rows(path)


def summarisation_examples(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The summarisation instructions among Alpaca rows (judged on the English original where a translated
    row keeps it), as ``{"instruction", "input", "output", "lang"}``."""
    out = []
    for row in rows:
        english = str(row.get("original_instruction") or row.get("instruction") or "")
        if is_summarisation(english) and str(row.get("output", "")).strip():
            out.append({"instruction": str(row["instruction"]), "input": str(row.get("input") or ""),
                        "output": str(row["output"]), "lang": str(row.get("lang", "en"))})
    return out


def user_message(example: Mapping[str, str]) -> str:
    """The user turn of one example: the instruction, then its input (Alpaca's two fields)."""
    return example["instruction"] + (f"\n\n{example['input']}" if example.get("input") else "")


def encode_example(tokenizer, example: Mapping[str, str], max_length: int) -> tuple[list[int], list[int]]:
    """Token ids and labels of one example in the model's chat format; the prompt's labels are -100 (the
    loss reads the answer only, as LLaMA-Factory's SFT), the answer ends with EOS; cut at ``max_length``."""
    messages = [{"role": "user", "content": user_message(example)}]
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        prompt = messages[0]["content"] + "\n"
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tokenizer(example["output"], add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        a_ids = a_ids + [tokenizer.eos_token_id]
    ids = (p_ids + a_ids)[:max_length]
    labels = ([-100] * len(p_ids) + a_ids)[:max_length]
    return ids, labels


def mift_train(model: str, examples: Sequence[Mapping[str, str]], out_dir: str | Path,
               settings: MiftSettings = MiftSettings(), *, gguf_file: str | None = None) -> Path:
    """LoRA-fine-tune causal LM ``model`` on ``examples`` and save the merged model to ``out_dir``
    (with its tokenizer and ``mift.json``).  Returns ``out_dir``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

    settings.check()
    if not examples:
        raise ConfigError("mift: no instruction examples to train on (no summarisation instruction found)")
    examples = list(examples)[:settings.max_samples]
    out = Path(out_dir)
    torch.manual_seed(settings.seed)
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(model, **extra)
    lm = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32, **extra)
    config = LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules="all-linear", task_type="CAUSAL_LM")
    peft_model = get_peft_model(lm, config)
    encoded = [encode_example(tok, ex, settings.max_length) for ex in examples]
    per_step = settings.batch_size * settings.grad_accum
    steps = settings.epochs * math.ceil(len(encoded) / per_step)
    params = [p for p in peft_model.parameters() if p.requires_grad]
    # The multi-tensor (foreach) path: PyTorch takes it only for CUDA by default; bitwise the loop's result
    # (tests/train/test_optimizer_step.py), one kernel over the many small LoRA tensors.
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0, foreach=True)
    sched = get_cosine_schedule_with_warmup(opt, math.ceil(settings.warmup_ratio * steps), steps)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    gen = torch.Generator().manual_seed(settings.seed)
    losses: list[float] = []
    peft_model.train()
    for _epoch in range(settings.epochs):
        order = torch.randperm(len(encoded), generator=gen).tolist()
        for start in range(0, len(order), per_step):
            opt.zero_grad()
            group = order[start:start + per_step]
            step_loss = 0.0
            for m in range(0, len(group), settings.batch_size):
                batch = [encoded[i] for i in group[m:m + settings.batch_size]]
                width = max(len(ids) for ids, _ in batch)
                ids = torch.tensor([x + [pad] * (width - len(x)) for x, _ in batch])
                labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in batch])
                mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x, _ in batch])
                loss = peft_model(input_ids=ids, attention_mask=mask, labels=labels).loss
                (loss * len(batch) / len(group)).backward()
                step_loss += float(loss.detach()) * len(batch) / len(group)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            losses.append(step_loss)
    merged: Any = peft_model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out)
    tok.save_pretrained(out)
    atomic_write_json(out / "mift.json", {"base": model, "settings": asdict(settings), "examples": len(examples),
                                          "steps": steps, "losses": losses})
    log.info("MIFT: %d examples, %d steps, loss %.4f -> %.4f", len(examples), steps, losses[0], losses[-1])
    return out


__all__ = ["SOURCE", "SUMMARY_STEMS", "MiftSettings", "encode_example", "mift_train", "read_instruction_rows",
           "summarisation_examples", "user_message"]
