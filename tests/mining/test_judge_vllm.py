"""The vllm judge on a CPU machine: refused with a clear message before anything is asked, and the
request plan (chat messages, the released samplings, per-call seeds) it would send."""
from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from harness.cli import main
from harness.errors import ConfigError
from methods.mining.judge import SAMPLINGS, Triple, format_prompt, judge_triples, vote_seed
from methods.mining.judge_spec import make_judge
from methods.mining.judge_vllm import VLLMJudge, request_plan, vllm_available

needs_no_vllm = pytest.mark.skipif(vllm_available() is None, reason="vLLM runs here (GPU + package)")


@needs_no_vllm
def test_refused_without_vllm_or_gpu():
    with pytest.raises(ConfigError, match="judge vllm:some/model refused: .*(not installed|CUDA GPU)"):
        make_judge("vllm:some/model")
    reason = vllm_available()
    assert reason is not None
    if importlib.util.find_spec("vllm") is None:
        assert "pip install vllm" in reason


@needs_no_vllm
def test_cli_refuses_before_writing(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"query": "q", "pos": ["p"], "neg": ["n"]}\n')
    assert main(["mine", "--data", str(data), "--out", str(tmp_path / "m.jsonl"), "--judge", "vllm:m"]) == 2
    assert "refused" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl"]


def test_request_plan():
    t = Triple("what is a comet?", "a comet is an icy body", "a comet passage")
    seeds = [vote_seed(7, i, t) for i in range(4)]
    plan = [request_plan([format_prompt(t)], s, [seed], max_tokens=8)[0] for s, seed in zip(SAMPLINGS, seeds)]
    assert [(r["top_p"], r["temperature"]) for r in plan] == [(0.7, 0.4), (0.8, 0.6), (0.9, 0.8), (0.8, 0.4)]
    assert all(r["messages"] == [{"role": "user", "content": format_prompt(t)}] for r in plan)
    assert [r["seed"] for r in plan] == [s % 2**31 for s in seeds] and len(set(seeds)) == 4
    assert all(r["max_tokens"] == 8 for r in plan)
    with pytest.raises(ConfigError, match="2 prompts but 1 seeds"):
        request_plan(["a", "b"], SAMPLINGS[0], [1])


class FakeEngine:
    """Stands for vllm.LLM in the one place the judge calls it: records what it is asked."""

    def __init__(self, answer=None):
        self.answer, self.calls = answer, []

    def chat(self, messages, sampling_params, use_tqdm=False):
        self.calls.append((messages, sampling_params))
        if self.answer is None:
            raise RuntimeError("CUDA out of memory")
        out = types.SimpleNamespace(text=self.answer)
        return [types.SimpleNamespace(outputs=[out]) for _ in messages]


@pytest.fixture
def fake_vllm(monkeypatch):
    fake = types.ModuleType("vllm")
    fake.SamplingParams = lambda **kw: kw     # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", fake)


def test_engine_gets_the_plan_and_answers_become_votes(fake_vllm):
    engine = FakeEngine("Score: 2")
    judge = VLLMJudge("m", engine=engine)
    triples = [Triple("q", "p", "c"), Triple("q", "p", "d")]
    verdicts, _ = judge_triples(judge, triples, seed=5)
    assert [v.votes for v in verdicts] == [[2] * 4] * 2
    messages, params = engine.calls[0]
    assert messages == [[{"role": "user", "content": format_prompt(t)}] for t in triples]
    plan = request_plan([format_prompt(t) for t in triples], SAMPLINGS[0], [vote_seed(5, 0, t) for t in triples])
    assert params == [{k: v for k, v in r.items() if k != "messages"} for r in plan]


def test_a_failed_engine_call_becomes_failed_votes(fake_vllm):
    judge = VLLMJudge("m", engine=FakeEngine())
    verdicts, stats = judge_triples(judge, [Triple("q", "p", "c")])
    assert verdicts[0].votes == [-1] * 4 and verdicts[0].label == -1
    assert stats.failed_calls == 4 and "CUDA out of memory" in stats.problems[0]
    assert judge.identity() == {"backend": "vllm", "model": "m", "max_tokens": 8, "dtype": "auto"}
