"""Echo templates and masks (METHODS.md 4.2, oracle S4) from a fake tokenizer with fixed piece lengths:
layout, pooling positions (second occurrence, EOS only with include_eos), per-braced-piece truncation,
right padding, the plain mode, prompts, BOS/EOS substitution, the marked mask, and refused templates."""
from __future__ import annotations

import math

import pytest
import torch

from harness.encoders.echo_inputs import (
    ECHO_TEMPLATES,
    PLAIN_TEMPLATES,
    build_echo_inputs,
    marked_mask,
    parse_template,
)
from harness.errors import ConfigError
from methods.echo_splade import build_echo_inputs as public_kernel
from methods.splade import splade_pool

# Pieces of the S4 layout: "<s>Document:" = 3 tokens, the text = 3, "\nDocument again:" = 4, "</s>" = 1.
PIECES = {"<s>Document:": [1, 2, 3], "\nDocument again:": [4, 5, 6, 7], "</s>": [9], "<s>Query:": [1, 8],
          "\nQuery again:": [4, 8, 7], "T1 T2 T3": [11, 12, 13], "U1": [21], "<s>Instruct:": [1, 30],
          "be brief,": [31, 32, 33], "\nQuery:": [4, 8]}


class FakeTokenizer:
    """Looks every piece up in a table (an unknown piece fails the test): fixed lengths, no special tokens."""

    bos_token, eos_token, pad_token_id, eos_token_id = "<s>", "</s>", 0, 9

    def __init__(self, table=None):
        self.table = table or PIECES
        self.calls: list[list[str]] = []

    def __call__(self, strings, add_special_tokens=True, **_):
        assert add_special_tokens is False, "echo pieces are tokenised without special tokens"
        self.calls.append(list(strings))
        return {"input_ids": [list(self.table[s]) for s in strings]}


def test_s4_layout_and_pooling_positions():
    tok = FakeTokenizer()
    ids, attention, pooling = build_echo_inputs(tok, ["T1 T2 T3"], ECHO_TEMPLATES["document"], 256)
    assert ids.tolist() == [[1, 2, 3, 11, 12, 13, 4, 5, 6, 7, 11, 12, 13, 9]]
    assert attention.tolist() == [[1] * 14]
    assert torch.nonzero(pooling[0]).flatten().tolist() == [10, 11, 12]          # our SPLADE default
    _, _, with_eos = build_echo_inputs(tok, ["T1 T2 T3"], ECHO_TEMPLATES["document"], 256, include_eos=True)
    pooled = torch.nonzero(with_eos[0]).flatten().tolist()
    assert pooled == [10, 11, 12, 13]                                            # echo's embed_mask: mean pooling
    assert max(pooled) == 13                                                     # echo's "last"
    assert public_kernel is build_echo_inputs
    # the text is tokenised once for both occurrences, each piece on its own
    assert ["T1 T2 T3"] in tok.calls and all("T1 T2 T3" not in s or s == "T1 T2 T3" for c in tok.calls for s in c)


def test_splade_pool_over_the_echo_mask_ignores_first_occurrence_and_eos():
    ids, attention, pooling = build_echo_inputs(FakeTokenizer(), ["T1 T2 T3"], ECHO_TEMPLATES["document"], 256)
    logits = torch.full((1, 14, 4), -1.0)
    logits[0, 3] = torch.tensor([50.0, 0, 0, 0])     # first occurrence: read, never pooled
    logits[0, 13] = torch.tensor([0, 0, 0, 70.0])    # </s>: pooled only with include_eos
    logits[0, 10] = torch.tensor([1.0, -2.0, 0.5, 0.0])
    logits[0, 11] = torch.tensor([math.e - 1, 0.2, -1.0, 3.0])
    w = splade_pool(logits, pooling, "max")[0]
    assert w.tolist() == pytest.approx([1.0, 0.182322, 0.405465, 1.386294], abs=1e-6)   # the S1 numbers
    _, _, with_eos = build_echo_inputs(FakeTokenizer(), ["T1 T2 T3"], ECHO_TEMPLATES["document"], 256, True)
    assert splade_pool(logits, with_eos, "max")[0, 3] == pytest.approx(math.log(71.0))
    assert splade_pool(logits, attention, "max")[0, 0] == pytest.approx(math.log(51.0))   # what a plain mask does


