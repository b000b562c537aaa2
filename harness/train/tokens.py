"""Token ids cached per text, so a training step only collates ids instead of tokenizing again.

A training run draws the same rows again and again (the quickstart's 600 steps called the tokenizer
1,216 times, re-tokenising rows it had already seen; the Python side of a batched tokenizer call
costs milliseconds per micro-batch).  :class:`TokenCache` keeps, per text (the final, prompted
string), the unpadded ids the tokenizer gave it, and pads a micro-batch from them.

Why the padding is written here instead of ``tokenizer.pad``: that method walks every example
through Python dict handling (and warns that a fast tokenizer should be called directly), which is
what the cache is there to avoid.  The padded features are bitwise those of
:func:`harness.encoders.backbone.tokenize` (same keys in the same order, same pad values, same
padding side, int64), tested against it in ``tests/train/test_token_cache.py``.

The cache is not training state: its contents are a pure function of the tokenizer, the settings in
each entry's key and the text, so a resumed run (which starts with an empty cache) produces the same
batches.  It is bounded (least recently used texts are dropped past ``max_tokens``).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from harness.encoders.backbone import tokenize

Features = dict[str, torch.Tensor]
# The pad value of each feature a tokenizer returns for a single sequence; None: the tokenizer's own.
_PAD_VALUES: dict[str, int | None] = {"input_ids": None, "token_type_ids": None, "attention_mask": 0,
                                      "special_tokens_mask": 1}
DEFAULT_MAX_TOKENS = 8_000_000   # about 100 MB of cached ids (three int32 features per token)


class TokenCache:
    """Unpadded token ids of ``tokenizer`` per (text, max length, EOS handling), LRU-bounded."""

    def __init__(self, tokenizer: Any, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._keys: dict[tuple[Any, ...], tuple[str, ...]] = {}    # feature names per setting
        self._tokens = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _setting(self, max_length: int, append_eos: bool) -> tuple[Any, ...]:
        tok = self.tokenizer
        # Everything besides the text that changes the unpadded ids (added tokens change len(tok)).
        return (max_length, append_eos, getattr(tok, "truncation_side", "right"), len(tok))

    def encode(self, texts: Sequence[str], max_length: int, append_eos: bool = False) -> Features:
        """The padded features of ``texts``: bitwise what ``tokenize(tokenizer, texts, max_length,
        append_eos=append_eos)`` returns, without tokenizing a text this cache has seen."""
        tok = self.tokenizer
        if tok.pad_token_id is None or tok.padding_side not in ("right", "left") or not texts:
            return dict(tokenize(tok, list(texts), max_length, append_eos=append_eos))   # its own errors
        setting = self._setting(max_length, append_eos)
        entries = self._entries
        rows: dict[str, np.ndarray] = {}
        missing = []
        for text in dict.fromkeys(texts):
            row = entries.get((setting, text))
            if row is None:
                missing.append(text)
            else:
                entries.move_to_end((setting, text))
                rows[text] = row
        if missing:
            rows.update(self._add(setting, missing, max_length, append_eos))
        self.misses += len(missing)
        self.hits += len(texts) - len(missing)
        return self._pad(self._keys[setting], [rows[t] for t in texts])

    def _add(self, setting: tuple[Any, ...], texts: list[str], max_length: int,
             append_eos: bool) -> dict[str, np.ndarray]:
        """Tokenize ``texts`` (one batched call), store their rows, drop the oldest past the budget."""
        tok = self.tokenizer
        if append_eos:
            enc = dict(tokenize(tok, texts, max_length, append_eos=True))   # padded: cut back below
            names = tuple(enc)
            lengths = enc["attention_mask"].sum(1).tolist() if "attention_mask" in enc else None
            if lengths is None or any(n not in _PAD_VALUES for n in names):
                raise ValueError(f"token cache: unexpected tokenizer features {names}")
            stacked = torch.stack([enc[n] for n in names], dim=1).numpy()
            left = tok.padding_side == "left"
            width = stacked.shape[2]
            rows = [stacked[i, :, width - n:] if left else stacked[i, :, :n] for i, n in enumerate(lengths)]
        else:
            enc = tok(texts, max_length=max_length, truncation=True, padding=False)
            names = tuple(enc.keys())
            if any(n not in _PAD_VALUES for n in names):
                raise ValueError(f"token cache: unexpected tokenizer features {names}")
            rows = [np.array([enc[n][i] for n in names], dtype=np.int64) for i in range(len(texts))]
        known = self._keys.setdefault(setting, names)
        if known != names:
            raise ValueError(f"token cache: the tokenizer returned {names}, earlier {known}")
        added = {text: np.ascontiguousarray(row, dtype=np.int32) for text, row in zip(texts, rows)}
        for text, row in added.items():
            self._entries[(setting, text)] = row
            self._tokens += row.shape[1]
        while self._tokens > self.max_tokens and self._entries:     # the caller holds this batch's rows
            _, dropped = self._entries.popitem(last=False)
            self._tokens -= dropped.shape[1]
        return added

    def _pad(self, names: tuple[str, ...], rows: list[np.ndarray]) -> Features:
        tok = self.tokenizer
        width = max(r.shape[1] for r in rows)
        pads = [tok.pad_token_id if n == "input_ids" else tok.pad_token_type_id if n == "token_type_ids"
                else _PAD_VALUES[n] for n in names]
        out = np.empty((len(names), len(rows), width), dtype=np.int64)
        out[:] = np.asarray(pads, dtype=np.int64)[:, None, None]
        left = tok.padding_side == "left"
        for i, r in enumerate(rows):
            n = r.shape[1]
            if left:
                out[:, i, width - n:] = r
            else:
                out[:, i, :n] = r
        return {name: torch.from_numpy(out[k]) for k, name in enumerate(names)}
