"""RetroMAE pre-training (Liu and Shao 2022), the MAE-style stage paper 002 runs before PEG's fine-tuning.

Paper 002 ("Training", eq. 1): the corrupted text X^ is encoded into one embedding e_X^, from which a
lightweight decoder reconstructs the clean text X: L_pt = sum_{x in X} -log Dec(x | e_X^).  It cites
RetroMAE for the objective; RetroMAE's own recipe is what is built here:

* **Encoder**: BERT masked-language modelling on the text with ``encoder_mask_rate`` (0.3) of its tokens
  masked in whole words (a ``##`` piece joins the token before it; 80% [MASK], 10% a random token, 10%
  kept); the sentence embedding e_X^ is the encoder's last hidden state at [CLS].  Its MLM cross-entropy is
  the first term of the loss.
* **Enhanced decoder** (one transformer layer, :class:`EnhancedDecoderLayer`): two streams.  The query
  stream H1 is e_X^ plus the backbone's position embedding at every position (no LayerNorm, as the
  released ``modeling.py``); the key/value stream H2 is [e_X^, the backbone's embeddings of the *clean*
  tokens x_1..x_L] (its whole embedding block: positions, token types, LayerNorm).  Row i attends to the
  positions *not* in one of ``min(L, 256)`` whole-word masks drawn at ``decoder_mask_rate`` (0.5), one
  picked at random per row, never to itself, always to e_X^ (position 0) except at i = 0.  The decoder's
  output goes through the backbone's own MLM head, and every non-special token is a target: the second
  term.  The loss is the sum of the two token-mean cross-entropies (RetroMAE's ``loss + lm_out.loss``).
* Only the encoder is kept: the decoder lives in the representation head, which the saved model
  folder does not contain (the trainer saves the backbone), so fine-tuning starts from the encoder.

The decoder runs inside the model's forward (the head's), so under DDP its parameters are in the
forward's graph and their gradients are reduced like the encoder's; the masks of each text are seeded
by (run seed, micro-batch, the text's place in the global batch), so 2 processes draw what 1 process
draws.  The stage's training data is the corpora named in its options (BEIR-layout folders or
``corpus.jsonl``); the fine-tuning collection given to it is not used.  A document is prepared as the released
``examples/pretrain/preprocess.py`` prepares one (option ``long_texts: blocks``): its title and text joined,
split into sentences, the sentences packed into blocks of ``doc_max_length`` tokens (512 in the paper preset)
less the special tokens, each block an example cut at that length; ``long_texts: truncate`` keeps one example
per document, cut at the length (what the stage did before the option existed).

Settings of paper 002 ("Implementation details", pre-training): AdamW, lr 2e-5 with linear decay,
32 texts per GPU on 32 GPUs (1024 per step), maximum length 512, 3 epochs over Wudao (59M title-body
texts, "Dataset Source"): ceil(3 x 59e6 / 1024) = 172852 steps.  RetroMAE's masking rates (0.3 / 0.5)
(src/pretrain/arguments.py) and its 256-mask pool (src/pretrain/data.py) come from its released code
(staoxiao/RetroMAE); paper 002 does not state them.  The backbone must be a BERT-style masked LM
(``AutoModelForMaskedLM`` whose ``embeddings`` block has ``position_embeddings``, with a ``cls`` or ``lm_head``
MLM head).
"""
from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.data.beir import read_corpus
from harness.data.collections import TrainingData, TrainingSource
from harness.data.training import TrainingRow
from harness.encoders.heads import DenseHead
from harness.errors import ConfigError
from harness.method import Method, register_method
from harness.recipe import option, preset, rebased
from harness.train.api import Prepared, StageResult, ViewBatch
from methods.coco_spans import corpus_dir, split_sentences
from methods.uniform import _PAPER as _UNIFORM_PAPER

if TYPE_CHECKING:
    from harness.train.api import EncodedBatch, LossOutput, TrainContext, TrainSpec

log = logging.getLogger(__name__)
IGNORE = -100
_MASK_STREAM = 0x8E7A
MASK_POOL = 256


# ---------------------------------------------------------------------- masks
def word_starts(tokens: Sequence[str]) -> list[int]:
    """The index of the word each token belongs to (a ``##`` piece joins the previous token's word)."""
    word, out = -1, []
    for i, tok in enumerate(tokens):
        if i == 0 or not tok.startswith("##"):
            word += 1
        out.append(word)
    return out


