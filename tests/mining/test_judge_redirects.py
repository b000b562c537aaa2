"""The openai judge's API key never leaves the endpoint's origin: two real loopback servers, the
judge's endpoint answering 3xx to the other one (another port: another origin).  Redirects are not
followed, so the other server receives nothing (in particular no ``Authorization: Bearer <key>``) and
none of its answers become votes; the call fails with an error naming the redirect's origin, and the
key shows in no error, traceback, log record or ``repr``.  A redirect within the same origin is not
followed either (the error says so).  Credentials in the base URL itself are refused."""
from __future__ import annotations

import json
import logging
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.errors import ConfigError
from methods.mining import judge_openai
from methods.mining.judge import SAMPLINGS, Triple, judge_triples
from methods.mining.judge_openai import OpenAIJudge
from methods.mining.judge_spec import make_judge

KEY = "sk-test-9f8e7d6c5b4a-do-not-leak"
KEY_ENV = "HARNESS_TEST_JUDGE_KEY"


class Loopback:
    """A 127.0.0.1 server on its own port recording every request (method, path, headers).  With
    ``redirect`` set it answers every request with that status and ``Location``; otherwise it answers
    GET and POST with a well-formed chat completion whose content is "2" (a vote, were it taken)."""

    def __init__(self, redirect: tuple[int, str] | None = None):
        self.requests: list[dict] = []
        self.redirect = redirect
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                outer.requests.append({"method": self.command, "path": self.path,
                                       "headers": dict(self.headers.items()), "body": body})
                if outer.redirect is not None:
                    code, location = outer.redirect
                    self.send_response(code)
                    self.send_header("Location", location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": "2"}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def target():
    s = Loopback()
    yield s
    s.close()


@pytest.fixture
def make_redirector():
    made: list[Loopback] = []

    def make(code: int, location: str) -> Loopback:
        made.append(Loopback(redirect=(code, location)))
        return made[-1]

    yield make
    for s in made:
        s.close()


def judge_at(url: str, **kw) -> OpenAIJudge:
    return OpenAIJudge(url, "judge-model", api_key_env=KEY_ENV, backoff=0.0, timeout=2.0,
                       sleep=lambda s: None, **kw)


def tri(n: int = 3) -> list[Triple]:
    return [Triple(f"which river is longest? {i}", "the Nile", f"the Amazon {i}") for i in range(n)]


def run_and_capture(judge: OpenAIJudge, caplog) -> BaseException | None:
    with caplog.at_level(logging.DEBUG):
        try:
            judge_triples(judge, tri(), samplings=SAMPLINGS[:2])
        except Exception as exc:      # noqa: BLE001 - what it is, is asserted by the caller
            return exc
    return None


def assert_key_nowhere(error: BaseException, caplog) -> None:
    text = "".join(traceback.format_exception(error))
    assert KEY not in text and KEY not in repr(error) and "Bearer" not in text
    for record in caplog.records:
        dump = f"{record.getMessage()} {record.args!r} {record.exc_text or ''} {record.__dict__!r}"
        assert KEY not in dump, record


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_redirect_to_another_origin_sends_nothing_there_and_fails_clearly(monkeypatch, caplog, target,
                                                                          make_redirector, code):
    monkeypatch.setenv(KEY_ENV, KEY)
    redirector = make_redirector(code, f"{target.origin}/v1/chat/completions?token=abc")
    judge = judge_at(redirector.origin + "/v1", workers=2)
    error = run_and_capture(judge, caplog)

    carried = [r for r in target.requests if KEY in json.dumps(r["headers"])]
    assert carried == [], f"{len(carried)} requests carried the API key to {target.origin}"
    assert target.requests == []                       # nothing at all goes to the other origin
    # the judge's own endpoint did get the key (it is the origin the key is meant for)
    assert redirector.requests and all(r["headers"].get("Authorization") == f"Bearer {KEY}"
                                       for r in redirector.requests)

    assert isinstance(error, judge_openai.JudgeRedirectError) and isinstance(error, ConfigError)
    message = str(error)
    assert f"redirected (HTTP {code}) to {target.origin}" in message
    assert "not followed" in message and "the request and its credentials were not sent there" in message
    assert "token=abc" not in message                  # the origin only, not the Location's path or query
    assert_key_nowhere(error, caplog)


def test_same_origin_redirect_is_not_followed_either(monkeypatch, caplog, make_redirector):
    monkeypatch.setenv(KEY_ENV, KEY)
    redirector = make_redirector(302, "/v2/chat/completions")          # relative: the same origin
    judge = judge_at(redirector.origin + "/v1", workers=1)
    error = run_and_capture(judge, caplog)
    assert isinstance(error, judge_openai.JudgeRedirectError)
    assert f"to {redirector.origin} (the same origin" in str(error)
    assert [r["path"] for r in redirector.requests] == ["/v1/chat/completions"]   # one call, not retried
    assert_key_nowhere(error, caplog)


def test_redirect_without_a_key_fails_the_same_way(monkeypatch, caplog, target, make_redirector):
    monkeypatch.delenv(KEY_ENV, raising=False)
    redirector = make_redirector(302, target.origin + "/v1/chat/completions")
    judge = judge_at(redirector.origin + "/v1", workers=1)
    error = run_and_capture(judge, caplog)
    assert isinstance(error, judge_openai.JudgeRedirectError) and target.requests == []
    assert "Authorization" not in redirector.requests[0]["headers"]


def test_the_key_is_in_no_repr(monkeypatch, target):
    monkeypatch.setenv(KEY_ENV, KEY)
    judge = judge_at(target.origin + "/v1")
    for text in (repr(judge), str(judge), repr(vars(judge)), repr(judge.identity())):
        assert KEY not in text
    assert judge.has_api_key and "<secret>" in repr(judge)
    verdicts, _ = judge_triples(judge, tri(1), samplings=SAMPLINGS[:1])       # the key still goes home
    assert verdicts[0].votes == [2] and target.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("spec", ["openai:http://user:hunter2@127.0.0.1:9/v1#m",
                                  "openai:https://:hunter2@example.invalid/v1#m"])
def test_credentials_in_the_url_are_refused_without_echoing_them(spec):
    with pytest.raises(ConfigError, match="credentials in the URL are refused") as exc:
        make_judge(spec)
    assert "hunter2" not in str(exc.value) and "***@" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        OpenAIJudge("ftp://user:hunter2@host/v1", "m")
    assert "hunter2" not in str(exc.value)
