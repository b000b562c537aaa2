"""LLM negative generation (methods/mining/generate.py, fill.py; ``harness mine --generate``): which pools
are filled, what is eligible, the judge on the additions, provenance, the cache (reruns ask nothing and
are byte-identical), the transformers backend as a generator (tiny random LM: plumbing), bad specs."""
from __future__ import annotations

import json

import pytest
from mining_util import SaltEncoder
from test_judge_hf import make_tiny_chat_model
from test_mine import factory, make_rows, read_lines, write_rows

from harness.cli import main
from harness.errors import ConfigError
from methods.mining.fill import Generation
from methods.mining.generate import (
    GENERATION_SAMPLING,
    StandInGenerator,
    TextCache,
    generate_texts,
    make_generator,
)
from methods.mining.judge import StandInJudge
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_filter import JudgeFilter
from methods.mining.rows import MiningSettings, mine_rows, passage_id

K = 6


def mine(tmp_path, name, gen=None, judge=None, cache=None, strategy="perc_pos"):
    out = tmp_path / name / "m.jsonl"
    cache = cache or tmp_path / "gen-cache"
    generation = Generation(gen, TextCache(cache)) if gen is not None else None
    flt = JudgeFilter(judge, "keep_zero", VoteCache(cache)) if judge is not None else None
    report = mine_rows(make_rows(), factory(SaltEncoder("a"), cache=tmp_path / "c"), out,
                       MiningSettings(strategy=strategy, k=K), generation=generation, judge_filter=flt)
    return out, read_lines(out.with_name("m.provenance.jsonl")), report["report"]


def test_stand_in_generator_summary_then_query():
    gen = StandInGenerator(summary_words=4, query_words=2)
    text = "one two three four five six"
    summary = generate_texts(gen, "summary", [text])
    assert summary == ["one two three four"]
    assert generate_texts(gen, "query", summary) == ["one two"]
    with pytest.raises(ConfigError, match="unknown generation step"):
        generate_texts(gen, "title", [text])


def test_under_full_pools_are_filled_with_eligible_generated_negatives(tmp_path):
    rows = make_rows()
    _, base_prov, base = mine(tmp_path, "plain")
    out, prov, report = mine(tmp_path, "gen", StandInGenerator())
    mined = read_lines(out)
    text = {passage_id(t): t for r in rows for t in (*r.pos, *r.neg)}
    under = [p for p in base_prov if len(p["negatives"]) < K]
    assert under, "perc_pos on random vectors leaves pools under-full"
    filled = 0
    for row, b, p, m in zip(rows, base_prov, prov, mined):
        retrieved = [n for n in p["negatives"] if n["origin"] == "retrieved"]
        generated = [n for n in p["negatives"] if n["origin"] == "generated"]
        assert [n["doc_id"] for n in retrieved] == [n["doc_id"] for n in b["negatives"]]   # selection unchanged
        if len(b["negatives"]) >= K:
            assert not generated and "generation" not in p
            continue
        g = p["generation"]
        assert g["summary"] == " ".join(row.pos[0].replace("?", "").split()[:12])
        assert g["query"] == " ".join(g["summary"].split()[:6]) and g["needed"] == K - len(b["negatives"])
        assert len(generated) == min(g["needed"], g["eligible"]) == g["added"]
        ids = [n["doc_id"] for n in p["negatives"]]
        assert len(set(ids)) == len(ids)                                   # no duplicates
        assert not set(m["neg"]) & set(row.pos) and len(set(m["neg"])) == len(m["neg"])
        assert m["neg"] == [text[i] for i in ids]
        assert [n["rank"] for n in generated] == sorted(n["rank"] for n in generated)
        filled += len(generated)
    g = report["generation"]
    total = sum(len(p["negatives"]) for p in prov)
    assert g["rows_filled"] == len(under) and g["added"] == filled > 0
    assert g["share_of_negatives"] == pytest.approx(filled / total)
    assert report["pool_fill"] > base["pool_fill"]


def test_judge_filters_the_additions_and_reruns_ask_nothing(tmp_path):
    gen, judge = StandInGenerator(), StandInJudge()
    a, prov, report = mine(tmp_path, "a", gen, judge)
    assert gen.calls > 0
    generated = [n for p in prov for n in p["negatives"] if n["origin"] == "generated"]
    assert generated and all(n["label"] == 0 and n["votes"] == [0] * 4 for n in generated)
    assert report["generation"]["judged_out"] > 0          # the overlap judge votes some additions out
    again_gen, again_judge = StandInGenerator(), StandInJudge()
    b, _, _ = mine(tmp_path, "b", again_gen, again_judge)
    assert again_gen.calls == 0 and again_judge.calls == 0
    for name in ("m.jsonl", "m.provenance.jsonl", "m.report.json"):
        assert (a.parent / name).read_bytes() == (b.parent / name).read_bytes()


def test_text_cache_keys_generator_step_and_text(tmp_path):
    cache = TextCache(tmp_path)
    gen = StandInGenerator()
    generate_texts(gen, "summary", ["alpha beta", "gamma"], cache=cache)
    assert gen.calls == 2
    other = TextCache(tmp_path)                       # read back from the shards
    assert generate_texts(gen, "summary", ["gamma", "alpha beta"], cache=other) == ["gamma", "alpha beta"]
    assert gen.calls == 2
    generate_texts(gen, "query", ["gamma"], cache=other)            # another step: asked
    generate_texts(StandInGenerator(3, 2), "summary", ["gamma"], cache=other)   # another generator: asked
    assert gen.calls == 3
    key = TextCache.text_key("summary", GENERATION_SAMPLING, 0, "gamma")
    assert other.get(gen, key) == "gamma"


def test_transformers_generator_writes_past_a_digit(tmp_path):
    path = make_tiny_chat_model(tmp_path / "tiny")
    gen = make_generator(f"transformers:{path}", max_new_tokens=12, batch_size=2)
    assert gen.identity()["stop_on_label"] is False
    texts = generate_texts(gen, "summary", ["a passage about rivers", "another one"], seed=3)
    again = generate_texts(gen, "summary", ["another one"], seed=3)
    assert again[0] == texts[1]                                  # seeded per call, batch independent
    assert all(t is None or len(t) > 0 for t in texts)


def test_bad_generator_specs():
    with pytest.raises(ConfigError, match="unknown generator 'gpt'"):
        make_generator("gpt")
    with pytest.raises(ConfigError, match="openai:<base url>#<model>"):
        make_generator("openai:http://127.0.0.1:9")


def test_cli_generate(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "train.jsonl"
    write_rows(data, make_rows(12))
    out = tmp_path / "mined.jsonl"
    args = ["mine", "--data", str(data), "--out", str(out), "--k", "8", "--depth", "10", "--no-progress",
            "--generate", "stand-in", "--strategy", "perc_pos", "--percent", "0.5"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["generation"]["generator"]["backend"] == "stand-in" and report["generation"]["rows_filled"] > 0
    assert main([*args[:-6], "--generate", "gpt", "--overwrite"]) == 2
    assert "unknown generator 'gpt'" in capsys.readouterr().err
