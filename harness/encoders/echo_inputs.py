"""Echo templates (Springer et al. 2024, METHODS.md 4.2): a decoder reads each text twice and is pooled
over the second occurrence, whose tokens have seen the whole text.

A template is written in the echo-embeddings syntax::

    <s>Document:{!%%text%%}\\nDocument again:{%%text%%}{</s>}

* text outside braces is a *literal* piece (never pooled, never truncated: it is part of the template);
* ``{!...}`` is a braced piece that is read but not pooled (the first occurrence, a prompt);
* ``{...}`` is a braced piece that is pooled (echo's ``embed_mask`` 1);
* ``%%text%%`` and ``%%prompt%%`` are replaced by the text and the prompt (``""`` when none).

As in the reference parser, every piece is tokenised on its own with no special tokens added
(BOS/EOS come only from the template), each *braced* piece is cut to ``max_length`` tokens
separately (so ``{</s>}`` survives a long text), and rows are padded on the right.  ``<s>`` and
``</s>`` in a template stand for the tokenizer's own BOS/EOS strings (Mistral's are ``<s>``/``</s>``;
a tokenizer without one gets nothing there).

Pooling positions (our choice, METHODS.md 4.2): the braced pooled pieces that hold ``%%text%%``, i.e. the
second occurrence of the text; with ``include_eos`` also the other pooled pieces (the final ``</s>``),
which is exactly echo's ``embed_mask``.  The plain (no echo) templates read the text once and pool it.

For training, the pooling positions travel inside the attention mask (:func:`marked_mask`): 0 padding,
1 read, 2 read and pooled (:data:`harness.encoders.heads.POOLED`); the representation head pools the 2s and
the backbone sees the mask binarised.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from harness.errors import ConfigError

TEXT, PROMPT = "%%text%%", "%%prompt%%"
VARIABLES = ("text", "prompt")
# Echo (METHODS.md 4.2): no instruction on queries by default (paper 003 mentions none); the instructed
# query template is used when a query prompt is given.
ECHO_TEMPLATES = {
    "query": "<s>Query:{!%%text%%}\nQuery again:{%%text%%}{</s>}",
    "query_instructed": "<s>Instruct:{!%%prompt%%,}\nQuery:{!%%text%%}\nQuery again:{%%text%%}{</s>}",
    "document": "<s>Document:{!%%text%%}\nDocument again:{%%text%%}{</s>}",
}
# Plain (no echo): the same prefixes, the text read once and pooled (the echo-vs-plain ablation).
PLAIN_TEMPLATES = {
    "query": "<s>Query:{%%text%%}{</s>}",
    "query_instructed": "<s>Instruct:{!%%prompt%%,}\nQuery:{%%text%%}{</s>}",
    "document": "<s>Document:{%%text%%}{</s>}",
}
_BRACED = re.compile(r"\{[\s\S]+?\}")          # the reference parser's non-greedy braces
_VARIABLE = re.compile(r"%%(\w*)%%")


@dataclass(frozen=True)
class Piece:
    """One piece of a template: its text (variables unreplaced), whether it is braced, pooled (no ``!``)
    and holds the text variable."""

    text: str
    braced: bool
    embed: bool
    has_text: bool

    def pooled(self, include_eos: bool) -> bool:
        return self.embed and (self.has_text or include_eos)


def parse_template(template: str) -> list[Piece]:
    """The pieces of an echo template; refuses one without a pooled braced ``{%%text%%}`` piece."""
    if not isinstance(template, str) or not template:
        raise ConfigError(f"echo template must be a non-empty string, got {template!r}")
    pieces: list[Piece] = []
    end = 0
    for match in _BRACED.finditer(template):
        if match.start() > end:
            pieces.append(Piece(template[end:match.start()], False, False, TEXT in template[end:match.start()]))
        inner = match.group()[1:-1]
        hidden = inner.startswith("!")
        inner = inner[1:] if hidden else inner
        pieces.append(Piece(inner, True, not hidden, TEXT in inner))
        end = match.end()
    if end < len(template):
        pieces.append(Piece(template[end:], False, False, TEXT in template[end:]))
    stray = [p.text for p in pieces if not p.braced and ("{" in p.text or "}" in p.text)]
    if stray:
        raise ConfigError(f"echo template {template!r}: unbalanced brace in {stray[0]!r}; every piece is "
                          "{...} (pooled) or {!...} (read only)")
    unknown = sorted({v for p in pieces for v in _VARIABLE.findall(p.text)} - set(VARIABLES))
    if unknown:
        names = ", ".join(f"%%{v}%%" for v in unknown)
        raise ConfigError(f"echo template {template!r}: unknown variable(s) {names}; variables: "
                          + ", ".join(f"%%{v}%%" for v in VARIABLES))
    literal_text = [p for p in pieces if not p.braced and p.has_text]
    if literal_text:
        raise ConfigError(f"echo template {template!r}: %%text%% outside braces ({literal_text[0].text!r}); the text "
                          "must sit in a braced piece: {!%%text%%} (read) or {%%text%%} (read and pooled)")
    if not any(p.embed and p.has_text for p in pieces):
        raise ConfigError(f"echo template {template!r} has no braced {{%%text%%}} piece to pool (a pooled piece is "
                          "in braces without '!', e.g. '<s>Document:{!%%text%%}\\nDocument again:{%%text%%}{</s>}')")
    return pieces


def default_templates(echo: bool) -> dict[str, str]:
    """The query/instructed-query/document templates of the echo or the plain mode."""
    return dict(ECHO_TEMPLATES if echo else PLAIN_TEMPLATES)


def _special(text: str, tokenizer) -> str:
    """``</s>``/``<s>`` -> the tokenizer's EOS/BOS strings (nothing where it has none)."""
    eos, bos = getattr(tokenizer, "eos_token", None) or "", getattr(tokenizer, "bos_token", None) or ""
    return text.replace("</s>", "\x00EOS\x00").replace("<s>", bos).replace("\x00EOS\x00", eos)


