"""Tiny random-initialised Hugging Face models with a tokenizer over a world's vocabulary.

``make_tiny_model`` writes a folder that ``transformers.AutoModel`` and
``AutoTokenizer`` load offline: a BERT encoder (optionally saved with its
masked-LM head) or a Llama-architecture decoder (saved with its tied LM head, so
``AutoModelForCausalLM`` works too), a fast WordPiece tokenizer, and
``harness_encoder.json`` with the encoder defaults (pooling, normalisation, EOS,
max lengths).  The decoder is Llama rather than Qwen2 because recent transformers
versions load a ``qwen2`` folder's tokenizer with Qwen2's own class, which rebuilds
a byte-level pipeline and ignores ``tokenizer.json``'s pre-tokenizer; the saved
``tokenizer_config.json`` names the generic ``PreTrainedTokenizerFast`` for the
same reason.

The tokenizer normalises with NFKC and lower-casing, makes every CJK character
its own piece (as Chinese BERT models do), then splits on spaces and punctuation.
CJK and Thai have no spaces, so a plain word-level vocabulary would see whole
sentences as one unknown word; here an unspaced Thai run is segmented by
WordPiece's greedy longest match into the Thai vocabulary words (``w`` and
``##w`` entries), with single characters as the fallback.  The vocabulary holds
every word of the world's spaced scripts, the Thai words, every character the
world uses, the prompt words, and single-character pieces (``x`` and ``##x``) for
all of them plus printable ASCII, Latin-1/Latin Extended-A letters, Cyrillic,
Thai and the basic CJK block, so any text in these scripts or in English
tokenises without ``[UNK]`` (about 37k entries for the default world).
"""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import ConfigError
from harness.io import atomic_dir

if TYPE_CHECKING:   # annotations only: the writer imports both modules (no import cycle)
    from harness.synthetic.world import World

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[EOS]")
KINDS = ("bert", "decoder")
QUERY_MAX_LENGTH = 32
DOC_MAX_LENGTH = 64
# CJK ideographs (with extension A and compatibility ideographs) and CJK/fullwidth
# punctuation become one piece per character, as in Chinese BERT models.
_CJK_CHARS = r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]"
# A Thai run becomes one pre-token that WordPiece segments greedily into vocabulary words.
_THAI_RUN = r"[\u0e00-\u0e7f]+"
_CJK_RE = re.compile(_CJK_CHARS)
_UNSPACED_RE = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef\u0e00-\u0e7f]+")
# A Thai run is one WordPiece "word"; longer runs would become a single [UNK].
MAX_RUN_CHARS = 1000


def _backend_tokenizer(vocab: dict[str, int] | None = None):
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.WordPiece(vocab or {"[UNK]": 0}, unk_token="[UNK]", max_input_chars_per_word=MAX_RUN_CHARS))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_CJK_CHARS), behavior="isolated"),
        pre_tokenizers.Split(Regex(_THAI_RUN), behavior="isolated"),
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Punctuation(behavior="isolated"),
    ])
    return tok


def build_vocabulary(world: World) -> list[str]:
    """Special tokens, single-character pieces, then whole words (each group sorted).

    Words of unspaced alphabetic scripts (Thai) enter twice, as ``w`` and ``##w``, so
    that WordPiece's greedy longest match segments an unspaced run into words, falling
    back to single characters for anything unknown.
    """
    splitter = _backend_tokenizer()
    normalise = splitter.normalizer.normalize_str
    normalised = normalise("\n".join([*world.texts(), *world.prompt_words()]))
    chars = {c for c in set(normalised) if not c.isspace()} | _covered_characters(normalise)
    # Pre-tokenise each distinct space-separated chunk once, without its unspaced runs.
    pieces: set[str] = set()
    for chunk in set(normalised.split()):
        for part in _UNSPACED_RE.split(chunk):
            if part:
                pieces.update(piece for piece, _ in splitter.pre_tokenizer.pre_tokenize_str(part))
    for lang in world.languages.values():
        if not lang.script.spaced and lang.script.name != "cjk":
            words = {normalise(w) for w in lang.words()}
            pieces.update(words)
            pieces.update("##" + w for w in words)
    singles = sorted(chars)
    # CJK characters are always isolated, so they never need a "##" continuation form.
    continuations = ["##" + c for c in singles if not _CJK_RE.fullmatch(c)]
    return list(SPECIAL_TOKENS) + singles + continuations + sorted(pieces - set(singles))