def whole_word_masks(words: Sequence[int], maskable: Sequence[bool], rate: float, rng: np.random.Generator,
                     count: int = 1, max_predictions: int = 512) -> np.ndarray:
    """``count`` boolean masks over tokens (``(count, n_tokens)``), each covering ``max(1, round(n_tokens *
    rate))`` tokens in whole words.

    As the whole-word-mask collator RetroMAE's collator builds on (transformers'
    ``DataCollatorForWholeWordMask._whole_word_mask``): the count is of *tokens* (special ones included in
    ``n_tokens``), the maskable words are taken in a random order, a word that would overshoot the count is
    skipped.  Vectorised over the masks (one pass over the word positions), so the 256-mask pool of a
    512-token text costs milliseconds."""
    n_tokens = len(words)
    out = np.zeros((count, n_tokens), dtype=bool)
    token_word = np.asarray(words, dtype=np.int64)
    ok = np.asarray(maskable, dtype=bool)
    if not ok.any():
        return out
    ids, inverse = np.unique(token_word[ok], return_inverse=True)      # maskable words, in order
    lengths = np.bincount(inverse, minlength=len(ids))
    target = min(max_predictions, max(1, int(round(n_tokens * rate))))
    keys = rng.random((count, len(ids)))                                 # a random order of the words per mask
    chosen = np.zeros((count, len(ids)), dtype=bool)
    rows = np.arange(count)
    if (lengths == 1).all():        # one token per word (Chinese characters): the first `target` words
        take = min(target, len(ids))
        first = np.argpartition(keys, take - 1, axis=1)[:, :take] if take < len(ids) else np.argsort(keys, axis=1)
        chosen[rows[:, None], first] = True
    else:
        order = np.argsort(keys, axis=1)
        covered = np.zeros(count, dtype=np.int64)
        for j in range(len(ids)):
            if (covered >= target).all():
                break
            word = order[:, j]
            take_j = covered + lengths[word] <= target
            chosen[rows, word] = take_j
            covered += np.where(take_j, lengths[word], 0)
    out[:, ok] = chosen[:, inverse]
    return out


def whole_word_mask(words: Sequence[int], maskable: Sequence[bool], rate: float,
                    rng: np.random.Generator, max_predictions: int = 512) -> np.ndarray:
    """One mask of :func:`whole_word_masks`."""
    return whole_word_masks(words, maskable, rate, rng, 1, max_predictions)[0]


def decoder_attention(words: Sequence[int], maskable: Sequence[bool], rate: float, rng: np.random.Generator,
                      pool: int = MASK_POOL) -> np.ndarray:
    """RetroMAE's enhanced-decoding attention matrix (L, L), True = may attend.

    ``min(L, pool)`` whole-word masks at ``rate`` are drawn; row i takes one at random, masks its own
    position too, and sees every position that is not masked (special tokens and e_X^ at 0 stay
    visible)."""
    length = len(words)
    if not length:
        return np.zeros((0, 0), dtype=bool)
    masks = whole_word_masks(words, maskable, rate, rng, min(length, pool))
    hidden = masks[rng.integers(0, len(masks), size=length)]
    hidden[np.arange(length), np.arange(length)] = True
    return ~hidden


def corrupt(ids: np.ndarray, mask: np.ndarray, mask_id: int, vocab: int, rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray]:
    """BERT's 80/10/10 rule on the chosen positions: ``(corrupted ids, labels)`` (labels -100 elsewhere)."""
    labels = np.where(mask, ids, IGNORE)
    draw = rng.random(len(ids))
    random_ids = rng.integers(0, vocab, size=len(ids))
    out = ids.copy()
    out[mask & (draw < 0.8)] = mask_id
    swap = mask & (draw >= 0.8) & (draw < 0.9)
    out[swap] = random_ids[swap]
    return out, labels


