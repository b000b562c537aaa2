"""Paper 004 Table 13 as the mining suite's layout ``table13`` (kind ``topic-distribution``): the mined method
stores each training row's language and topic (``method/topics.tsv``), the layout counts them per language and
topic, and the transcribed Table 13 is shown below at the paper scales."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from test_method import make_source, spec, tiny  # noqa: F401  (tiny: the module's tiny-BERT fixture)

from harness.ablation.layout import load_layout, render_layout
from harness.ablation.paths import SUMMARY_FILE, report_dir
from harness.ablation.spec import load_suite
from harness.data.collections import TrainingData
from harness.errors import ConfigError, InputError
from harness.method import get_method
from methods.mining.method import TOPICS_FILE, TOPICS_HEADER
from reports.papers import load_tables

pytestmark = pytest.mark.usefixtures("one_thread")


def stored_results(root, scale, tsv: str, variant: str = "ours"):
    """A finished suite's summary and one training cell holding ``tsv`` as its topic assignment."""
    suite = load_suite("mining")
    folder = report_dir(root, suite.name, scale)
    folder.mkdir(parents=True)
    (folder / SUMMARY_FILE).write_text(json.dumps({"cells": [{"variant": variant, "key": "k0"}]}))
    method = root / "cells" / "train" / "k0" / "method"
    method.mkdir(parents=True)
    (method / TOPICS_FILE).write_text(tsv, encoding="utf-8")
    return suite


def direct_counts(tsv: str) -> Counter:
    lines = tsv.splitlines()
    assert tuple(lines[0].split("\t")) == TOPICS_HEADER
    return Counter((f[3], f[4].split("/")[-1]) for f in (line.split("\t") for line in lines[1:]))


def cells(table, group_prefix: str) -> dict[str, dict[str, float | None]]:
    return {r.label: {k: c.value for k, c in r.cells.items()} for r in table.rows
            if (r.group or "").startswith(group_prefix)}


