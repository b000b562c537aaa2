"""The false-negative judge (methods/mining/judge.py): prompt, label parsing, the released samplings,
votes through judge_triples (METHODS.md M5), the stand-in judge, the vote cache and judge specs."""
from __future__ import annotations

import json

import pytest

from harness.errors import ConfigError
from methods.mining import keeps
from methods.mining.judge import (
    PROMPT_VERSION,
    SAMPLINGS,
    Judge,
    Reply,
    Sampling,
    StandInJudge,
    Triple,
    format_prompt,
    judge_triples,
    parse_label,
    vote_seed,
)
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_spec import make_judge


class Scripted(Judge):
    """Answers candidate c with script[c][i] at sampling i (-1: a failed call); counts calls."""

    def __init__(self, script: dict[str, list[int]], tag: str = "a"):
        self.script, self.tag, self.calls, self.seeds = script, tag, 0, []

    def identity(self):
        return {"backend": "scripted", "tag": self.tag}

    def replies(self, triples, sampling, seeds):
        i = SAMPLINGS.index(sampling)
        self.calls += len(triples)
        self.seeds.extend(seeds)
        out = []
        for t in triples:
            v = self.script[t.candidate][i]
            out.append(Reply(-1, error="HTTP 500") if v == -1 else Reply(v, text=str(v)))
        return out


# METHODS.md M5: votes -> label -> keep_zero decision
M5 = {"c1": ([0, 0, 1, 2], 0, True), "c2": ([2, 2, 0, 1], 2, False), "c3": ([1, 0, -1, 1], 1, False),
      "c4": ([0, 1, -1, -1], 0, True), "c5": ([1, 0, 0, 1], 1, False)}


def triples(names):
    return [Triple("which river?", "the Nile is a river", c) for c in names]


def test_prompt_has_both_rubrics_and_the_texts():
    p = format_prompt(Triple("Q?", "POS", "CAND"))
    assert "Information accuracy" in p and "Information completeness" in p
    assert "Question: Q?" in p and "Candidate Answer: CAND" in p and "Standard Answer: POS" in p
    assert "(0, 1 or 2)" in p and PROMPT_VERSION == "004-fn-v1"
    assert [(s.top_p, s.temperature) for s in SAMPLINGS] == [(0.7, 0.4), (0.8, 0.6), (0.9, 0.8), (0.8, 0.4)]


@pytest.mark.parametrize("text,label", [("2", 2), (" 0\n", 0), ("Score: 1", 1), ("**2**", 2), ("10", -1),
                                        ("2.5", -1), ("3", -1), ("I cannot judge this.", -1), ("", -1),
                                        (None, -1), ("Final score: 1 (accuracy 2)", 1)])
def test_parse_label(text, label):
    assert parse_label(text) == label


def test_votes_follow_the_m5_oracle_and_both_filter_modes():
    judge = Scripted({c: v for c, (v, _, _) in M5.items()})
    verdicts, stats = judge_triples(judge, triples(M5), seed=0)
    for (votes, label, kept), v in zip(M5.values(), verdicts):
        assert v.votes == votes and v.label == label and keeps(v.label, "keep_zero") is kept
    # drop_two (paper): only c2 (voted 2) goes
    assert [keeps(v.label, "drop_two") for v in verdicts] == [True, False, True, True, True]
    assert judge.calls == stats.asked == 20 and stats.failed_calls == 3 and stats.cached == 0
    assert "judge call failed" in stats.problems[0]


def test_seeds_are_per_call_and_batch_independent():
    t = Triple("q", "p", "c")
    assert vote_seed(0, 1, t) == vote_seed(0, 1, Triple("q", "p", "c"))
    assert len({vote_seed(0, i, t) for i in range(4)} | {vote_seed(1, 0, t)}) == 5
    a, b = Scripted({c: [0] * 4 for c in "xyz"}), Scripted({c: [0] * 4 for c in "xyz"})
    judge_triples(a, triples("xyz"), batch_size=1)
    judge_triples(b, triples("xyz"), batch_size=3)
    assert a.seeds == b.seeds


def test_identical_triples_are_asked_once():
    judge = Scripted({"x": [2, 2, 2, 2]})
    verdicts, stats = judge_triples(judge, triples("xxx"))
    assert judge.calls == 4 and [v.label for v in verdicts] == [2, 2, 2]


