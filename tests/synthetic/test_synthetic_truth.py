"""The ground truth agrees with the written qrels and texts (checked on the text itself)."""
from __future__ import annotations

import json
import re

import pytest
from synthetic_bow import contains

from harness.data import load_beir, read_training_rows
from harness.synthetic import read_truth


def _passages(ds):
    return dict(zip(ds.corpus.ids, ds.corpus.passages()))


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.casefold()))


@pytest.fixture(scope="module")
def written(world, world_dir):
    truth = read_truth(world_dir)["domains"]
    meta = json.loads((world_dir / "train" / "domains.json").read_text(encoding="utf-8"))
    out = {}
    for name in world.domains:
        ds = load_beir(world_dir / "eval" / name)
        answers = {}
        for line in (world_dir / "eval" / name / "answers.jsonl").open(encoding="utf-8"):
            obj = json.loads(line)
            answers[obj["_id"]] = obj["answers"]
        rows = read_training_rows(world_dir / "train" / f"{name}.jsonl")
        out[name] = (ds, answers, rows, truth[name], meta[name]["spaced"])
    return out


def test_labelled_documents_match_qrels(written):
    for name, (ds, _, _, truth, _) in written.items():
        qrels = {q: set() for q in ds.queries.ids}
        for q, d in zip(ds.qrels.query_ids.tolist(), ds.qrels.doc_ids.tolist()):
            qrels[q].add(d)
        for t in truth["test"]:
            assert set(t["labelled"]) == qrels[t["query_id"]], (name, t["query_id"])
            assert t["domain"] == name and t["language"] == truth["language"]
            if not t["label_noise"]:
                # Labels = the relevant documents minus the planted false negatives, plus false positives.
                expected = (set(t["relevant"]) - set(t["false_negatives"])) | set(t["false_positives"])
                assert set(t["labelled"]) == expected
                assert set(t["relevant"]) - set(t["false_negatives"]) == {t["target"]}
            else:
                assert t["target"] is None


def test_relevant_documents_are_exactly_those_containing_every_concept(written):
    for name, (ds, _, _, truth, spaced) in written.items():
        passages = _passages(ds)
        for t in truth["test"]:
            covering = {d for d, text in passages.items() if all(contains(text, c, spaced) for c in t["concepts"])}
            assert covering == set(t["relevant"]), (name, t["query_id"])


def test_false_positives_are_labelled_and_unrelated(written):
    total = 0
    for ds, _, _, truth, spaced in written.values():
        passages = _passages(ds)
        for t in truth["test"]:
            for d in t["false_positives"]:
                total += 1
                assert d in t["labelled"] and d not in t["relevant"]
                assert not any(contains(passages[d], c, spaced) for c in t["concepts"])
    # cjk_qa plants 5% of 60 queries.
    assert total == 3


def test_false_negatives_are_unlabelled_but_contain_the_query_words_and_answer(written):
    total = 0
    for ds, answers, _, truth, spaced in written.values():
        passages = _passages(ds)
        for t in truth["test"]:
            for d in t["false_negatives"]:
                total += 1
                assert d not in t["labelled"]
                text = passages[d]
                assert all(contains(text, c, spaced) for c in t["concepts"])
                assert all(contains(text, w, spaced) for w in t["query_terms"])   # no synonyms in latin_qa
                assert any(a.casefold() in text.casefold() for a in answers[t["query_id"]])
    assert total == 8   # latin_qa: 10% of 80 queries


def test_answers_occur_only_in_relevant_documents(written):
    for name, (ds, answers, _, truth, _) in written.items():
        passages = {d: p.casefold() for d, p in _passages(ds).items()}
        for t in truth["test"]:
            holders = {d for d, text in passages.items()
                       if any(a.casefold() in text for a in answers[t["query_id"]])}
            expected = set(t["labelled"]) if t["label_noise"] else set(t["relevant"])
            assert holders == expected, (name, t["query_id"])


def test_near_duplicates_share_most_words_but_are_not_relevant(written):
    for ds, _, _, truth, spaced in written.values():
        if not spaced:
            continue
        passages = _passages(ds)
        for t in truth["test"]:
            for d in t["near_duplicates"]:
                assert d not in t["relevant"] and d not in t["labelled"]
                target = passages[t["target"]]
                a, b = _words(target), _words(passages[d])
                assert len(a & b) / len(a | b) > 0.6
                kept = sum(contains(passages[d], c, spaced) for c in t["concepts"])
                assert 0 < kept < len(t["concepts"])


def test_noise_domain_labels_unrelated_documents(written):
    ds, _, _, truth, spaced = written["latin_noisy"]
    passages = _passages(ds)
    assert all(t["label_noise"] and t["relevant"] == [] for t in truth["test"])
    for t in truth["test"]:
        (label,) = t["labelled"]
        assert not all(contains(passages[label], c, spaced) for c in t["concepts"])
    assert all(r["is_false_positive"] and r["label_noise"] for r in truth["train"])


def test_training_row_truth(written, world):
    for name, (_, _, rows, truth, spaced) in written.items():
        spec = world.spec.domain(name)
        train = truth["train"]
        assert [r.meta["id"] for r in rows] == [t["id"] for t in train]
        n_clean = sum(not t["label_noise"] for t in train)
        n_fp = sum(t["is_false_positive"] and not t["label_noise"] for t in train)
        assert n_fp == round(spec.false_positive_rate * n_clean)
        n_fn = sum(bool(t["false_negative_negs"]) for t in train)
        assert n_fn == round(spec.false_negative_rate * n_clean)
        for row, t in zip(rows, train):
            pos = row.pos[0]
            pos_covers = all(contains(pos, c, spaced) for c in t["concepts"])
            assert pos_covers == (not t["is_false_positive"]), (name, t["id"])
            if t["is_false_positive"] and not t["label_noise"]:   # planted: another topic entirely
                assert not any(contains(pos, c, spaced) for c in t["concepts"])
            for j, neg in enumerate(row.neg):
                covers = all(contains(neg, c, spaced) for c in t["concepts"])
                assert covers == (j in t["false_negative_negs"]), (name, t["id"], j)
                if j in t["near_duplicate_negs"]:
                    kept = sum(contains(neg, c, spaced) for c in t["concepts"])
                    assert kept == spec.near_duplicate_keep
            # The query shows the concepts, or their hidden synonyms in the hard domain.
            shown = sum(contains(row.query, c, spaced) for c in t["concepts"])
            assert shown == (0 if spec.synonym_rate == 1.0 else len(t["concepts"]))


def test_peg_world_plants_twenty_percent_false_positive_rows(peg_world):
    for data in peg_world.domains.values():
        share = sum(t["is_false_positive"] for t in data.train_truth) / len(data.train_truth)
        assert share == pytest.approx(0.2, abs=0.002)
        near = sum(len(t["near_duplicate_negs"]) for t in data.train_truth)
        fn = sum(len(t["false_negative_negs"]) for t in data.train_truth)
        assert near + fn == 3 * len(data.train_truth)


def test_unspaced_answers_defeat_whitespace_token_matching(written):
    # The trap the world plants for answer containment: in CJK and Thai an answer is
    # inside an unsegmented run, so matching whitespace tokens (as the DPR
    # tokenizer-based matcher effectively does) never finds it; substrings do.
    for name in ("cjk_qa", "thai_sts"):
        ds, answers, _, truth, _ = written[name]
        passages = _passages(ds)
        for t in truth["test"]:
            text = passages[t["target"]].casefold()
            answer = answers[t["query_id"]][0].casefold()
            assert answer in text
            assert answer not in text.split()