def test_a_run_stores_its_topic_assignment_and_the_tiny_layout_counts_it(tiny, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = TrainingData([make_source("toy", n=18), make_source("other", n=6, langs=("de",), seed=1)])
    method = get_method("mined")
    s = spec(tiny, mine=False, batches="language_topic", languages="column:lang", topics="kmeans", n_topics=2)
    ckpt = method.train(s, data, tmp_path / "run")
    tsv = (ckpt.workdir / "method" / TOPICS_FILE).read_text(encoding="utf-8")
    lines = [line.split("\t") for line in tsv.splitlines()]
    assert tuple(lines[0]) == TOPICS_HEADER and len(lines) == 1 + 24
    # one line per training row, in the method's order: source, row, (no query_id here), language, topic
    assert [(f[0], int(f[1])) for f in lines[1:]] == [("toy", i) for i in range(18)] + [("other", i) for i in range(6)]
    assert [f[3] for f in lines[1:]] == [r.meta["lang"] for src in data.sources for r in src.rows]
    assert [f[4] for f in lines[1:]] == method._topics and {f[2] for f in lines[1:]} == {""}
    batches = json.loads((ckpt.workdir / "method" / "batches.json").read_text())
    assert Counter(f[4] for f in lines[1:]) == batches["topics"]

    suite = stored_results(tmp_path / "res", "tiny", tsv)
    table = render_layout(suite, "tiny", tmp_path / "res", "table13")
    ours = cells(table, "Ours")
    counts = direct_counts(tsv)
    topics = sorted({t for _, t in counts})
    assert topics == ["c0", "c1"] and [c.key for c in table.columns] == ["c0", "c1", "total"]
    assert list(ours) == ["en", "fr", "de", "Total"]
    for lang in ("en", "fr", "de"):
        assert {t: ours[lang][t] for t in topics} == {t: counts.get((lang, t), 0) for t in topics}
        assert ours[lang]["total"] == sum(n for (x, _), n in counts.items() if x == lang)
    # k-means clusters are per language: no total of c0 across languages, only the rows' total
    assert ours["Total"] == {"c0": None, "c1": None, "total": 24}
    assert (ours["en"]["total"], ours["fr"]["total"], ours["de"]["total"]) == (12, 6, 6)
    assert not cells(table, "Printed")                                       # no printed counts below paper scale
    assert any("k-means clusters" in n for n in table.notes)


def test_paper_layout_shows_table13_as_transcribed(tmp_path):
    # a fasttext12 assignment as the paper scale writes it (topics BL..OT, languages from the data's column)
    rows = [("ar", "GE")] * 5 + [("ar", "SM")] * 2 + [("sw", "LH")] * 3 + [("sw", "OT")]
    tsv = "\t".join(TOPICS_HEADER) + "\n" + "".join(f"miracl-train\t{i}\tq{i}\t{lang}\t{topic}\n"
                                                      for i, (lang, topic) in enumerate(rows))
    suite = stored_results(tmp_path, "paper", tsv)
    table = render_layout(suite, "paper", tmp_path, "table13")
    (spec13,) = load_tables("bdumdr", 13)
    keys = [c.key for c in spec13.columns]
    assert [c.key for c in table.columns] == keys                            # BL..OT, then Total
    ours = cells(table, "Ours")
    assert list(ours) == ["ar", "sw", "Total"]                               # the printed table's language order
    assert ours["ar"] == {**{k: 0.0 for k in keys}, "GE": 5.0, "SM": 2.0, "total": 7.0}
    assert ours["sw"]["LH"] == 3.0 and ours["sw"]["OT"] == 1.0
    assert ours["Total"] == {**{k: 0.0 for k in keys}, "GE": 5.0, "SM": 2.0, "LH": 3.0, "OT": 1.0, "total": 11.0}
    printed = cells(table, "Printed in paper 004, Table 13")
    assert list(printed) == [r.label for r in spec13.rows]
    for row in spec13.rows:
        assert printed[row.label] == {k: c.value for k, c in zip(keys, row.cells)}
    assert printed["ar"]["total"] == 3497 and printed["Total"]["GE"] == 16415        # as printed (ar's slip too)
    note = next(n for n in table.notes if "not their cells' sums" in n)
    assert "ar total 3,497 (cells 3,495)" in note and "fi total 2,997 (cells 2,897)" in note
    assert not any("not comparable" in n for n in table.notes)


def test_refusals(tmp_path):
    import yaml

    suite = stored_results(tmp_path, "tiny", "source\trow\tlanguage\ttopic\nx\t0\ten\tc0\n")
    with pytest.raises(InputError, match="expected the header"):
        render_layout(suite, "tiny", tmp_path, "table13")
    (tmp_path / "cells" / "train" / "k0" / "method" / TOPICS_FILE).write_text(
        "\t".join(TOPICS_HEADER) + "\nx\t0\t\ten\t\n")
    with pytest.raises(InputError, match="with a language and a topic"):
        render_layout(suite, "tiny", tmp_path, "table13")
    (tmp_path / "cells" / "train" / "k0" / "method" / TOPICS_FILE).unlink()
    with pytest.raises(ConfigError, match="variant 'ours' stored no topic assignment"):
        render_layout(suite, "tiny", tmp_path, "table13")

    raw = yaml.safe_load(open(load_suite("mining").path, encoding="utf-8"))
    layouts = raw["table"]["layouts"]
    path = tmp_path / "mining.yaml"
    for columns, options, message in (
            (["wo-stage3"], {}, "variant 'wo-stage3' labels no topics"),
            (["baseline"], {}, "variant 'baseline' labels no topics"),
            (["zs-mbert"], {}, "variant 'zs-mbert' is trained by 'none'"),
            (["ours"], {"topics": 1}, "unknown option"),
            (["ours"], {"printed": {"paper": "bdumdr"}}, "printed must be"),
            (["ours"], {"printed": {"paper": "bdumdr", "table": 11}}, "no transcribed table 11")):
        layouts["table13"]["columns"], layouts["table13"]["options"] = columns, options
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(ConfigError, match=message):
            load_layout(load_suite(path), "tiny", "table13")


# ---------------------------------------------------------------------------- Table 10: layout table10 (data-counts)

def test_table10_counts_a_runs_sources_and_the_built_splits(tmp_path):
    """A mining-recipe build (fixture MIRACL te, sw: 20 judged queries, 2 held out) trained on: the run's #Q per
    language, the build's train and validation splits, and Table 10's printed Train #Q beside them."""
    import shutil
    from pathlib import Path

    from harness.data.builders import build, get_recipe
    from harness.data.collections import load_training_data

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "training_data" / "mining"
    shutil.copytree(fixtures, tmp_path / "sources")
    report = build(get_recipe("mining"), tmp_path / "built", tmp_path / "sources",
                   {"languages": "te,sw", "corpus_shards": 1}, offline=True)
    data = load_training_data([tmp_path / "built" / "train"])
    suite = stored_results(tmp_path / "res", "paper", "unused\n")
    (tmp_path / "res" / "cells" / "train" / "k0" / "run.json").write_text(json.dumps({"data": data.describe()}))
    table = render_layout(suite, "paper", tmp_path / "res", "table10")
    rows = {r.label: {k: c.value for k, c in r.cells.items()} for r in table.rows}
    assert [c.key for c in table.columns] == ["ours/train", "ours/built-train", "ours/built-train/judgements",
                                              "ours/built-validation", "ours/built-validation/judgements",
                                              "printed/train-q", "printed/train-j"]
    subsets = report.manifest["subsets"]
    for lang in ("te", "sw"):
        assert rows[lang]["ours/train"] == dict(zip(data.names, data.sizes))[lang]
        for split in ("train", "validation"):
            path = tmp_path / "built" / split / f"{lang}.jsonl"       # an empty subset writes no file
            built = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
            assert rows[lang][f"ours/built-{split}"] == subsets[f"{split}/{lang}"]["rows"] == len(built)
            # #J: a direct count of the judged passages of the built rows
            assert rows[lang][f"ours/built-{split}/judgements"] == sum(len(r["pos_ids"]) + len(r["neg_ids"])
                                                                        for r in built)
    assert rows["Total"]["ours/train"] == sum(data.sizes) == 18 and rows["Total"]["ours/built-validation"] == 2
    assert rows["Total"]["ours/built-train/judgements"] + rows["Total"]["ours/built-validation/judgements"] == 40
    (spec10,) = load_tables("bdumdr", 10)
    keys = [c.key for c in spec10.columns]
    printed = {r: dict(zip(keys, (c.value for c in spec10.row(r).cells))) for r in ("train-q", "train-j")}
    assert rows["te"]["printed/train-q"] == printed["train-q"]["te"] == 3452 and rows["sw"]["printed/train-q"] == 1901
    assert rows["te"]["printed/train-j"] == printed["train-j"]["te"] == 18608
    assert rows["Total"]["printed/train-q"] == printed["train-q"]["all"] == 40203
    assert rows["Total"]["printed/train-j"] == printed["train-j"]["all"] == 343177
    assert list(rows)[:16] == keys[1:]                                        # Table 10's language order
    assert rows["ar"]["ours/train"] is None and rows["ar"]["printed/train-q"] == 3495  # a language the run has not
    # a build made before the recipe recorded 'judgements': the column has no values and no total (not 0)
    manifest = json.loads((tmp_path / "built" / "build.json").read_text())
    for record in manifest["subsets"].values():
        record["stats"].pop("judgements")
    (tmp_path / "built" / "build.json").write_text(json.dumps(manifest))
    rows = {r.label: {k: c.value for k, c in r.cells.items()}
            for r in render_layout(suite, "paper", tmp_path / "res", "table10").rows}
    assert rows["Total"]["ours/built-train/judgements"] is None and rows["te"]["ours/built-train/judgements"] is None
    assert rows["Total"]["ours/built-train"] == 18

    from harness.ablation.layout import LayoutColumn, TableLayout, layout_kind

    for options, message in (({"printed": {"paper": "bdumdr", "table": 10, "row": "train"}}, "has no row 'train'"),
                             ({"printed": {"paper": "bdumdr", "table": 10, "row": ["train-q", "x"]}}, "no row 'x'"),
                             ({"stats": "judgements"}, "stats must be a list"),
                             ({"printed": {"paper": "bdumdr", "table": 10}}, "printed must be")):
        layout = TableLayout("t", "data-counts", "", [LayoutColumn("ours")], options=options)
        with pytest.raises(ConfigError, match=message):
            layout_kind("data-counts").check(layout, suite, "paper")
    (tmp_path / "res" / "cells" / "train" / "k0" / "run.json").unlink()
    with pytest.raises(ConfigError, match="has no run record"):
        render_layout(suite, "paper", tmp_path / "res", "table10")


def test_table10_at_tiny_from_the_run_record(tmp_path):
    suite = stored_results(tmp_path, "tiny", "unused\n")
    sources = [{"name": "latin_qa", "rows": 400, "language": "xla", "path": str(tmp_path / "none" / "a.jsonl")},
               {"name": "cjk_qa", "rows": 300, "language": "xzh"}, {"name": "x", "rows": 5, "language": ["xla"]}]
    (tmp_path / "cells" / "train" / "k0" / "run.json").write_text(json.dumps({"data": sources}))
    table = render_layout(suite, "tiny", tmp_path, "table10")
    rows = {r.label: {k: c.value for k, c in r.cells.items()} for r in table.rows}
    assert rows == {"xla": {"ours/train": 405}, "xzh": {"ours/train": 300}, "Total": {"ours/train": 705}}
    import yaml

    raw = yaml.safe_load(open(load_suite("mining").path, encoding="utf-8"))
    raw["table"]["layouts"]["table10"]["columns"] = ["zs-mbert"]
    path = tmp_path / "mining.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="trains nothing"):
        load_layout(load_suite(path), "tiny", "table10")
