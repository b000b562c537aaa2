"""The false-negative filter inside mining (methods/mining/judge_filter.py, rows.py, ``harness mine
--judge``): what is judged and removed, both filter modes, every vote in the provenance, the
report's filter section, byte-identical reruns without judge calls, resume after a kill, bad judges."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from mining_util import SaltEncoder
from test_mine import factory, make_rows, read_lines, write_rows

from harness.cli import main
from harness.errors import ConfigError
from methods.mining.judge import StandInJudge, Triple, fn_vote, overlap_label
from methods.mining.judge_cache import VoteCache
from methods.mining.judge_filter import JudgeFilter
from methods.mining.rows import MiningSettings, mine_rows, passage_id


def mine(tmp_path, name, judge, mode="keep_zero", strategy="naive", k=4, cache=None, **kw):
    out = tmp_path / name / "m.jsonl"
    flt = JudgeFilter(judge, mode, VoteCache(cache or tmp_path / "votes", **kw))
    report = mine_rows(make_rows(), factory(SaltEncoder("a"), cache=tmp_path / "c"), out,
                       MiningSettings(strategy=strategy, k=k), judge_filter=flt)
    return out, read_lines(out.with_name("m.provenance.jsonl")), report["report"]


@pytest.mark.parametrize("mode", ["keep_zero", "drop_two"])
def test_filter_removes_what_the_votes_say(tmp_path, mode):
    rows = make_rows()
    out, prov, report = mine(tmp_path, mode, StandInJudge(), mode=mode)
    text = {passage_id(t): t for r in rows for t in (*r.pos, *r.neg)}
    judged_total = removed_total = 0
    for row, p in zip(rows, prov):
        j = p["judge"]
        assert j["positive"] == 0 and len(j["judged"]) == p["candidates"]       # naive: every candidate judged
        for item in j["judged"]:
            label = overlap_label(Triple(row.query, row.pos[0], text[item["doc_id"]]))
            assert item["votes"] == [label] * 4 and item["label"] == fn_vote(item["votes"]) == label
            assert item["kept"] is (label == 0 if mode == "keep_zero" else label != 2)
        kept_ranks = [it["rank"] for it in j["judged"] if it["kept"]]
        assert [n["rank"] for n in p["negatives"]] == kept_ranks[:4]             # naive on the filtered list
        assert all(n["votes"] == [n["label"]] * 4 for n in p["negatives"])
        assert p["removed"]["judge"] == sum(not it["kept"] for it in j["judged"])
        judged_total += len(j["judged"])
        removed_total += p["removed"]["judge"]
    f = report["filter"]
    assert f["mode"] == mode and f["judge"]["backend"] == "stand-in" and f["prompt_version"] == "none"
    assert f["judged"] == judged_total and f["removed"] == removed_total > 0
    assert f["removed_share_of_judged"] == pytest.approx(removed_total / judged_total)
    assert report["removed"]["judge"] == removed_total and f["failed_votes"] == 0 and "message" not in f
    assert sum(f["labels"].values()) == judged_total
    # same-topic passages share 3 of 5 words with the positive (J = 0.6: voted 2); others score 0 or 1
    assert f["labels"]["2"] > 0 and f["labels"]["1"] > 0 and f["labels"]["0"] > 0


def test_threshold_strategies_judge_only_candidates_below_the_bound(tmp_path):
    _, prov, _ = mine(tmp_path, "pp", StandInJudge(), strategy="perc_pos")
    for p in prov:
        assert len(p["judge"]["judged"]) == p["candidates"] - p["removed"]["threshold"]


def test_rerun_is_byte_identical_and_asks_nothing(tmp_path):
    first = StandInJudge()
    a, _, report = mine(tmp_path, "a", first)
    assert first.calls == 4 * report["filter"]["judged"] > 0          # distinct triples, 4 samplings each
    again = StandInJudge()
    b, _, _ = mine(tmp_path, "b", again)
    assert again.calls == 0
    for name in ("m.jsonl", "m.provenance.jsonl", "m.report.json"):
        assert (a.parent / name).read_bytes() == (b.parent / name).read_bytes()
    fresh = StandInJudge()
    c, _, _ = mine(tmp_path, "c", fresh, cache=tmp_path / "other-votes")
    assert fresh.calls == first.calls and c.read_bytes() == a.read_bytes()


class Killed(Exception):
    pass


def test_killed_run_resumes_without_asking_again(tmp_path):
    ref_judge = StandInJudge()
    ref, _, _ = mine(tmp_path, "ref", ref_judge, cache=tmp_path / "ref-votes")
    judge = StandInJudge()
    real = judge.replies

    def dying(triples, sampling, seeds):
        if judge.calls >= 150:        # mid-way through the judging of a later chunk
            raise Killed
        return real(triples, sampling, seeds)

    judge.replies = dying             # type: ignore[method-assign]
    with pytest.raises(Killed):
        mine(tmp_path, "run", judge, flush_every=1)
    asked_before = judge.calls
    assert 0 < asked_before < ref_judge.calls and not (tmp_path / "run" / "m.jsonl").exists()
    resumed = StandInJudge()
    out, _, _ = mine(tmp_path, "run", resumed)
    assert asked_before + resumed.calls == ref_judge.calls                   # nothing asked twice
    assert out.read_bytes() == ref.read_bytes()


def test_bad_filter_mode():
    with pytest.raises(ConfigError, match="unknown filter mode"):
        JudgeFilter(StandInJudge(), "keep_one")


# ------------------------------------------------------------------ the CLI, with an endpoint on 127.0.0.1
class Endpoint:
    """An OpenAI-compatible server that answers like the stand-in rule, except for glacier
    candidates, which get a reply without a label."""

    def __init__(self):
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][0]["content"]

                def field(name):
                    return prompt.split(f"{name}: ")[1].split("\n")[0]

                outer.calls += 1
                t = Triple(field("Question"), field("Standard Answer"), field("Candidate Answer"))
                text = "Hard to say." if "glacier" in t.candidate else f"Score: {overlap_label(t)}"
                data = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def endpoint():
    e = Endpoint()
    yield e
    e.httpd.shutdown()
    e.httpd.server_close()


def test_cli_judge_endpoint_unlabelled_replies_and_cache(tmp_path, capsys, monkeypatch, endpoint):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "train.jsonl"
    write_rows(data, make_rows(12))
    out = tmp_path / "mined.jsonl"
    args = ["mine", "--data", str(data), "--out", str(out), "--k", "3", "--depth", "10", "--no-progress",
            "--strategy", "naive", "--judge", f"openai:{endpoint.url}#fn-judge", "--judge-workers", "2"]
    assert main(args) == 0
    captured = capsys.readouterr()
    f = json.loads(captured.out)["filter"]
    assert f["judge"] == {"backend": "openai", "url": endpoint.url + "/chat/completions", "model": "fn-judge",
                          "max_tokens": 8}
    assert f["labels"]["-1"] > 0 and f["unlabelled_replies"] == 4 * f["labels"]["-1"]
    assert "without a label" in f["problems"][0] and "Hard to say." in f["problems"][0]
    assert "warning:" in captured.err and f"{f['labels']['-1']} candidates had no valid vote (removed" in f["message"]
    prov = read_lines(tmp_path / "mined.provenance.jsonl")
    assert f["judged"] == sum(p["candidates"] for p in prov) and endpoint.calls == 4 * f["judged"]
    for p in prov:
        for item in p["judge"]["judged"]:
            assert item["kept"] is (item["label"] == 0)
    calls, first = endpoint.calls, out.read_bytes()
    assert main([*args, "--overwrite"]) == 0 and endpoint.calls == calls and out.read_bytes() == first
    capsys.readouterr()
    # the paper's mode keeps the unjudgeable (-1) and the partly relevant (1) ones
    assert main([*args, "--overwrite", "--filter-mode", "drop_two"]) == 0
    f2 = json.loads(capsys.readouterr().out)["filter"]
    assert endpoint.calls == calls and f2["removed"] == f2["labels"]["2"] < f["removed"]


def test_cli_unknown_judge_is_refused(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    write_rows(data, make_rows(3))
    out = tmp_path / "m.jsonl"
    assert main(["mine", "--data", str(data), "--out", str(out), "--judge", "gpt-4o", "--no-progress"]) == 2
    assert "unknown judge 'gpt-4o'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["mine", "--data", str(data), "--out", str(out), "--filter-mode", "keep_one"])
    assert "invalid choice: 'keep_one'" in capsys.readouterr().err
    assert not out.exists()
