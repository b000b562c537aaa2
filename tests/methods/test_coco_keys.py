"""COCO's run keys follow the content of its pretraining corpora, not their paths: the method reads the
corpora named in its options itself, so ``TrainSpec.result_dict`` stands each one as its file digest."""
from __future__ import annotations

import json
import shutil

import pytest

from harness.data.collections import TrainingData, TrainingSource
from harness.data.training import TrainingRow
from harness.method import Method
from harness.train.spec import corpus_identity
from methods.coco import Coco

DOCS = [{"_id": f"d{i}", "title": "", "text": f"Sentence one of {i}. Sentence two of {i}. A third one."}
        for i in range(5)]


def write_corpus(folder, docs):
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return folder


@pytest.fixture
def data():
    return TrainingData([TrainingSource("s", [TrainingRow("q", ["p"], [])], fingerprint="fixed")])


def key(corpora, data, **spec):
    s = Coco.spec("tiny", model="minilm", method_options={"corpora": [str(c) for c in corpora]}, **spec)
    return Method.run_key("coco", s, data), s.fingerprint()


def test_same_corpus_at_two_paths_same_key_changed_document_other_key(tmp_path, data):
    a = write_corpus(tmp_path / "one" / "scifact", DOCS)
    b = tmp_path / "elsewhere" / "copy"
    shutil.copytree(a, b)
    assert key([a], data) == key([b], data)                        # run key and spec fingerprint
    assert key([a], data) == key([b / "corpus.jsonl"], data)        # the folder or its corpus file
    edited = write_corpus(tmp_path / "edited", [*DOCS[:2], {**DOCS[2], "text": DOCS[2]["text"] + " More."},
                                                 *DOCS[3:]])
    assert key([edited], data) != key([a], data)
    assert key([a, edited], data) != key([edited, a], data)         # the order of the sources counts
    assert key([a], data) != key([a], data, seed=1)                 # the rest of the spec still counts
    resolved = Coco.spec("tiny", model="minilm", method_options={"corpora": [str(a)]}).result_dict()
    assert resolved["method_options"]["corpora"] == [corpus_identity(str(a))]
    assert corpus_identity(str(a)).startswith("corpus:") and str(tmp_path) not in json.dumps(resolved)


def test_nested_specs_and_missing_paths(tmp_path, data):
    a = write_corpus(tmp_path / "a", DOCS)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    # A fine-tuning spec that names its COCO stage in its options (a dependency) is keyed by content too.
    outer = [Coco.spec("tiny", model="minilm", method_options={"pretrain": {"method_options": {"corpora": [str(c)]}}})
             for c in (a, b)]
    assert outer[0].fingerprint() == outer[1].fingerprint()
    # An unset placeholder (a dry run elsewhere) stays as written rather than failing.
    assert corpus_identity("{coco_corpus}/trec-covid") == "{coco_corpus}/trec-covid"
