"""A deterministic synthetic multi-domain retrieval world with known planted structure.

The ``tiny`` scale of every suite, the README's main job and many tests run on it:
no network, no ../shared data, seconds on a CPU.  ``make_world(spec, seed)`` is a
pure function (all draws are built on ``random.Random.random`` alone, keyed by
SHA-256 of the seed and names, so the world is the same on every Python version),
and ``World.write(dir)`` writes byte-identical files for the same spec and seed.

What the world contains (modules: ``vocab`` scripts and languages, ``domains``
generation and planting, ``writer`` files and cache, ``tiny`` tiny models):

* **Languages** of made-up words in topic clusters, in five scripts: two Latin
  (one with diacritics), Cyrillic, CJK and a Thai-like script.  CJK and Thai are
  written without spaces between words, so whitespace tokenisers and
  token-level answer matchers fail on them as they do on real Chinese or Thai.
* **Domains** ("datasets"), each with a language, a task (retrieval, qa, or
  symmetric sts), a size and a difficulty.  A document is a bag of content words
  of one topic, function words and one unique entity name; a query asks for some
  of its target's content words (its *concepts*); a document is relevant exactly
  when it contains every concept.  The generator keeps that true across the
  corpus, so the ground truth lists *all* relevant documents.

What is planted (all knobs are :class:`DomainSpec` fields; all effects are
recorded in ``truth.json``):

* **easy** domains: queries share their concepts with the positive; lexical
  matching (BM25) scores nDCG@10 above 0.8;
* a small **hard-but-learnable** domain (``synonym_rate=1``): every concept is
  written as its hidden synonym, a word documents never use; BM25 is near zero,
  but the mapping is fixed, so training learns it;
* a **noise** domain (``label_noise=1``): every positive is an unrelated random
  document, in training and test; its loss stays high because nothing
  generalises, and it has more rows than a tiny training run visits, so rows are
  not memorised;
* **false positives** (``false_positive_rate``, ``eval_false_positive_rate``):
  labelled positives on unrelated documents;
* **false negatives** (``false_negative_rate``, ``eval_false_negative_rate``):
  relevant passages among training negatives, or relevant test documents left
  unlabelled (they also contain the answer);
* **near-duplicate hard negatives** (``near_duplicate_rate``,
  ``eval_near_duplicates``): the positive's text with all but
  ``near_duplicate_keep`` concepts swapped for other topic words;
* different **loss scales**: queries with fewer concepts and near-duplicate
  negatives give higher losses.

How to add a planted effect: add a field to :class:`DomainSpec` (default = off)
and validate it in ``spec.validate_spec``; apply it in
``domains._make_test_set`` and/or ``domains._make_train_rows``, choosing affected
rows with ``_chosen`` (exact shares) and keeping the relevance invariant
(``_safe_extra`` stops a new document from covering an earlier query); record it
in the row's or query's truth dict; list it in ``DomainSpec.planted``; bump
``GENERATOR_VERSION``; and add a test in ``tests/synthetic`` that the truth agrees
with the written files.
"""
from harness.synthetic.spec import GENERATOR_VERSION, DomainSpec, LanguageSpec, WorldSpec
from harness.synthetic.tiny import build_tokenizer, encoder_defaults, make_tiny_model
from harness.synthetic.world import World, make_world, world_fingerprint
from harness.synthetic.writer import (
    default_tiny_model_dir,
    default_world_dir,
    read_truth,
    read_world_info,
    tiny_model_dir,
    world_dir,
    write_world,
)

__all__ = [
    "GENERATOR_VERSION",
    "DomainSpec",
    "LanguageSpec",
    "World",
    "WorldSpec",
    "build_tokenizer",
    "default_tiny_model_dir",
    "default_world_dir",
    "encoder_defaults",
    "make_tiny_model",
    "make_world",
    "read_truth",
    "read_world_info",
    "tiny_model_dir",
    "world_dir",
    "world_fingerprint",
    "write_world",
]
