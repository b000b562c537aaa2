"""Mined rows (methods/mining/rows.py) and ``harness mine``: format, provenance, report, byte-identical
reruns, resume after a kill, bad input through the CLI."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from mining_util import SaltEncoder

from harness.cli import main
from harness.data.training import TrainingRow, read_training_rows
from harness.errors import ConfigError
from harness.retrieval.pool import CandidatePool, DenseSource
from methods.mining import select_negatives
from methods.mining.rows import MiningSettings, mine_rows, rows_corpus

TOPICS = ["river", "mountain", "violin", "comet", "bakery", "glacier"]


def make_rows(n: int = 24) -> list[TrainingRow]:
    rows = []
    for i in range(n):
        t = TOPICS[i % len(TOPICS)]
        rows.append(TrainingRow(f"what about the {t} number {i}?", [f"the {t} passage {i}"],
                                [f"unrelated note {i}"], {"line": i + 1, "source": "toy"}))
    return rows


def factory(encoder, chunk_size=5, cache=None):
    def build(corpus):
        return CandidatePool([DenseSource(encoder, "a")], corpus, depth=12, cache_dir=cache, chunk_size=chunk_size)
    return build


def read_lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_mined_rows_provenance_and_report(tmp_path):
    rows = make_rows()
    out = tmp_path / "mined.jsonl"
    settings = MiningSettings(strategy="perc_pos", k=4, percent=0.9)
    report = mine_rows(rows, factory(SaltEncoder("a"), cache=tmp_path / "c"), out, settings)["report"]
    mined = read_training_rows(out)                             # the harness reads its own output
    prov = read_lines(tmp_path / "mined.provenance.jsonl")
    corpus = rows_corpus(rows)
    assert len(mined) == len(prov) == 24 and len(corpus) == 48
    enc = SaltEncoder("a")
    for row, m, p in zip(rows, mined, prov):
        assert m.query == row.query and m.pos == row.pos and m.meta["source"] == "toy"
        assert not set(m.neg) & set(row.pos)
        # the provenance replays: candidates' fused scores -> the kernel -> the same negatives
        pos_score = float(enc.encode_queries([row.query])[0] @ enc.encode_docs(row.pos)[0])
        assert p["positive_scores"] == [pytest.approx(pos_score, abs=1e-6)]
        assert p["threshold"] == pytest.approx(pos_score - abs(pos_score) * 0.1, abs=1e-6)
        assert all(n["score"] <= p["threshold"] + 1e-9 for n in p["negatives"])
        assert [n["rank"] for n in p["negatives"]] == sorted(n["rank"] for n in p["negatives"])
        assert len(m.neg) == len(p["negatives"]) <= 4
        assert p["candidates"] + p["positives_removed"] == 12 + 1 or p["candidates"] == 12
    assert report["rows"] == 24 and report["candidates_per_query"]["max"] == 12
    assert report["candidates_per_query"]["min"] == min(p["candidates"] for p in prov) >= 11
    shares = report["removed_share"]
    removed = report["removed"]
    assert removed["threshold"] == sum(p["removed"]["threshold"] for p in prov)
    assert shares["positive"] == pytest.approx(removed["positive"] / (24 * 12 + removed["positive"]
                                                                       - sum(12 - p["candidates"] for p in prov)))
    assert report["pool_fill"] == pytest.approx(np.mean([len(p["negatives"]) for p in prov]) / 4)
    assert report["under_full_pools"] == sum(len(p["negatives"]) < min(7, 4) for p in prov)   # k = 4


def test_selection_in_rows_equals_the_kernel(tmp_path):
    rows = make_rows(10)
    out = tmp_path / "naive.jsonl"
    mine_rows(rows, factory(SaltEncoder("a")), out, MiningSettings(strategy="shifted", shift=2, k=3))
    for p in read_lines(tmp_path / "naive.provenance.jsonl"):
        assert [n["rank"] for n in p["negatives"]] == [3, 4, 5]
        assert select_negatives([1.0] * 12, [], "shifted", 3, shift=2) == [2, 3, 4]


def test_mining_twice_is_byte_identical_including_the_random_window(tmp_path):
    rows = make_rows()
    settings = MiningSettings(strategy="shifted_random", shift=1, window=12, k=5, seed=3)
    a, b = tmp_path / "a" / "m.jsonl", tmp_path / "b" / "m.jsonl"
    mine_rows(rows, factory(SaltEncoder("a"), cache=tmp_path / "ca"), a, settings)
    mine_rows(rows, factory(SaltEncoder("a"), cache=tmp_path / "cb"), b, settings)   # fresh caches too
    for name in ("m.jsonl", "m.provenance.jsonl", "m.report.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    other = tmp_path / "c" / "m.jsonl"
    mine_rows(rows, factory(SaltEncoder("a"), cache=tmp_path / "ca"), other,
              MiningSettings(strategy="shifted_random", shift=1, window=12, k=5, seed=4))
    assert other.read_bytes() != a.read_bytes()                                    # the seed matters


class Killed(Exception):
    pass


def test_a_killed_run_resumes_and_ends_identical(tmp_path, monkeypatch):
    rows = make_rows()
    settings = MiningSettings(strategy="margin_pos", k=4)
    ref = tmp_path / "ref" / "m.jsonl"
    mine_rows(rows, factory(SaltEncoder("a"), cache=tmp_path / "c1"), ref, settings)

    out = tmp_path / "run" / "m.jsonl"
    import methods.mining.rows as rows_mod
    real, calls, kill = rows_mod._mine_chunk, [], [True]

    def dying(*a, **kw):
        calls.append(1)
        if kill[0] and len(calls) == 3:
            raise Killed
        return real(*a, **kw)

    monkeypatch.setattr(rows_mod, "_mine_chunk", dying)
    with pytest.raises(Killed):
        mine_rows(rows, factory(SaltEncoder("a"), cache=tmp_path / "c2"), out, settings)
    assert not out.exists()                                     # nothing half-written
    parts = sorted(p.name for p in (out.parent / ".m.jsonl.parts").glob("part-*"))
    assert parts == ["part-00000.json", "part-00001.json"]
    calls.clear()
    kill[0] = False
    enc = SaltEncoder("a")
    mine_rows(rows, factory(enc, cache=tmp_path / "c2"), out, settings)
    assert len(calls) == 3                                      # chunks 2, 3, 4 of 5 only
    # chunk sizes 5,5,5,5,4; chunk 2's candidates were cached before the kill, the corpus is cached:
    # queries of chunks 2-4 (14: chunk 2's for its positive scores, 3-4's for candidates, reused for the
    # positive scores); the positives are corpus passages, read from the cached corpus embeddings
    assert enc.calls == 14
    assert out.read_bytes() == ref.read_bytes()
    assert not (out.parent / ".m.jsonl.parts").exists()


def test_refusals(tmp_path):
    rows = make_rows(4)
    out = tmp_path / "m.jsonl"
    out.write_text("keep me\n")
    with pytest.raises(ConfigError, match="exists; pass --overwrite"):
        mine_rows(rows, factory(SaltEncoder("a")), out, MiningSettings())
    assert out.read_text() == "keep me\n"
    with pytest.raises(ConfigError, match=r"percent must lie in \(0, 1\]"):
        mine_rows(rows, factory(SaltEncoder("a")), tmp_path / "x.jsonl", MiningSettings(percent=1.5))
    with pytest.raises(ConfigError, match="unknown selection strategy"):
        mine_rows(rows, factory(SaltEncoder("a")), tmp_path / "x.jsonl", MiningSettings(strategy="top"))
    assert not (tmp_path / "x.jsonl").exists()


# ------------------------------------------------------------------ the CLI, with the real MiniLM
def write_rows(path, rows):
    path.write_text("".join(json.dumps({"query": r.query, "pos": r.pos, "neg": r.neg}) + "\n" for r in rows))


def test_cli_mines_with_minilm(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "train.jsonl"
    write_rows(data, make_rows(12))
    out = tmp_path / "mined.jsonl"
    args = ["mine", "--data", str(data), "--out", str(out), "--k", "3", "--depth", "10", "--no-progress"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 12 and report["candidates_per_query"]["max"] == 10
    first = out.read_bytes()
    assert main(args) == 2                                     # exists
    assert "pass --overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0 and out.read_bytes() == first
    mined = read_training_rows(out)
    assert all(len(r.neg) <= 3 and not set(r.neg) & set(r.pos) for r in mined)


@pytest.mark.parametrize("extra,message", [
    (["--percent", "1.5"], r"percent must lie in (0, 1]"),
    (["--retriever", "bm25", "--strategy", "abs"], "needs cosine scores"),
    (["--retriever", "minilm", "--retriever", "bm25"], "fusion 'mean' averages cosines"),
    (["--fusion", "borda", "--retriever", "minilm", "--retriever", "minilm"], "unknown fusion 'borda'"),
])
def test_cli_bad_settings_exit_2_and_write_nothing(tmp_path, capsys, extra, message):
    data = tmp_path / "train.jsonl"
    write_rows(data, make_rows(3))
    out = tmp_path / "mined.jsonl"
    assert main(["mine", "--data", str(data), "--out", str(out), "--no-progress", *extra]) == 2
    assert message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["train.jsonl"]


def test_cli_bad_rows_and_strategy(tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text('{"query": "q", "pos": []}\n')
    assert main(["mine", "--data", str(data), "--out", str(tmp_path / "m.jsonl")]) == 2
    assert "train.jsonl:1: field 'pos' is an empty list" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["mine", "--data", str(data), "--out", str(tmp_path / "m.jsonl"), "--strategy", "topk"])
    assert "invalid choice: 'topk'" in capsys.readouterr().err