def _covered_characters(normalise) -> set[str]:
    """Characters every tiny tokenizer knows, used or not: printable ASCII, Latin-1 and
    Latin Extended-A letters, Cyrillic, Thai, and the basic CJK block (so real text in
    these scripts never collapses into [UNK])."""
    ranges = [(0x21, 0x7E), (0xC0, 0x17F), (0x400, 0x4FF), (0xE01, 0xE5B), (0x3001, 0x303F), (0x4E00, 0x9FFF)]
    out = set()
    for lo, hi in ranges:
        for code in range(lo, hi + 1):
            c = normalise(chr(code))
            if len(c) == 1 and not c.isspace() and unicodedata.category(c)[0] != "C":
                out.add(c)
    return out


def build_tokenizer(world: World, kind: str = "bert", model_max_length: int = 256):
    """A ``PreTrainedTokenizerFast`` over the world's vocabulary (see the module docstring)."""
    from tokenizers import decoders, processors
    from transformers import PreTrainedTokenizerFast

    _check_kind(kind)
    vocab = {token: i for i, token in enumerate(build_vocabulary(world))}
    tok = _backend_tokenizer(vocab)
    tok.decoder = decoders.WordPiece(prefix="##")
    if kind == "bert":
        cls, sep = vocab["[CLS]"], vocab["[SEP]"]
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        return PreTrainedTokenizerFast(
            tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
            mask_token="[MASK]", model_max_length=model_max_length)
    # Decoder: no template; the encoder appends [EOS] itself (append_eos), as for Qwen/Llama.
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]",
        model_max_length=model_max_length)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigError(f"unknown tiny model kind {kind!r} (choose from {KINDS})")


def _config(kind: str, vocab_size: int, tokenizer, hidden: int, layers: int, heads: int, max_positions: int):
    from transformers import BertConfig, LlamaConfig

    if kind == "bert":
        return BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                          num_attention_heads=heads, intermediate_size=4 * hidden,
                          max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id)
    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=heads, intermediate_size=4 * hidden,
                       max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=True)


def encoder_defaults(kind: str) -> dict:
    """The ``harness_encoder.json`` content for a tiny model of this kind."""
    _check_kind(kind)
    return {"pooling": "mean" if kind == "bert" else "last", "normalize": True, "append_eos": kind == "decoder",
            "query_max_length": QUERY_MAX_LENGTH, "doc_max_length": DOC_MAX_LENGTH}


def make_tiny_model(directory: str | Path, world: World, hidden: int = 32, layers: int = 2, heads: int = 2,
                    seed: int = 0, kind: str = "bert", max_positions: int = 256, mlm_head: bool = False) -> Path:
    """Write a tiny random model, its tokenizer and ``harness_encoder.json`` into ``directory``.

    ``kind="bert"`` gives a BERT encoder (mean pooling; with ``mlm_head`` saved as a
    masked LM, for SPLADE-style tests), ``kind="decoder"`` a Llama-architecture causal
    LM (last-token pooling, EOS appended; the same block structure as Qwen/Mistral).
    Weights depend only on the seed and the sizes: the same call writes the same bytes.
    The directory is written atomically (built under a temporary name, then renamed).
    """
    import torch
    from transformers import BertForMaskedLM, BertModel, LlamaForCausalLM

    _check_kind(kind)
    if hidden % heads:
        raise ConfigError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    tokenizer = build_tokenizer(world, kind, model_max_length=max_positions)
    config = _config(kind, len(tokenizer), tokenizer, hidden, layers, heads, max_positions)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model_class = LlamaForCausalLM if kind == "decoder" else BertForMaskedLM if mlm_head else BertModel
        model = model_class(config)
    directory = Path(directory)
    with atomic_dir(directory, is_ours=lambda p: (p / "harness_encoder.json").is_file(),
                    what="a tiny model written by the harness") as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _portable_tokenizer_config(tmp / "tokenizer_config.json")
        (tmp / "harness_encoder.json").write_text(json.dumps(encoder_defaults(kind), indent=2) + "\n")
    return directory


def _portable_tokenizer_config(path: Path) -> None:
    """Name the generic fast tokenizer class, which every transformers version resolves
    to "load tokenizer.json as is" (newer versions otherwise pick a model-specific class
    for some model types, which rebuilds the pipeline and ignores our pre-tokenizer)."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def tiny_model_fingerprint(world_fingerprint: str, **options) -> str:
    """Identity of a tiny model: the world's fingerprint and the ``make_tiny_model`` options."""
    canon = json.dumps({"world": world_fingerprint, **options}, sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()
