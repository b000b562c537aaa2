"""The openai judge backend against a scripted OpenAI-compatible server on 127.0.0.1: request
body, labels, retries with backoff (500s, timeouts, Retry-After), failures that stay -1, replies
without a label, the rate limit, and the vote cache (a rerun sends no request)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from methods.mining.judge import SAMPLINGS, Triple, judge_triples
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_openai import OpenAIJudge, RateLimiter
from methods.mining.judge_spec import make_judge


class Server:
    """Replies by the candidate's marker: 'label=N' -> "N"; 'flaky' -> 500 on the first request for
    that prompt; 'down' -> always 500; 'slow' -> sleeps past the client timeout on the first
    request; 'busy' -> 429 with Retry-After 0.01 once; 'chatty' -> no label; 'bad' -> 400."""

    def __init__(self):
        self.requests: list[dict] = []
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][0]["content"]
                cand = prompt.split("Candidate Answer: ")[1].split("\n")[0]
                with outer.lock:
                    outer.requests.append({"path": self.path, **body})
                    key = f"{cand}|{body['temperature']}|{body['top_p']}"
                    n = outer.seen[key] = outer.seen.get(key, 0) + 1
                if self.path != "/v1/chat/completions":
                    return self.send_error(404)
                if cand == "bad":
                    return self.send_error(400)
                if cand == "down" or (cand == "flaky" and n == 1):
                    return self.send_error(500)
                if cand == "busy" and n == 1:
                    self.send_response(429)
                    self.send_header("Retry-After", "0.01")
                    self.end_headers()
                    return
                if cand == "slow" and n == 1:
                    time.sleep(0.6)
                text = cand.split("=")[1] if cand.startswith("label=") else \
                    "I would rather not say." if cand == "chatty" else "1"
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def judge_for(server, **kw):
    sleeps: list[float] = []
    kw.setdefault("timeout", 0.3)
    kw.setdefault("workers", 1)
    j = OpenAIJudge(server.url, "judge-model", backoff=0.01, sleep=lambda s: (sleeps.append(s), time.sleep(s)),
                    **kw)
    return j, sleeps


def tri(cands):
    return [Triple("which river is longest?", "the Nile", c) for c in cands]


def test_labels_and_request_body(server):
    judge, _ = judge_for(server)
    verdicts, stats = judge_triples(judge, tri(["label=0", "label=2"]))
    assert [v.votes for v in verdicts] == [[0] * 4, [2] * 4] and stats.asked == 8
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["model"] == "judge-model" and req["max_tokens"] == 8
    assert [(r["top_p"], r["temperature"]) for r in server.requests[::2]] == \
        [(s.top_p, s.temperature) for s in SAMPLINGS]
    assert "Standard Answer: the Nile" in req["messages"][0]["content"] and isinstance(req["seed"], int)


def test_retries_500_timeout_and_429_then_succeed(server):
    judge, sleeps = judge_for(server)
    verdicts, stats = judge_triples(judge, tri(["flaky", "slow", "busy"]), samplings=SAMPLINGS[:1])
    assert [v.votes for v in verdicts] == [[1], [1], [1]] and stats.failed_calls == 0
    assert judge.requests == 6                       # each failed once, then succeeded
    assert sleeps == [0.01, 0.01, 0.01]              # backoff twice; Retry-After (0.01) once


def test_failures_become_minus_one_and_unlabelled_replies_are_reported(server):
    judge, sleeps = judge_for(server, retries=2)
    verdicts, stats = judge_triples(judge, tri(["down", "bad", "chatty"]), samplings=SAMPLINGS[:1])
    assert [v.votes for v in verdicts] == [[-1], [-1], [-1]] and [v.label for v in verdicts] == [-1, -1, -1]
    assert judge.requests == 3 + 1 + 1               # 'down' tried 1 + 2 retries; 400 not retried
    assert sleeps == [0.01, 0.02]                    # exponential backoff
    assert stats.failed_calls == 2 and stats.unlabelled == 1
    assert any("HTTP 500" in p and "after 3 attempts" in p for p in stats.problems)
    assert any("HTTP 400" in p for p in stats.problems)
    assert any("without a label" in p and "I would rather not say." in p for p in stats.problems)


def test_unreachable_endpoint_fails_cleanly():
    judge = OpenAIJudge("http://127.0.0.1:9/v1", "m", retries=1, backoff=0.0, timeout=0.5, sleep=lambda s: None)
    verdicts, stats = judge_triples(judge, tri(["label=0"]), samplings=SAMPLINGS[:1])
    assert verdicts[0].votes == [-1] and stats.failed_calls == 1 and "after 2 attempts" in stats.problems[0]


def test_cache_rerun_sends_nothing_and_a_killed_run_resumes(server, tmp_path):
    cands = [f"label={i % 3}={i}" for i in range(6)] + ["chatty", "down"]
    judge, _ = judge_for(server, retries=0, workers=3)
    first, _ = judge_triples(judge, tri(cands), cache=VoteCache(tmp_path), batch_size=4)
    assert judge.requests == 32
    again, _ = judge_for(server, retries=0, workers=3)
    second, stats = judge_triples(again, tri(cands), cache=VoteCache(tmp_path))
    assert [v.votes for v in second] == [v.votes for v in first]
    assert again.requests == 4 and stats.cached == 28          # only 'down' (never stored) is asked again
    # a run killed after its first batches: the restart asks only what was not stored
    killed, _ = judge_for(server, retries=0)
    real = killed.complete
    budget = [3]

    def dying(prompts, sampling, seeds):
        budget[0] -= 1
        if budget[0] < 0:
            raise KeyboardInterrupt
        return real(prompts, sampling, seeds)

    killed.complete = dying                                     # type: ignore[method-assign]
    more = [f"label={i % 3}={i}" for i in range(6, 12)]
    with pytest.raises(KeyboardInterrupt):
        judge_triples(killed, tri(more), cache=VoteCache(tmp_path, flush_every=2), batch_size=2)
    assert killed.requests == 6                                 # 3 batches of 2 (sampling 0)
    resumed, _ = judge_for(server, retries=0)
    verdicts, stats = judge_triples(resumed, tri(more), cache=VoteCache(tmp_path))
    assert stats.cached == 6 and resumed.requests == 24 - 6
    assert [v.label for v in verdicts] == [i % 3 for i in range(6, 12)]


def test_rate_limit_spaces_requests():
    now, slept = [0.0], []
    limiter = RateLimiter(4.0, clock=lambda: now[0], sleep=lambda s: slept.append(s))
    for _ in range(3):
        limiter.acquire()
    assert slept == [0.25, 0.5]
    now[0] = 10.0
    limiter.acquire()
    assert slept == [0.25, 0.5]


def test_rate_limit_against_the_server(server):
    judge, _ = judge_for(server, rate=20.0)
    t0 = time.monotonic()
    judge_triples(judge, tri(["label=0"] * 1 + ["label=1"]), samplings=SAMPLINGS[:3])
    assert time.monotonic() - t0 >= 5 * 0.05 - 0.01            # 6 requests, 5 gaps of 50 ms


def test_spec(server):
    judge = make_judge(f"openai:{server.url}#judge-model", rate=None, workers=2)
    assert isinstance(judge, OpenAIJudge) and judge.identity() == {
        "backend": "openai", "url": server.url + "/chat/completions", "model": "judge-model", "max_tokens": 8}
