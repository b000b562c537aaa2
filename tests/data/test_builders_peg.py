"""``harness data build peg-public``: paper 002's public datasets as PEG rows, on the hand-made fixture
(tests/fixtures/training_data/peg).  With passage_chars 12:

* dureader-retrieval: row 1 keeps 5 of its 7 negatives; row 2 repeats row 1's (query, positive) and is dropped;
  row 3 is a triplet list.
* thucnews: "主队在决赛中获胜。" (9 characters) "球迷在广场庆祝。" (8) "赛后教练接受采访。" (9) splits into
  three pieces and the title pairs with the first; a row without title is dropped; ``content`` names the text
  of the third.
* cmnli: the premise's entailment is its positive and its contradiction its negative; the neutral pairs are
  dropped (2); a premise left without positive is dropped (1); a ``text_a``/``text_b`` pair labelled 1 is a row.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.data.builders import SourceError, build, get_recipe
from harness.data.collections import load_training_data
from harness.errors import ConfigError, InputError
from suites.training_data.peg import INSTRUCTION, PUBLIC, datasets, split_passage

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "training_data" / "peg"
NAMES = "dureader-retrieval,thucnews,cmnli"


@pytest.fixture
def src(tmp_path: Path) -> Path:
    dest = tmp_path / "sources"
    shutil.copytree(FIXTURE, dest)
    return dest


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_three_input_shapes_become_peg_rows(tmp_path: Path, src: Path) -> None:
    report = build(get_recipe("peg-public"), tmp_path / "out", src, {"datasets": NAMES, "passage_chars": 12},
                   offline=True)
    out = tmp_path / "out"
    qa = rows(out / "dureader-retrieval.jsonl")
    assert [(r["query"], r["pos"], len(r["neg"])) for r in qa] == [
        ("长江有多长", ["长江全长约6300公里。"], 5), ("上海在哪里", ["上海位于长江口。"], 1)]
    assert qa[0]["neg"] == ["黄河全长约5464公里。", "珠江长2400公里。", "淮河长1000公里。", "海河长1090公里。",
                            "辽河长1345公里。"]
    news = rows(out / "thucnews.jsonl")
    assert [(r["query"], r["pos"]) for r in news] == [("球队夺冠", ["主队在决赛中获胜。"]), ("短讯", ["今天天气晴。"])]
    nli = rows(out / "cmnli.jsonl")
    assert [(r["query"], r["pos"], r["neg"]) for r in nli] == [
        ("一个人在弹吉他。", ["有人在演奏乐器。"], ["没有人在演奏。"]), ("怎么办理信用卡", ["信用卡如何申请"], [])]
    stats = {name: report.manifest["subsets"][name]["stats"] for name in NAMES.split(",")}
    assert (stats["dureader-retrieval"]["negatives_cut"], stats["dureader-retrieval"]["duplicates_dropped"]) == (2, 1)
    assert (stats["thucnews"]["passages_split"], stats["thucnews"]["rows_dropped_empty"]) == (1, 1)
    assert (stats["cmnli"]["pairs_dropped_label"], stats["cmnli"]["premises_without_positive"]) == (2, 1)
    domains = json.loads((out / "domains.json").read_text(encoding="utf-8"))
    entry = domains["cmnli"] if isinstance(domains, dict) else next(d for d in domains if d["name"] == "cmnli")
    assert entry["task"] == "matching" and entry["prompt"] == INSTRUCTION and entry["symmetric"]
    assert "substitute" in entry["mixture"]
    data = load_training_data([out])
    assert sorted(data.names) == sorted(NAMES.split(",")) and sum(data.sizes) == 6


def test_passages_split_at_sentence_ends_and_long_sentences_are_cut() -> None:
    assert split_passage("甲乙丙。丁戊。", 4) == ["甲乙丙。", "丁戊。"]
    assert split_passage("一二三四五六七八九十", 4) == ["一二三四", "五六七八", "九十"]
    assert split_passage("短。", 0) == ["短。"] and split_passage("  ", 10) == []


def test_dataset_selection_by_name_and_task_group() -> None:
    assert len(datasets("all")) == len(PUBLIC) == 29
    assert datasets("qa")[:2] == ["dureader-retrieval", "webqa"] and len(datasets("summarization")) == 7
    with pytest.raises(ConfigError, match="unknown dataset.*nope"):
        datasets("lcqmc,nope")


def test_a_missing_dataset_file_names_where_it_comes_from(tmp_path: Path, src: Path) -> None:
    with pytest.raises(SourceError, match="lcqmc.jsonl") as info:
        build(get_recipe("peg-public"), tmp_path / "out", src, {"datasets": "lcqmc"}, offline=True)
    assert "LCQMC" in str(info.value)


def test_malformed_labelled_pair_fails_at_its_line(tmp_path: Path, src: Path) -> None:
    (src / "cmnli.jsonl").write_text('{"sentence1": "甲", "label": 1}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"cmnli.jsonl:1: a labelled pair needs two non-empty strings"):
        build(get_recipe("peg-public"), tmp_path / "out", src, {"datasets": "cmnli"}, offline=True)