def _tokenize(tokenizer, strings: list[str]) -> list[list[int]]:
    unique = list(dict.fromkeys(strings))
    if not unique:
        return []
    ids = tokenizer(unique, add_special_tokens=False, return_attention_mask=False,
                    return_token_type_ids=False)["input_ids"]
    found = dict(zip(unique, ids))
    return [list(found[s]) for s in strings]


def echo_token_rows(tokenizer, texts: Sequence[str], template: str, max_length: int, include_eos: bool = False,
                    prompt: str = "") -> list[tuple[list[int], list[int]]]:
    """Per text: ``(token ids, pooled flags)`` of the filled template (unpadded)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ConfigError(f"echo max_length must be a positive integer, got {max_length!r}")
    pieces = parse_template(template)
    n = len(texts)
    rows: list[list[int]] = [[] for _ in range(n)]
    flags: list[list[int]] = [[] for _ in range(n)]
    text_ids: list[list[int]] | None = None
    for piece in pieces:
        body = _special(piece.text, tokenizer).replace(PROMPT, prompt)
        if not piece.braced:
            ids = _tokenize(tokenizer, [body])[0] if body else []
            per_text = [ids] * n
        elif body == TEXT:          # the common case: the text alone, tokenised once for both occurrences
            if text_ids is None:
                text_ids = _tokenize(tokenizer, list(texts))
            per_text = [ids[:max_length] for ids in text_ids]
        else:
            filled = [body.replace(TEXT, t) for t in texts] if piece.has_text else [body] * n
            per_text = [ids[:max_length] for ids in _tokenize(tokenizer, filled)]
        flag = 1 if piece.pooled(include_eos) else 0
        for r, ids in enumerate(per_text):
            rows[r].extend(ids)
            flags[r].extend([flag] * len(ids))
    return list(zip(rows, flags))


def pad_echo_rows(rows: Sequence[tuple[list[int], list[int]]], pad_id: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad ``(ids, flags)`` rows into ``(input_ids, attention_mask, pooling_mask)`` int64 tensors."""
    width = max((len(ids) for ids, _ in rows), default=0)
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    attention = np.zeros((len(rows), width), dtype=np.int64)
    pooling = np.zeros((len(rows), width), dtype=np.int64)
    for r, (ids, flags) in enumerate(rows):
        input_ids[r, :len(ids)] = ids
        attention[r, :len(ids)] = 1
        pooling[r, :len(ids)] = flags
    return torch.from_numpy(input_ids), torch.from_numpy(attention), torch.from_numpy(pooling)


def pad_id_of(tokenizer) -> int:
    """The tokenizer's pad id (EOS, then UNK, when it has no pad token)."""
    for name in ("pad_token_id", "eos_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    raise ConfigError("the tokenizer has no pad, EOS or UNK token to pad echo inputs with")


def build_echo_inputs(tokenizer, texts: Sequence[str], template: str, max_length: int, include_eos: bool = False,
                      prompt: str = "") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, pooling_mask)``, each ``(len(texts), L)``, of ``texts`` in ``template``
    (see the module docstring: pieces tokenised separately, braced pieces cut to ``max_length`` each, right
    padding; ``pooling_mask`` marks the second occurrence, plus the EOS piece with ``include_eos``)."""
    return pad_echo_rows(echo_token_rows(tokenizer, texts, template, max_length, include_eos, prompt),
                         pad_id_of(tokenizer))


def marked_mask(attention_mask: torch.Tensor, pooling_mask: torch.Tensor) -> torch.Tensor:
    """One mask carrying both: 0 padding, 1 read, 2 read and pooled (``attention_mask + pooling_mask``)."""
    if attention_mask.shape != pooling_mask.shape:
        raise ConfigError(f"marked_mask: masks of shapes {tuple(attention_mask.shape)} and "
                          f"{tuple(pooling_mask.shape)}")
    if bool(((pooling_mask > 0) & (attention_mask == 0)).any()):
        raise ConfigError("marked_mask: a pooled position is padding")
    return attention_mask.long() + (pooling_mask > 0).long()


def text_token_ids(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """The token ids of each text alone, as its ``{%%text%%}`` piece holds them (cut to ``max_length``)."""
    return [ids[:max_length] for ids in _tokenize(tokenizer, list(texts))]


__all__ = ["ECHO_TEMPLATES", "PLAIN_TEMPLATES", "Piece", "parse_template", "default_templates", "echo_token_rows",
           "pad_echo_rows", "pad_id_of", "build_echo_inputs", "marked_mask", "text_token_ids"]