def test_stand_in_judge_truth_then_overlap_rule():
    truth = {("which river?", "planted"): 2}
    judge = StandInJudge(truth)
    ts = [Triple("which river?", "the nile is a long river", "planted"),
          Triple("which river?", "the nile is a long river", "the nile is a very long river"),    # J = 5/6
          Triple("which river?", "the nile is a long river", "the amazon river is wide"),        # J = 3/8
          Triple("which river?", "the nile is a long river", "bread and butter")]                # J = 0
    verdicts, _ = judge_triples(judge, ts)
    assert [v.label for v in verdicts] == [2, 2, 1, 0] and all(len(set(v.votes)) == 1 for v in verdicts)
    assert judge.identity() != StandInJudge().identity()
    with pytest.raises(ConfigError, match="0, 1 or 2"):
        StandInJudge({("q", "c"): 3})


def test_cache_rerun_asks_nothing_and_gives_identical_votes(tmp_path):
    script = {c: v for c, (v, _, _) in M5.items()}
    first = Scripted(script)
    v1, _ = judge_triples(first, triples(M5), cache=VoteCache(tmp_path))
    again = Scripted(script)
    v2, stats = judge_triples(again, triples(M5), cache=VoteCache(tmp_path))
    # failed calls (-1) are not stored: only those 3 are asked again
    assert again.calls == 3 and stats.cached == 17 and stats.asked == 3
    assert [v.votes for v in v2] == [v.votes for v in v1]
    shards = list((tmp_path / "judge-votes").glob("*/votes-*.jsonl"))
    assert sum(len(s.read_text().splitlines()) for s in shards) == 17
    meta = json.loads(next((tmp_path / "judge-votes").glob("*/judge.json")).read_text())
    assert meta == {"judge": {"backend": "scripted", "tag": "a"}, "prompt_version": PROMPT_VERSION}


@pytest.mark.parametrize("change", ["judge", "seed", "sampling", "text", "prompt"])
def test_cache_key_parts(tmp_path, change):
    script = {"x": [0, 1, 2, 0], "y": [0, 1, 2, 0]}
    judge_triples(Scripted(script), triples("x"), cache=VoteCache(tmp_path), seed=0)
    judge, seed, samplings, ts = Scripted(script), 0, SAMPLINGS, triples("x")
    if change == "judge":
        judge = Scripted(script, tag="b")
    elif change == "seed":
        seed = 1
    elif change == "sampling":
        samplings = (Sampling(0.7, 0.4), Sampling(0.8, 0.6), Sampling(0.9, 0.8), Sampling(0.8, 0.41))
        judge.replies = lambda t, s, seeds: [Reply(0, "0")] * len(t)   # type: ignore[method-assign]
        judge.calls = 0
    elif change == "text":
        ts = triples("y")
    else:
        judge.prompt_version = "other"
    _, stats = judge_triples(judge, ts, cache=VoteCache(tmp_path), seed=seed, samplings=samplings)
    assert stats.asked == (1 if change == "sampling" else 4) and stats.cached == (3 if change == "sampling" else 0)


class Killed(Exception):
    pass


def test_killed_judging_resumes_without_asking_again(tmp_path):
    names = [f"c{i}" for i in range(10)]
    script = {c: [i % 3] * 4 for i, c in enumerate(names)}
    judge = Scripted(script)
    real = judge.replies

    def dying(ts, sampling, seeds):
        if judge.calls >= 12:        # dies in sampling 1, after 10 + 2 asked
            raise Killed
        return real(ts, sampling, seeds)

    judge.replies = dying            # type: ignore[method-assign]
    with pytest.raises(Killed):
        judge_triples(judge, triples(names), cache=VoteCache(tmp_path, flush_every=5), batch_size=2)
    # flushed: the 10 votes of sampling 0; sampling 1's first 2 sat in the buffer and are lost
    again = Scripted(script)
    verdicts, stats = judge_triples(again, triples(names), cache=VoteCache(tmp_path))
    assert stats.cached == 10 and again.calls == 40 - 10
    assert [v.label for v in verdicts] == [i % 3 for i in range(10)]


def test_judge_specs():
    assert make_judge("none") is None
    assert isinstance(make_judge("stand-in"), StandInJudge)
    for bad in ("gpt4", "transformers:", "openai:http://127.0.0.1:1/v1", "openai:#m", ""):
        with pytest.raises(ConfigError, match="judge"):
            make_judge(bad)
    with pytest.raises(ConfigError, match="http"):
        make_judge("openai:ftp://x#m")
    with pytest.raises(ConfigError, match="cannot load judge model|does not exist"):
        make_judge("transformers:/nonexistent/model.gguf")