def test_each_braced_piece_is_truncated_separately_and_rows_padded_right():
    ids, attention, pooling = build_echo_inputs(FakeTokenizer(), ["T1 T2 T3", "U1"], ECHO_TEMPLATES["document"], 2)
    # braced text pieces cut to 2 tokens each, the literal pieces kept whole, </s> kept
    assert ids[0].tolist() == [1, 2, 3, 11, 12, 4, 5, 6, 7, 11, 12, 9]
    assert ids[1].tolist() == [1, 2, 3, 21, 4, 5, 6, 7, 21, 9, 0, 0]
    assert attention[1].tolist() == [1] * 10 + [0, 0]
    assert torch.nonzero(pooling[0]).flatten().tolist() == [9, 10]
    assert torch.nonzero(pooling[1]).flatten().tolist() == [8]


def test_plain_mode_pools_the_single_occurrence():
    ids, _, pooling = build_echo_inputs(FakeTokenizer(), ["T1 T2 T3"], PLAIN_TEMPLATES["document"], 256)
    assert ids.tolist() == [[1, 2, 3, 11, 12, 13, 9]]
    assert torch.nonzero(pooling[0]).flatten().tolist() == [3, 4, 5]


def test_prompt_fills_the_instructed_query_template():
    ids, _, pooling = build_echo_inputs(FakeTokenizer(), ["U1"], ECHO_TEMPLATES["query_instructed"], 8,
                                        prompt="be brief")
    assert ids.tolist() == [[1, 30, 31, 32, 33, 4, 8, 21, 4, 8, 7, 21, 9]]
    assert torch.nonzero(pooling[0]).flatten().tolist() == [11]


def test_bos_and_eos_become_the_tokenizers_own():
    class Other(FakeTokenizer):
        bos_token, eos_token = "<|start|>", "<|end|>"

    table = {"<|start|>Document:": [1, 2, 3], "\nDocument again:": [4, 5, 6, 7], "<|end|>": [99], "U1": [21]}
    ids, _, _ = build_echo_inputs(Other(table), ["U1"], ECHO_TEMPLATES["document"], 8)
    assert ids.tolist() == [[1, 2, 3, 21, 4, 5, 6, 7, 21, 99]]


def test_marked_mask_carries_both_masks():
    _, attention, pooling = build_echo_inputs(FakeTokenizer(), ["T1 T2 T3", "U1"], ECHO_TEMPLATES["document"], 256)
    marked = marked_mask(attention, pooling)
    assert marked[1].tolist() == [1] * 8 + [2, 1] + [0] * 4
    assert torch.equal(marked == 2, pooling.bool()) and torch.equal(marked > 0, attention.bool())
    with pytest.raises(ConfigError, match="padding"):
        marked_mask(torch.tensor([[1, 0]]), torch.tensor([[0, 1]]))


@pytest.mark.parametrize("template, message", [
    ("<s>Document:{!%%text%%}{</s>}", "no braced"),                    # the text is only read, never pooled
    ("<s>Document: %%text%%{</s>}", "outside braces"),
    ("<s>Document:{%%txt%%}", "unknown variable"),
    ("<s>Document:{%%text%%", "unbalanced brace"),
    ("<s>Document:{!%%text%%}}{%%text%%}", "unbalanced brace"),
    ("", "non-empty"),
])
def test_bad_templates_are_refused(template, message):
    with pytest.raises(ConfigError, match=message):
        parse_template(template)


def test_template_pieces_follow_the_reference_parser():
    pieces = parse_template(ECHO_TEMPLATES["query_instructed"])
    assert [(p.text, p.braced, p.embed) for p in pieces] == [
        ("<s>Instruct:", False, False), ("%%prompt%%,", True, False), ("\nQuery:", False, False),
        ("%%text%%", True, False), ("\nQuery again:", False, False), ("%%text%%", True, True), ("</s>", True, True)]
