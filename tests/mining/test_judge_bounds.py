"""Bounding the judge's cost: a seeded subset of rows (``only_rows``), each row's first candidates
(``depth``), and the score mode's one forward pass per prompt shared by the four samplings."""
from __future__ import annotations

from mining_util import SaltEncoder
from test_judge_hf import make_tiny_chat_model
from test_mine import factory, make_rows, read_lines

from methods.mining.judge import SAMPLINGS, StandInJudge, Triple, judge_triples
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_filter import JudgeFilter
from methods.mining.judge_hf import TransformersJudge
from methods.mining.method import _judge_subset
from methods.mining.rows import MiningSettings, mine_rows


def test_only_rows_and_depth_bound_what_is_judged(tmp_path):
    subset = _judge_subset(24, 5, seed=0)
    assert subset is not None and len(subset) == 5 and subset == _judge_subset(24, 5, seed=0)
    assert _judge_subset(24, 30, seed=0) is None
    judge = StandInJudge()
    flt = JudgeFilter(judge, "keep_zero", VoteCache(tmp_path / "v"), only_rows=subset, depth=3)
    out = tmp_path / "m.jsonl"
    report = mine_rows(make_rows(), factory(SaltEncoder("a"), cache=tmp_path / "c"), out,
                       MiningSettings(strategy="naive", k=4), judge_filter=flt)["report"]
    prov = read_lines(out.with_name("m.provenance.jsonl"))
    for p in prov:
        judged = p["judge"]["judged"]
        if p["row"] in subset:
            assert [j["rank"] for j in judged] == [1, 2, 3]
        else:
            assert judged == [] and p["removed"]["judge"] == 0
    assert report["filter"]["judged"] == 15 and judge.calls == 4 * 15
    assert report["filter"]["only_rows"]["count"] == 5 and report["filter"]["depth"] == 3


def test_score_mode_shares_one_forward_over_the_samplings(tmp_path):
    judge = TransformersJudge(str(make_tiny_chat_model(tmp_path / "tiny")), mode="score", batch_size=4)
    forwards = []
    judge.model.register_forward_hook(lambda m, i, o: forwards.append(1))
    triples = [Triple(f"q{i}", "p", f"c{i}") for i in range(3)]
    verdicts, stats = judge_triples(judge, triples, seed=1)
    assert len(forwards) == 1 and stats.asked == 3 * len(SAMPLINGS)      # one batch of 3 prompts, 12 calls
    assert all(len(v.votes) == 4 and all(x in (0, 1, 2) for x in v.votes) for v in verdicts)
    again = TransformersJudge(str(tmp_path / "tiny"), mode="score", batch_size=1)
    assert [v.votes for v in judge_triples(again, triples, seed=1)[0]] == [v.votes for v in verdicts]