# ---------------------------------------------------------------------- the decoder
class EnhancedDecoderLayer(nn.Module):
    """One BERT layer whose attention reads queries from one stream and keys/values from another
    (RetroMAE's ``BertLayerForDecoder``): post-LN attention with a residual on the query stream, then the
    feed-forward block."""

    def __init__(self, hidden: int, heads: int, intermediate: int, dropout: float = 0.1,
                 attention_dropout: float = 0.1, eps: float = 1e-12):
        super().__init__()
        if hidden % heads:
            raise ConfigError(f"RetroMAE decoder: hidden size {hidden} is not a multiple of {heads} heads")
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out, self.attn_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=eps)
        self.inter, self.out = nn.Linear(hidden, intermediate), nn.Linear(intermediate, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout, self.attention_dropout = nn.Dropout(dropout), nn.Dropout(attention_dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, query: torch.Tensor, key_value: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``query`` (B, L, H), ``key_value`` (B, L, H), ``allowed`` (B, L, L) bool -> (B, L, H)."""
        q, k, v = self._split(self.query(query)), self._split(self.key(key_value)), self._split(self.value(key_value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~allowed[:, None], torch.finfo(scores.dtype).min)
        probs = self.attention_dropout(scores.softmax(-1))
        ctx = (probs @ v).transpose(1, 2).reshape(query.shape)
        h = self.attn_norm(self.dropout(self.attn_out(ctx)) + query)
        return self.out_norm(self.dropout(self.out(F.gelu(self.inter(h)))) + h)


def _mlm_parts(backbone: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The embedding block (taking ``inputs_embeds``) and the MLM head of a BERT-style masked LM."""
    base = getattr(backbone, "base_model", None)
    embeddings = getattr(base, "embeddings", None)
    head = getattr(backbone, "cls", None) or getattr(backbone, "lm_head", None)
    if embeddings is None or head is None or not hasattr(embeddings, "position_embeddings"):
        raise ConfigError(f"RetroMAE needs a BERT-style masked LM (embeddings block and MLM head); "
                          f"{type(backbone).__name__} has none")
    return embeddings, head


class RetroMAEHead(DenseHead):
    """[CLS] of the encoder (the sentence embedding) plus the enhanced decoder and both losses.

    The trainer encodes the masked texts through the model; this head's forward then runs the decoder on
    the clean tokens set by the method (:meth:`set_targets`) and keeps the two losses in ``terms``.  The
    embedding it returns carries an exact +0.0 from the decoder's logits, so the decoder is in the forward's
    graph (DDP's unused-parameter search)."""

    backbone_kind = "masked-lm"

    def __init__(self, normalize: bool = False):
        super().__init__("cls", normalize)
        self.decoder: EnhancedDecoderLayer | None = None
        self.targets: dict[str, torch.Tensor] | None = None
        self.terms: dict[str, torch.Tensor] = {}
        self._parts: tuple[nn.Module, nn.Module] | None = None

    def prepare_backbone(self, backbone: nn.Module) -> None:
        config: Any = backbone.config
        config.output_hidden_states = True
        embeddings, mlm_head = _mlm_parts(backbone)
        # Shared with the backbone, not registered twice (object.__setattr__ bypasses nn.Module).
        object.__setattr__(self, "_parts", (embeddings, mlm_head))
        self.decoder = EnhancedDecoderLayer(config.hidden_size, config.num_attention_heads, config.intermediate_size,
                                            getattr(config, "hidden_dropout_prob", 0.1),
                                            getattr(config, "attention_probs_dropout_prob", 0.1),
                                            getattr(config, "layer_norm_eps", 1e-12))
        init = getattr(backbone, "_init_weights", None)
        if init is not None:
            self.decoder.apply(init)

    def set_targets(self, targets: Mapping[str, torch.Tensor]) -> None:
        """The clean ids, decoder attention, decoder labels and encoder labels of the next forward."""
        self.targets = dict(targets)

    def forward(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = outputs.hidden_states[-1]
        emb = super().forward(type("Outputs", (), {"last_hidden_state": hidden})(), attention_mask)
        if self.targets is None or self.decoder is None or self._parts is None:
            return emb                      # plain encoding (no targets set): the embedding only
        t = {k: v.to(hidden.device) for k, v in self.targets.items()}
        self.targets = None
        embeddings, mlm_head = self._parts
        position_embeddings: Any = embeddings.position_embeddings
        enc_loss = F.cross_entropy(outputs.logits.float().flatten(0, 1), t["encoder_labels"].flatten(),
                                   ignore_index=IGNORE, reduction="none").view(t["encoder_labels"].shape)
        cls = hidden[:, :1]                                              # e_X^ (B, 1, H)
        tokens = embeddings(input_ids=t["input_ids"])                   # clean tokens + positions
        key_value = torch.cat([cls, tokens[:, 1:]], dim=1)
        positions = torch.arange(hidden.shape[1], device=hidden.device)
        query = position_embeddings(positions)[None] + cls    # e_X^ + positions
        logits = mlm_head(self.decoder(query, key_value, t["decoder_attention"].bool()))
        dec_loss = F.cross_entropy(logits.float().flatten(0, 1), t["decoder_labels"].flatten(),
                                   ignore_index=IGNORE, reduction="none").view(t["decoder_labels"].shape)
        self.terms = {"encoder": enc_loss, "encoder_mask": t["encoder_labels"] != IGNORE,
                      "decoder": dec_loss, "decoder_mask": t["decoder_labels"] != IGNORE}
        return emb + logits[..., :0].sum().to(emb.dtype)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "backbone": "masked-lm", "decoder": "retromae-enhanced (not saved)"}


def retromae_loss(terms: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, per-text losses)``: the token means of the encoder MLM and decoder reconstruction losses,
    summed (RetroMAE), and each text's own sum of its two token means (for the log)."""
    enc, dec = terms["encoder"], terms["decoder"]
    enc_n, dec_n = terms["encoder_mask"].sum(1), terms["decoder_mask"].sum(1)
    loss = enc.sum() / enc_n.sum().clamp(min=1) + dec.sum() / dec_n.sum().clamp(min=1)
    per_text = enc.sum(1) / enc_n.clamp(min=1) + dec.sum(1) / dec_n.clamp(min=1)
    return loss, per_text


# ---------------------------------------------------------------------- data
LONG_TEXTS = ("blocks", "truncate")


def released_text(title: str, text: str) -> str:
    """A document's pre-training text as the released preprocessing joins it (staoxiao/RetroMAE
    examples/pretrain/preprocess.py, create_passage_data): ``title + ' ' + text`` when the title has more than 2
    characters, else the text alone."""
    return title + " " + text if len(title) > 2 else text


def pack_blocks(sentence_lengths: Sequence[int], target: int) -> list[list[int]]:
    """Sentence indices per block, the released packing rule (preprocess.py ``*_pad_each_line`` with its default
    ``short_seq_prob`` 0): sentences are appended to the current block in order, and before each one the block is
    closed if it already holds ``target`` tokens or more; so a block may run past ``target`` (the collator cuts it
    there, dropping the overshoot) and only the last block of a document may be shorter."""
    blocks: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i, n in enumerate(sentence_lengths):
        if size >= target:
            blocks.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        blocks.append(current)
    return blocks


def document_blocks(text: str, tokenizer: Any, max_length: int) -> list[str]:
    """The pre-training examples of one document under the released preprocessing: its sentences, tokenized
    without special tokens, packed into blocks of ``max_length`` minus the special tokens (:func:`pack_blocks`);
    each block is the text of its sentences joined by spaces, whose tokens are the sentences' tokens in order
    (a BERT word-piece tokenizer splits at whitespace first), cut at ``max_length`` with the special tokens by
    :meth:`RetroMAE.make_batch` as the released collator cuts ``token_ids[:max_length - 2]``.

    Sentences: the released code splits with nltk's punkt (English model); the rule splitter of
    :func:`methods.coco_spans.split_sentences` stands in (``.!?`` + whitespace, and the CJK full stops, at which
    English punkt does not split: a Chinese document there is one sentence, so one block cut at the length)."""
    sentences = split_sentences(text)
    if not sentences:
        return []
    target = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if target < 1:
        raise ConfigError(f"RetroMAE: max length {max_length} leaves no room beside the special tokens")
    ids = tokenizer(sentences, add_special_tokens=False)["input_ids"]
    return [" ".join(sentences[i] for i in block) for block in pack_blocks([len(x) for x in ids], target)]


def text_sources(corpora: Sequence[str | Path], tokenizer: Any = None, *, long_texts: str = "truncate",
                 max_length: int = 512) -> TrainingData:
    """One training source per corpus: ``blocks`` (the released preprocessing): a row per block of each document
    (:func:`document_blocks`, ``pos`` = the block's text; ids ``<doc>`` for a document's first block and
    ``<doc>#<k>`` for the k-th after it); ``truncate``: a row per document (its title and text joined, as
    BEIR's passages), which make_batch cuts at the length, so what a long document has past it is not seen."""
    if not corpora:
        raise ConfigError("RetroMAE needs at least one pre-training corpus: method option 'corpora' "
                          "(BEIR-layout folders or corpus.jsonl files)")
    if long_texts not in LONG_TEXTS:
        raise ConfigError(f"RetroMAE long_texts must be one of {', '.join(LONG_TEXTS)}, got {long_texts!r}")
    if long_texts == "blocks" and tokenizer is None:
        raise ConfigError("RetroMAE long_texts 'blocks' packs sentences by the model's tokenizer: pass it")
    sources: list[TrainingSource] = []
    for i, entry in enumerate(corpora):
        file = corpus_dir(entry)
        corpus = read_corpus(file)
        rows: list[TrainingRow] = []
        if long_texts == "truncate":
            rows = [TrainingRow(doc_id, [text], []) for doc_id, text in zip(corpus.ids, corpus.passages()) if text]
        else:
            for doc_id, title, body in zip(corpus.ids, corpus.titles, corpus.texts):
                blocks = document_blocks(released_text(title, body), tokenizer, max_length)
                rows += [TrainingRow(doc_id if k == 0 else f"{doc_id}#{k}", [block], [])
                         for k, block in enumerate(blocks)]
        if not rows:
            raise ConfigError(f"RetroMAE corpus {file}: no document has text")
        name = file.parent.name if file.name.startswith("corpus.") else file.name.split(".")[0]
        # the blocks depend on the length; a truncated corpus keeps the fingerprint it had before the option
        identity = corpus.content_hash() + (f"/blocks/{max_length}" if long_texts == "blocks" else "")
        digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        sources.append(TrainingSource(name=f"{name}-{i}" if any(s.name == name for s in sources) else name,
                                      rows=rows, path=str(file), fingerprint="retromae-" + digest))
    return TrainingData(sources)


# ---------------------------------------------------------------------- presets
_PAPER_PT = {
    **_UNIFORM_PAPER,
    "model": "hfl/chinese-roberta-wwm-ext-large", "pooling": "cls", "similarity": "cos", "normalize": None,
    "n_hard_negatives": 0, "in_batch_negatives": False, "cross_batch_negatives": False,
    "use_instructions": False, "instruction_template": "{text}", "symmetric_doc_prompt": False, "temperature": 1.0,
    "append_eos": False, "query_max_length": 512, "doc_max_length": 512,
    "batch_size": 1024, "grad_accum": 1, "sampling": "mixed", "steps": 172852, "warmup_steps": 0,
    "lr": 2e-5, "schedule": "linear", "min_lr_ratio": 0.0, "weight_decay": 0.01, "max_grad_norm": 1.0,
    "precision": "bf16", "gradient_checkpointing": True, "lora": None, "dropout": True, "seed": 42,
    "save_every": 5000,
}
_IMPL = "paper 002 \"Implementation details\" (pre-training)"
PAPER = preset(_PAPER_PT, _IMPL + ": AdamW, lr 2e-5 linear decay, 32 per GPU x 32 GPUs, length 512, 3 epochs", [
    ("paper 002 \"Dataset Source\": 3 epochs over Wudao's 59M texts at 1024 per step = 172852 steps",
     ["steps"]),
    ("paper 002 \"Implementation details\": BERT-large; a public Chinese BERT-large checkpoint stands in",
     ["model"]),
    ("code staoxiao/RetroMAE src/pretrain/modeling.py: the sentence embedding is [CLS]", ["pooling"]),
    ("code staoxiao/RetroMAE src/pretrain (HF Trainer defaults: no warm-up, weight decay as AdamW's, clipping "
     "1.0, dropout on)", ["warmup_steps", "weight_decay", "max_grad_norm", "dropout", "min_lr_ratio"]),
    ("code staoxiao/RetroMAE src/pretrain (data.py, modeling.py): one raw text per example, no negatives, no "
     "instruction, the corpus shuffled as one ([CLS] ... [SEP], texts cut at 512 tokens)", [
        "similarity", "normalize", "n_hard_negatives", "in_batch_negatives", "cross_batch_negatives",
        "use_instructions", "instruction_template", "symmetric_doc_prompt", "temperature", "append_eos",
        "query_max_length", "sampling"]),
    ("harness default: H800 training in bf16 with checkpointing; one forward per step; seed 42; save every 5000",
     ["precision", "gradient_checkpointing", "grad_accum", "lora", "seed", "save_every"]),
])
_SMALL_PT = {**_PAPER_PT, "model": "minilm", "doc_max_length": 128, "query_max_length": 128, "batch_size": 16,
             "steps": 50, "lr": 1e-4, "precision": "fp32", "gradient_checkpointing": False, "save_every": 0}
SMALL = rebased(PAPER, _SMALL_PT, "harness default: a CPU run in minutes")
TINY = rebased(SMALL, {**_SMALL_PT, "doc_max_length": 64, "query_max_length": 64, "batch_size": 8, "steps": 20,
                       "lr": 1e-3, "progress": False}, "harness default: a tiny model in seconds")

_COLLATOR = "code staoxiao/RetroMAE src/pretrain/data.py (RetroMAECollator)"
_ARGS = "code staoxiao/RetroMAE src/pretrain/arguments.py"


@dataclass(frozen=True)
class RetroMAEOptions:
    """The corpora and the masking of RetroMAE pre-training."""

    corpora: list[str] = option([], doc="corpus folders or files of raw texts (required; Wudao in paper 002)",
                                source="harness default: none; a run names its pre-training corpora")
    encoder_mask_rate: float = option(0.3, doc="share of tokens (whole words) masked in the encoder's input",
                                      bounds="(0, 1)", source=_ARGS + " (encoder_mlm_probability 0.3)")
    decoder_mask_rate: float = option(0.5, doc="share of tokens (whole words) each decoder row cannot see",
                                      bounds="(0, 1)", source=_ARGS + " (decoder_mlm_probability 0.5)")
    mask_pool: int = option(MASK_POOL, doc="decoder masks drawn per text (each row picks one)", bounds="[1, inf)",
                            source=_COLLATOR + " (min(len, 256) masks per text)")
    long_texts: str = option("blocks", choices=LONG_TEXTS,
                             doc="a document longer than the length: 'blocks' splits it into sentence-packed "
                                 "examples of the length (the released preprocessing); 'truncate' keeps its first "
                                 "tokens only",
                             source="code staoxiao/RetroMAE examples/pretrain/preprocess.py (create_passage_data, "
                                    "create_wiki_data: sentences packed into blocks of max_seq_length - 2 tokens, "
                                    "each block an example) and src/pretrain/data.py (each example cut at that "
                                    "length)")


@register_method("retromae")
class RetroMAE(Method):
    """RetroMAE pre-training: encoder MLM + enhanced-decoder reconstruction of the text from its [CLS]."""

    description = "RetroMAE pre-training (masked auto-encoding with an enhanced decoder; paper 002's first stage)"
    # 2: long documents are split into the released preprocessing's sentence blocks by default (option
    # long_texts); a run keyed before that cut them at the length, so it is not reused for the new default
    revision = 2
    presets = {"tiny": TINY, "small": SMALL, "paper": PAPER}
    Options = RetroMAEOptions

    def prepare(self, spec: TrainSpec, data: TrainingData, stages: Mapping[str, StageResult]) -> Prepared:
        """Train on the corpora's texts (``data``, the fine-tuning collection, is not used)."""
        options = self.resolve_options(dict(spec.method_options))
        tokenizer = None
        if options["long_texts"] == "blocks":
            from transformers import AutoTokenizer

            from harness.encoders.refs import resolve_model

            tokenizer = AutoTokenizer.from_pretrained(resolve_model(spec.model)[0])
        return Prepared(text_sources([str(c) for c in options["corpora"]], tokenizer,
                                     long_texts=str(options["long_texts"]), max_length=spec.doc_max_length))

    def representation_head(self, spec: TrainSpec) -> RetroMAEHead:
        return RetroMAEHead(normalize=False)

    def dataset_weights(self, spec: TrainSpec, data: TrainingData) -> np.ndarray:
        if spec.dataset_weights is not None:
            return super().dataset_weights(spec, data)
        sizes = np.array(data.sizes, dtype=float)
        return sizes / sizes.sum()

    def make_batch(self, examples: list[tuple[int, int]], ctx: TrainContext, micro_index: int) -> ViewBatch:
        """This rank's texts, encoder-masked, with the decoder's targets handed to the head."""
        opts = ctx.options
        tok = ctx.tokenizer
        if tok.mask_token_id is None:
            raise ConfigError("RetroMAE: the tokenizer has no mask token")
        per_rank = len(examples) // ctx.world_size
        lo, hi = ctx.rank * per_rank, (ctx.rank + 1) * per_rank
        texts = [ctx.data.sources[s].rows[r].pos[0] for s, r in examples[lo:hi]]
        enc = tok(texts, truncation=True, max_length=ctx.spec.doc_max_length, padding=True, return_tensors="np",
                  return_special_tokens_mask=True)
        ids, attn = enc["input_ids"], enc["attention_mask"]
        special = enc["special_tokens_mask"].astype(bool)
        rows: dict[str, list[np.ndarray]] = {k: [] for k in ("enc_ids", "enc_labels", "dec_attn", "dec_labels")}
        for j, g in enumerate(range(lo, hi)):
            rng = np.random.default_rng([ctx.spec.seed, _MASK_STREAM, micro_index, g])
            n = int(attn[j].sum())
            row_ids = ids[j, :n]
            maskable = (~special[j, :n]).tolist()
            words = word_starts(tok.convert_ids_to_tokens(row_ids.tolist()))
            masked, labels = corrupt(row_ids, whole_word_mask(words, maskable, float(opts["encoder_mask_rate"]), rng),
                                     tok.mask_token_id, len(tok), rng)
            allowed = decoder_attention(words, maskable, float(opts["decoder_mask_rate"]), rng,
                                        int(opts["mask_pool"]))
            pad = ids.shape[1] - n
            rows["enc_ids"].append(np.pad(masked, (0, pad), constant_values=tok.pad_token_id or 0))
            rows["enc_labels"].append(np.pad(labels, (0, pad), constant_values=IGNORE))
            rows["dec_attn"].append(np.pad(allowed, ((0, pad), (0, pad)), constant_values=False))
            rows["dec_labels"].append(np.pad(np.where(special[j, :n], IGNORE, row_ids), (0, pad),
                                             constant_values=IGNORE))
        views = {"text": {"input_ids": torch.as_tensor(np.stack(rows["enc_ids"])).long(),
                          "attention_mask": torch.as_tensor(attn).long()}}
        head = ctx.model.head
        if not isinstance(head, RetroMAEHead):
            raise ConfigError("RetroMAE: the model's head is not the RetroMAE head")
        head.set_targets({"input_ids": torch.as_tensor(ids).long(),
                          "encoder_labels": torch.as_tensor(np.stack(rows["enc_labels"])).long(),
                          "decoder_attention": torch.as_tensor(np.stack(rows["dec_attn"])),
                          "decoder_labels": torch.as_tensor(np.stack(rows["dec_labels"])).long()})
        groups = np.array([s for s, _ in examples], dtype=np.int64)
        return ViewBatch(views, groups[lo:hi], groups, list(examples[lo:hi]))

    def validate(self, spec: TrainSpec) -> None:
        if spec.gradcache_chunk_size is not None:
            raise ConfigError("method 'retromae': the decoder needs the encoder's graph; turn off gradcache_chunk_size")

    def losses(self, encoded: EncodedBatch, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        head = ctx.model.head
        if not isinstance(head, RetroMAEHead) or not head.terms:
            raise ConfigError("RetroMAE: the head computed no losses (was the batch built by make_batch?)")
        loss, per_text = retromae_loss(head.terms)
        terms = {k: v.detach() for k, v in head.terms.items()}
        self.last = {f"{part}_mlm": float(terms[part].sum() / terms[f"{part}_mask"].sum().clamp(min=1))
                     for part in ("encoder", "decoder")}
        self._loss = loss + 0.0 * encoded["text"].sum()   # keeps the embedding in the graph
        return per_text, ctx.batch_group_ids()

    def reduce(self, out: LossOutput, ctx: TrainContext) -> torch.Tensor:
        """RetroMAE's loss: the token means of the two cross-entropies, summed."""
        return self._loss

    last: dict[str, float]
    _loss: torch.Tensor

    def scalars(self) -> dict[str, float]:
        return dict(getattr(self, "last", {}))
