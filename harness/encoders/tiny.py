"""Tiny random backbones for the ``tiny`` scale: tests and CI that run in seconds, offline.

* :func:`make_tiny_bert` - a 2-layer BERT (hidden 32) with the real MiniLM WordPiece
  tokenizer, so it reads real text exactly as the real model would.
* :func:`make_tiny_decoder` - a 2-layer Llama-style decoder with a small word-level
  tokenizer that adds BOS but, like Qwen1.5 and Llama-3, no EOS: the case that needs
  ``append_eos`` for last-token pooling.  ``lm_head="untied"`` saves it with its own LM head
  (Mistral/Llama-2 style, the Echo-Mistral-SPLADE case), ``"tied"`` with the head tied to the
  input embeddings (SmolLM2/BERT style).
* :func:`untie_lm_head` - a copy of a causal-LM folder whose LM head is a separate parameter.

The weights are random but seeded, so the same call gives the same model.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from harness.encoders.backbone import resolve_model
from harness.encoders.refs import save_untied_copy
from harness.encoders.settings import EncoderSettings, write_encoder_config
from harness.errors import ConfigError

# A small closed vocabulary: enough words to write test sentences with.
TINY_WORDS = (
    "the a an of to in on for with and or not is are was be this that it as by at from "
    "query document passage text model search find retrieve rank score good bad fast slow "
    "cat dog bird fish tree river city house car road book paper science study result cell "
    "protein gene drug effect cause risk patient health water energy light sound red green blue "
    "one two three four five six seven eight nine ten small large long short new old first last"
).split()


def make_tiny_bert(path: str | Path, *, hidden: int = 32, layers: int = 2, heads: int = 2,
                   intermediate: int = 64, seed: int = 0, tokenizer: str = "minilm",
                   settings: EncoderSettings | None = None) -> Path:
    """Save a seeded random BERT with ``tokenizer``'s vocabulary to ``path``; return ``path``.

    With ``settings`` a ``harness_encoder.json`` is written too (as the trainer does).
    """
    from transformers import AutoTokenizer, BertConfig, BertModel

    path = Path(path)
    tok_path, _ = resolve_model(tokenizer)
    tok = AutoTokenizer.from_pretrained(tok_path)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=intermediate, max_position_embeddings=512)
    torch.manual_seed(seed)
    model = BertModel(config).eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    if settings is not None:
        write_encoder_config(path, settings)
    return path


LM_HEADS = ("none", "tied", "untied")


def make_tiny_decoder(path: str | Path, *, hidden: int = 32, layers: int = 2, heads: int = 2,
                      intermediate: int = 64, seed: int = 0, settings: EncoderSettings | None = None,
                      lm_head: str = "none") -> Path:
    """Save a seeded random Llama-style decoder whose tokenizer adds BOS but no EOS.

    ``lm_head``: ``"none"`` saves the bare ``LlamaModel``; ``"tied"`` a ``LlamaForCausalLM`` whose head
    is the input embedding matrix; ``"untied"`` one whose head is its own parameter, initialised as a
    copy of the embeddings (so its logits start out meaning tokens, as a pretrained untied head does,
    and can drift apart from them when trained).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel, PreTrainedTokenizerFast

    if lm_head not in LM_HEADS:
        raise ConfigError(f"make_tiny_decoder: lm_head must be one of {', '.join(LM_HEADS)}, got {lm_head!r}")

    path = Path(path)
    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials + list(dict.fromkeys(TINY_WORDS)))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", model_max_length=512)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=intermediate,
                         max_position_embeddings=512, pad_token_id=vocab["<pad>"], bos_token_id=vocab["<s>"],
                         eos_token_id=vocab["</s>"], tie_word_embeddings=lm_head == "tied")
    torch.manual_seed(seed)
    model: Any = LlamaModel(config) if lm_head == "none" else LlamaForCausalLM(config)
    if lm_head == "untied":
        with torch.no_grad():
            model.get_output_embeddings().weight.copy_(model.get_input_embeddings().weight)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    if settings is not None:
        write_encoder_config(path, settings)
    return path


def untie_lm_head(source: str | Path, path: str | Path) -> Path:
    """Save a copy of the causal-LM folder ``source`` into ``path`` with an untied LM head (a separate
    parameter holding the same values), tokenizer and ``harness_encoder.json`` included."""
    save_untied_copy(Path(resolve_model(str(source))[0]), Path(path))
    return Path(path)
