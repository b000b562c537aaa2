"""The pieces of paper 004's ablations: the informative truth judge (oracle), the judge without its ground-truth
reference (Table 5), generation without positive-driven back-forward generation (Table 6, w/o PDBG), MIFT as a
real LoRA stage of the generator (Table 6, w/o MIFT), and Table 7's four batch compositions."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from mining_util import SaltEncoder
from test_judge_hf import make_tiny_chat_model
from test_mine import factory, make_rows, read_lines

from harness.errors import ConfigError
from methods.mining.fill import Generation
from methods.mining.generate import StandInGenerator, TextCache
from methods.mining.judge import Judge, Reply, StandInJudge, Triple, TruthJudge, judge_triples
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_filter import JudgeFilter, judge_rows
from methods.mining.method import Mined
from methods.mining.mift import MiftSettings, encode_example, mift_train, summarisation_examples
from methods.mining.rows import MiningSettings, mine_rows


def test_truth_judge_answers_the_planted_pairs_with_a_set_error():
    planted = [(f"q{i}", f"twin{i}") for i in range(1000)]
    exact = TruthJudge(planted)
    assert exact.answer(Triple("q1", "pos", "twin1")) == 2 and exact.answer(Triple("q1", "pos", "twin2")) == 0
    noisy = TruthJudge(planted, error=0.2, seed=3)
    fn = [noisy.answer(Triple(q, "p", c)) for q, c in planted]
    tn = [noisy.answer(Triple(f"q{i}", "p", f"other{i}")) for i in range(1000)]
    assert 0.16 < fn.count(0) / 1000 < 0.24 and 0.16 < tn.count(2) / 1000 < 0.24     # wrong on ~20% of each
    assert fn == [noisy.answer(Triple(q, "p", c)) for q, c in planted]                # deterministic
    assert noisy.identity() != TruthJudge(planted, error=0.2, seed=4).identity()
    # every sampling answers alike, so the vote is the answer
    pair = [Triple("q0", "p", "twin0"), Triple("q0", "p", "x")]
    verdicts, _ = judge_triples(noisy, pair)
    assert [v.label for v in verdicts] == [noisy.answer(t) for t in pair]
    with pytest.raises(ConfigError):
        TruthJudge(planted, error=1.5)


class Recording(Judge):
    prompt_version = "rec"

    def __init__(self):
        self.seen: list[Triple] = []

    def identity(self):
        return {"backend": "recording"}

    def replies(self, triples, sampling, seeds):
        self.seen.extend(triples)
        return [Reply(0) for _ in triples]


@pytest.mark.parametrize("reference", [True, False])
def test_judge_without_the_ground_truth_reads_an_empty_standard_answer(reference):
    judge = Recording()
    flt = JudgeFilter(judge, reference=reference)
    judge_rows(flt, ["q"], [["the positive"]], [["c1", "c2"]], [[0, 1]], [0], seed=0)
    assert {t.positive for t in judge.seen} == ({"the positive"} if reference else {""})
    assert ("reference" in flt.config()) is (not reference)      # the default keeps earlier cache keys


def test_generation_direct_writes_the_query_from_the_positive(tmp_path):
    rows = make_rows()
    out = {}
    for mode in ("pdbg", "direct"):
        gen = StandInGenerator(summary_words=12, query_words=6)
        path = tmp_path / mode / "m.jsonl"
        mine_rows(rows, factory(SaltEncoder("a"), cache=tmp_path / "c"), path, MiningSettings(strategy="perc_pos", k=6),
                  generation=Generation(gen, TextCache(tmp_path / f"gc-{mode}"), mode=mode))
        out[mode] = [p.get("generation") for p in read_lines(path.with_name("m.provenance.jsonl"))]
    filled = [(a, b) for a, b in zip(out["pdbg"], out["direct"]) if a]
    assert filled
    for pdbg, direct in filled:
        # PDBG: the query from the summary; direct: the summary slot holds the positive, the query its first words
        assert pdbg["query"] == " ".join(pdbg["summary"].split()[:6])
        assert direct["query"] == " ".join(direct["summary"].split()[:6]) and len(direct["summary"].split()) >= \
            len(pdbg["summary"].split())
    with pytest.raises(ConfigError, match="generation mode"):
        Generation(StandInGenerator(), mode="both")


def test_summarisation_examples_select_by_the_english_instruction():
    rows = [{"instruction": "Summarize the text.", "input": "long text", "output": "short"},
            {"instruction": "Fasse zusammen.", "original_instruction": "Write a summary of this.", "input": "x",
             "output": "y", "lang": "de"},
            {"instruction": "Translate to French.", "input": "hi", "output": "salut"},
            {"instruction": "Summarise nothing", "output": ""}]
    ex = summarisation_examples(rows)
    assert [e["lang"] for e in ex] == ["en", "de"] and ex[1]["instruction"] == "Fasse zusammen."


def test_mift_is_a_real_lora_stage_on_a_tiny_generator(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = make_tiny_chat_model(tmp_path / "base")
    examples = [{"instruction": "summarize", "input": f"text {c} " * 3, "output": f"{c}{c}"} for c in "abcdef"]
    tok = AutoTokenizer.from_pretrained(base)
    ids, labels = encode_example(tok, examples[0], 2048)
    answer = tok("aa", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert labels[-len(answer):] == answer and set(labels[:-len(answer)]) == {-100}       # loss on the answer only
    settings = MiftSettings(epochs=8, batch_size=2, grad_accum=1, lr=5e-2, warmup_ratio=0.0)
    out = mift_train(str(base), examples, tmp_path / "mift", settings)
    record = json.loads((out / "mift.json").read_text())
    assert record["steps"] == 8 * 3 and len(record["losses"]) == 24
    assert record["losses"][-1] < record["losses"][0]                                     # it learns
    tuned = AutoModelForCausalLM.from_pretrained(out)
    plain = AutoModelForCausalLM.from_pretrained(base)
    assert not any(n.startswith("base_model") or "lora" in n for n, _ in tuned.named_parameters())   # merged
    changed = [n for (n, a), (_, b) in zip(tuned.named_parameters(), plain.named_parameters())
               if not torch.equal(a, b)]
    assert changed and all("proj" in n for n in changed)        # LoRA on the linear layers only
    with pytest.raises(ConfigError, match="no instruction"):
        mift_train(str(base), [], tmp_path / "none", settings)


def batches_of(mode, languages, topics, size=4):
    m = Mined()
    m.use_prepared({"examples": [(0, i) for i in range(len(languages))], "languages": languages, "topics": topics})
    m._batch_mode = mode
    return m._epoch(0, size, seed=1)


def test_table7_batch_compositions():
    languages = ["en"] * 12 + ["fr"] * 12
    topics = (["a"] * 6 + ["b"] * 6) * 2
    for mode in ("language_topic", "language", "topic"):
        batches = batches_of(mode, languages, topics)
        assert sorted(i for b in batches for i in b) == list(range(24))          # every row once per epoch
        mono = all(len({languages[i] for i in b}) == 1 for b in batches)
        balanced = all(Counter(topics[i] for i in b)["a"] == 2 for b in batches)
        assert mono is (mode in ("language_topic", "language"))
        if mode in ("language_topic", "topic"):
            assert balanced                       # topics visited round-robin: 2 + 2 in every batch of 4
    # same language only: topics are drawn at random, not balanced (some batch is not 2 + 2)
    assert not all(Counter(topics[i] for i in b)["a"] == 2 for b in batches_of("language", languages, topics))
    # topic balance only: some batch mixes the languages
    assert any(len({languages[i] for i in b}) == 2 for b in batches_of("topic", languages, topics))


def test_stand_in_judge_still_answers_by_overlap():
    assert StandInJudge().replies([Triple("q", "a b c", "a b c")], None, [0])[0].label == 2


def test_oracle_needs_truth(tmp_path):
    from harness.data.collections import TrainingSource

    src = TrainingSource(name="s", rows=make_rows())
    with pytest.raises(ConfigError, match="needs option 'truth'"):
        Mined._oracle(src, {"truth": None, "judge_error": 0.0, "mining_seed": 0})
    truth = tmp_path / "truth.json"
    rows = src.rows
    rows[0].meta["id"] = "r0"
    truth.write_text(json.dumps({"train": [{"id": "r0", "false_negative_negs": [0]}]}))
    judge = Mined._oracle(src, {"truth": str(truth), "judge_error": 0.0, "mining_seed": 0})
    assert judge.planted == {(rows[0].query, rows[0].neg[0])}
    flt = JudgeFilter(judge, "keep_zero", VoteCache(tmp_path / "votes"))
    assert flt.config()["judge"]["backend"] == "truth"
