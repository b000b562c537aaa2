"""``harness data build``: the engine (sources, verification, resume, atomic output) and the tdro, mining
and splade recipes on the release-format fixtures in tests/fixtures/training_data (made by its
make_fixtures.py, which lists what was planted).  coco-dr (BM25) is in test_builders_coco.py."""
from __future__ import annotations

import functools
import gzip
import http.server
import json
import math
import shutil
import tarfile
import threading
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest

from harness.cli import main
from harness.data import builders
from harness.data.builders import (
    BuildContext,
    DataRecipe,
    Source,
    SourceError,
    SubsetResult,
    build,
    get_recipe,
    list_recipes,
)
from harness.data.collections import load_training_data
from harness.errors import InputError
from suites.training_data import splade, tdro
from suites.training_data._release import normalise

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training_data"


@pytest.fixture
def sources(tmp_path: Path):
    """A writable copy of one recipe's fixture folder (a build records checksums in it)."""
    def copy(recipe: str) -> Path:
        dest = tmp_path / "sources" / recipe
        shutil.copytree(FIXTURES / recipe, dest)
        return dest
    return copy


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ----------------------------------------------------------------------------- engine

def test_the_four_recipes_are_registered() -> None:
    assert {"tdro", "coco-dr", "mining", "splade"} <= set(list_recipes())
    assert get_recipe("coco-dr").paper.startswith("001")


def test_offline_missing_source_names_what_to_place_where(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as err:
        build(get_recipe("splade"), tmp_path / "out", tmp_path / "empty", {"rows": 10}, offline=True)
    message = str(err.value)
    assert "26 source file(s) missing" in message
    assert f"{tmp_path / 'empty' / 'gooaq_pairs.jsonl.gz'}  <- hub dataset sentence-transformers/" \
           "embedding-training-data : gooaq_pairs.jsonl.gz" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("variable", ["HARNESS_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_environment_variables_stop_downloads(tmp_path: Path, monkeypatch, variable: str) -> None:
    monkeypatch.delenv("HARNESS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv(variable, "1")
    with pytest.raises(SourceError, match="downloads are off"):
        build(get_recipe("coco-dr"), tmp_path / "out", tmp_path / "empty")
    monkeypatch.setenv(variable, "0")
    assert not builders.offline_requested()


class OneFile(DataRecipe):
    """A test recipe: one source with a published checksum, one subset copying its rows."""

    name = "one-file"
    sha = ""

    def sources(self, options: dict[str, Any]) -> list[Source]:
        return [Source("rows.jsonl", sha256=self.sha, note="test")]

    def subsets(self, options: dict[str, Any]) -> list[str]:
        return ["rows"]

    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        return SubsetResult({"query": q, "pos": ["p"]} for q in ctx.path("rows.jsonl").read_text().split())


def test_published_checksum_mismatch_fails_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text("a b\n")
    recipe = OneFile()
    recipe.sha = "0" * 64
    with pytest.raises(SourceError, match=r"rows\.jsonl: SHA-256 [0-9a-f]{64} does not match the published 0{64}"):
        build(recipe, tmp_path / "out", tmp_path, offline=True)
    recipe.sha = builders.sha256_file(tmp_path / "rows.jsonl")
    report = build(recipe, tmp_path / "out", tmp_path, offline=True)
    assert report.manifest["totals"]["rows"] == 2


@pytest.fixture
def http_root(tmp_path: Path):
    """A local HTTP server over a folder: (folder, base URL)."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None      # quiet: no request lines in the test output
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class FromUrl(OneFile):
    """Two sources: a plain file and a member of a tar.gz archive, both from a URL."""

    base = ""

    def sources(self, options: dict[str, Any]) -> list[Source]:
        return [Source("rows.jsonl", url=f"{self.base}/rows.jsonl"),
                Source("more.txt", url=f"{self.base}/release.tar.gz", archive="release.tar.gz")]

    def build_subset(self, subset: str, ctx: BuildContext) -> SubsetResult:
        words = ctx.path("rows.jsonl").read_text().split() + ctx.path("more.txt").read_text().split()
        return SubsetResult({"query": q, "pos": ["p"]} for q in words)


def test_sources_download_from_urls_and_archives(tmp_path: Path, http_root) -> None:
    served, base = http_root
    (served / "rows.jsonl").write_text("a b\n")
    (tmp_path / "more.txt").write_text("c d e\n")
    with tarfile.open(served / "release.tar.gz", "w:gz") as tf:
        tf.add(tmp_path / "more.txt", arcname="release/more.txt")
    recipe, src = FromUrl(), tmp_path / "sources"
    recipe.base = base
    report = build(recipe, tmp_path / "out", src, offline=False)
    assert report.manifest["totals"]["rows"] == 5
    assert sorted(p.name for p in src.iterdir()) == ["checksums.json", "more.txt", "release.tar.gz", "rows.jsonl"]
    recipe.base = base + "/nothing-here"
    with pytest.raises(SourceError, match=r"rows\.jsonl: download from http://127\.0\.0\.1:\d+/nothing-here/rows"
                                          r"\.jsonl failed .*; place the file at "):
        build(recipe, tmp_path / "out2", tmp_path / "other", offline=False)
    assert not (tmp_path / "other" / "rows.jsonl").exists()


class FromHub(OneFile):
    def sources(self, options: dict[str, Any]) -> list[Source]:
        return [Source("rows.jsonl", hub="someone/data", hub_file="data/rows.jsonl.txt", revision="abc")]


def test_hub_download_is_checked_against_the_published_lfs_checksum(tmp_path: Path, monkeypatch) -> None:
    """The hub client is replaced by a stand-in that serves a local file and its LFS record."""
    served = tmp_path / "hub-cache" / "rows.jsonl.txt"
    served.parent.mkdir()
    served.write_text("x y z\n")
    published = {"sha256": builders.sha256_file(served)}
    asked: list[tuple] = []

    def download(repo, filename, *, repo_type, revision):
        asked.append((repo, filename, repo_type, revision))
        return str(served)

    class Api:
        def get_paths_info(self, repo, paths, *, repo_type, revision):
            return [type("RepoFile", (), {"lfs": published})()]

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    report = build(FromHub(), tmp_path / "out", tmp_path / "src", offline=False)
    assert asked == [("someone/data", "data/rows.jsonl.txt", "dataset", "abc")]
    assert report.manifest["totals"]["rows"] == 3
    assert report.manifest["sources"][0]["hub"] == "someone/data"
    published["sha256"] = "f" * 64                  # the hub says otherwise: nothing is placed
    with pytest.raises(SourceError, match=r"rows\.jsonl: the downloaded file does not match the SHA-256 the hub "
                                          r"publishes for hub dataset someone/data@abc : data/rows\.jsonl\.txt"):
        build(FromHub(), tmp_path / "out2", tmp_path / "src2", offline=False)
    assert not (tmp_path / "src2" / "rows.jsonl").exists()


def test_changed_source_fails_against_the_recorded_checksum(tmp_path: Path, sources) -> None:
    src = sources("tdro")
    build(get_recipe("tdro"), tmp_path / "a", src, {"sets": "xsum"}, offline=True)
    ledger = json.loads((src / "checksums.json").read_text())
    assert list(ledger) == ["xsum.jsonl.gz"]
    with gzip.open(src / "xsum.jsonl.gz", "at") as handle:
        handle.write('["one more query", "one more answer"]\n')
    with pytest.raises(SourceError, match=r"xsum\.jsonl\.gz: SHA-256 .* differs from the one recorded"):
        build(get_recipe("tdro"), tmp_path / "b", src, {"sets": "xsum"}, offline=True)


@pytest.mark.parametrize(("line", "problem"), [
    ("{broken", "malformed JSON"),
    ('["only one text"]', "a list row must hold at least 2 strings"),
    ('{"query": "q", "pos": []}', "no non-empty positive"),
    ('{"text": "q"}', "unknown row shape"),
])
def test_malformed_source_row_fails_with_file_and_line(tmp_path: Path, sources, line: str, problem: str) -> None:
    src = sources("tdro")
    path = src / "hotpotqa.jsonl"       # a hand-placed set: plain jsonl, 4 rows
    path.write_text(path.read_text() + line + "\n")
    (src / "checksums.json").unlink(missing_ok=True)
    with pytest.raises(InputError) as err:
        build(get_recipe("tdro"), tmp_path / "out", src, {"sets": "hotpotqa"}, offline=True)
    assert str(err.value).startswith(f"{path}:5: {problem}")
    assert not (tmp_path / "out").exists()


def test_interrupted_build_leaves_no_output_and_resumes_without_redoing(tmp_path: Path, sources,
                                                                       monkeypatch) -> None:
    src, out = sources("tdro"), tmp_path / "out"
    opts = {"sets": "agnews,AllNLI,altlex,xsum", "eval_queries": str(src / "eval")}
    calls: list[str] = []
    real = tdro.TdroRecipe.build_subset

    def interrupted(self, subset: str, ctx: BuildContext) -> SubsetResult:
        calls.append(subset)
        result = real(self, subset, ctx)
        if subset != "altlex":
            return result

        def half():                      # killed after one row of the third subset
            yield next(iter(result.rows))
            raise KeyboardInterrupt
        return SubsetResult(half(), result.metadata, result.stats)

    monkeypatch.setattr(tdro.TdroRecipe, "build_subset", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build(get_recipe("tdro"), out, src, opts, offline=True)
    assert not out.exists()
    staging = tmp_path / ".out.parts"
    assert sorted(p.name for p in staging.iterdir()) == ["AllNLI.build.json", "AllNLI.jsonl", "agnews.build.json",
                                                         "agnews.jsonl"]
    calls.clear()
    monkeypatch.setattr(tdro.TdroRecipe, "build_subset",
                        lambda self, subset, ctx: calls.append(subset) or real(self, subset, ctx))
    report = build(get_recipe("tdro"), out, src, opts, offline=True)
    assert calls == ["altlex", "xsum"]
    assert report.built == ["altlex", "xsum"] and report.reused == ["agnews", "AllNLI"]
    assert report.manifest["totals"]["rows"] == 16
    assert not staging.exists()
    calls.clear()
    again = build(get_recipe("tdro"), out, src, opts, offline=True)
    assert again.up_to_date and calls == []
    # A changed option is a different build: every subset is made again.
    build(get_recipe("tdro"), out, src, {**opts, "max_rows": 2}, offline=True)
    assert calls == ["agnews", "AllNLI", "altlex", "xsum"]
    assert load_training_data([out]).sizes == [2, 2, 2, 2]


# ----------------------------------------------------------------------------- tdro

def test_tdro_removes_exactly_the_planted_duplicates(tmp_path: Path, sources) -> None:
    src = sources("tdro")
    report = build(get_recipe("tdro"), tmp_path / "out", src, {"eval_queries": str(src / "eval")}, offline=True)
    subsets = report.manifest["subsets"]
    removed = {name: (s["stats"]["removed_exact"], s["stats"]["removed_normalised"], s["stats"]["removed_simhash"])
               for name, s in subsets.items() if s["stats"]["rows_read"] != s["rows"]}
    assert removed == {"squad_pairs": (1, 1, 1), "miracl": (1, 1, 0)}
    assert subsets["squad_pairs"]["stats"]["eval_queries"] == 5
    squad = [r["query"] for r in rows_of(tmp_path / "out" / "squad_pairs.jsonl")]
    assert squad == [f"squad_pairs question {i}" for i in range(4)]
    # The near misses stay: SimHash distance 3 > 2, and a query that only shares words.
    assert subsets["nq"]["rows"] == 6
    assert len(subsets) == 25 and report.manifest["totals"]["rows"] == 102
    assert report.manifest["totals"]["languages"] == {"en": 86, "zh": 8}
    data = load_training_data([tmp_path / "out"])
    assert len(data) == 25 and sum(data.sizes) == 102
    assert data.sources[data.index("miracl")].language[:2] == ["ar", "bn"]
    nli = data.sources[data.index("AllNLI")]
    assert nli.symmetric and nli.prompts == ["Given a premise, retrieve a hypothesis that is entailed by the premise",
                                             "Retrieve semantically similar text."]
    assert not data.sources[data.index("xsum")].symmetric
    assert set(tdro.PROMPTS) == set(tdro.SETS) and len(tdro.SETS) == 25


@pytest.mark.parametrize(("options", "squad_removed", "nq_removed"), [
    ({"dedup": "exact"}, 1, 0),
    ({"dedup": "normalised"}, 2, 0),
    ({"dedup": "simhash", "simhash_distance": 3}, 3, 1),
    ({"dedup": "none"}, 0, 0),
])
def test_tdro_dedup_levels(tmp_path: Path, sources, options: dict, squad_removed: int, nq_removed: int) -> None:
    src = sources("tdro")
    report = build(get_recipe("tdro"), tmp_path / "out", src,
                   {"sets": "squad_pairs,nq", "eval_queries": str(src / "eval"), **options}, offline=True)
    rows = {name: s["rows"] for name, s in report.manifest["subsets"].items()}
    assert rows == {"squad_pairs": 7 - squad_removed, "nq": 6 - nq_removed}


def test_normalised_text_keeps_combining_marks() -> None:
    assert normalise("What is the CAPITAL of France?") == normalise("what is the capital of france") \
        == "what is the capital of france"
    assert normalise("a_b  c-d") == "ab c d"
    # Bengali "ki" and "ka" differ only in a vowel sign (a combining mark): different words.
    assert normalise("কি হয়?") != normalise("কা হয়?")
    assert normalise("ＡＢＣ") == "abc"                       # NFKC: full-width letters


# ----------------------------------------------------------------------------- mining

MINING = {"languages": "te,sw", "corpus_shards": 1}


def test_mining_split_is_seeded_disjoint_and_ten_percent(tmp_path: Path, sources) -> None:
    src = sources("mining")
    report = build(get_recipe("mining"), tmp_path / "a", src, MINING, offline=True)
    build(get_recipe("mining"), tmp_path / "b", src, MINING, offline=True)

    def split(out: Path) -> tuple[set[str], set[str]]:
        train = {r["query_id"] for f in (out / "train").glob("*.jsonl") for r in rows_of(f)}
        val = {r["query_id"] for f in (out / "validation").glob("*.jsonl") for r in rows_of(f)}
        return train, val

    train, val = split(tmp_path / "a")
    assert split(tmp_path / "b") == (train, val)
    assert not train & val and len(train | val) == 20
    assert len(val) == 2                                     # round(0.1 * 20 pooled queries)
    assert report.manifest["totals"]["languages"] == {"sw": 8, "te": 12}
    others = [split_of for seed in (1, 2, 3)
              for split_of in [split(build(get_recipe("mining"), tmp_path / f"s{seed}", src,
                                           {**MINING, "seed": seed}, offline=True).out)[1]]]
    assert any(v != val for v in others)                     # the seed matters
    row = rows_of(tmp_path / "a" / "train" / "te.jsonl")[0]
    i = row["query_id"].split("-")[1]
    assert row["pos"] == [f"te title {i} te relevant {i}"] and row["neg"] == [f"te judged non-relevant {i}"]
    data = load_training_data([tmp_path / "a" / "train"])
    assert data.names == ["te", "sw"] and data.sources[0].language == "te"
    assert sum(data.sizes) + len(val) == 20


def test_mining_missing_judged_passage_names_the_qrels_line(tmp_path: Path, sources) -> None:
    src = sources("mining")
    qrels = src / "miracl-v1.0-sw" / "qrels" / "qrels.miracl-v1.0-sw-train.tsv"
    qrels.write_text(qrels.read_text() + "sw-0\tQ0\tnowhere#0\t1\n")
    with pytest.raises(InputError, match=r"qrels\.miracl-v1\.0-sw-train\.tsv:17: 1 judged passage\(s\) missing"):
        build(get_recipe("mining"), tmp_path / "out", src, MINING, offline=True)


# ----------------------------------------------------------------------------- splade

def test_splade_table3_probabilities() -> None:
    assert len(splade.TABLE3) == 26
    assert math.isclose(sum(r for _s, _f, r in splade.TABLE3.values()), 100.03)
    probs = splade.probabilities()
    assert math.isclose(sum(probs.values()), 1.0)
    assert math.isclose(probs["gooaq_pairs"], 20.53 / 100.03) and math.isclose(probs["TriviaQA_pairs"], 0.50 / 100.03)


def test_splade_sample_matches_table3_within_four_standard_deviations(tmp_path: Path, sources) -> None:
    n = 20_000
    report = build(get_recipe("splade"), tmp_path / "out", sources("splade"), {"rows": n, "seed": 7}, offline=True)
    subsets = report.manifest["subsets"]
    assert sum(s["rows"] for s in subsets.values()) == n
    for name, p in splade.probabilities().items():
        share = subsets[name]["rows"] / n
        assert abs(share - p) <= 4 * math.sqrt(p * (1 - p) / n), (name, share, p)
    data = load_training_data([tmp_path / "out"])
    assert sum(data.sizes) == n and data.sources[0].meta["sampling_probability"] == splade.probabilities()[
        "gooaq_pairs"]


def test_splade_counts_follow_the_seed() -> None:
    recipe = get_recipe("splade")
    a = recipe.counts(recipe.parse_options({"rows": 1000, "seed": 1}))
    assert a == recipe.counts(recipe.parse_options({"rows": 1000, "seed": "1"}))
    assert a != recipe.counts(recipe.parse_options({"rows": 1000, "seed": 2}))


# ----------------------------------------------------------------------------- command line

def test_cli_list_dry_run_and_build(tmp_path: Path, sources, capsys) -> None:
    assert main(["data", "build", "--list"]) == 0
    listing = capsys.readouterr().out
    for name in ("tdro", "coco-dr", "mining", "splade"):
        assert f"\n{name}  (paper" in "\n" + listing
    assert "--option validation_fraction=0.1" in listing and "paper 004 section 4" in listing
    src = sources("mining")
    assert main(["data", "build", "mining", "--sources", str(src), "--option", "languages=te,sw",
                 "--option", "corpus_shards=2", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "miracl-corpus-v1.0-te/docs-0.jsonl.gz  present" in plan
    assert "miracl-corpus-v1.0-te/docs-1.jsonl.gz  fetch from hub dataset miracl/miracl-corpus" in plan
    assert "train/te.jsonl, train/sw.jsonl, validation/te.jsonl, validation/sw.jsonl" in plan
    assert main(["data", "build", "splade", "--sources", str(tmp_path / "none"), "--option", "rows=1000",
                 "--dry-run"]) == 0
    plan = capsys.readouterr().out
    counts = get_recipe("splade").counts({"rows": 1000, "seed": 42})
    assert "expected:\n  gooaq_pairs " in plan and f" {counts['gooaq_pairs']}\n" in plan
    assert "  AllNLI.jsonl.gz  fetch from hub dataset sentence-transformers/embedding-training-data : AllNLI" in plan
    out = tmp_path / "out"
    assert main(["data", "build", "mining", "--sources", str(src), "--out", str(out), "--offline",
                 "--option", "languages=te,sw", "--option", "corpus_shards=1"]) == 0
    assert "20 rows" in capsys.readouterr().out
    manifest = json.loads((out / "build.json").read_text())
    assert manifest["recipe"] == "mining" and manifest["options"]["validation_fraction"] == 0.1
    assert manifest["option_sources"]["validation_fraction"].startswith("paper 004")
    assert {s["file"] for s in manifest["sources"]} >= {"miracl-corpus-v1.0-sw/docs-0.jsonl.gz"}
    assert all(len(s["sha256"]) == 64 for s in manifest["sources"])
    assert main(["data", "build", "mining", "--out", str(out), "--option", "nope=1"]) == 2
    assert "unknown option(s) nope" in capsys.readouterr().err


@pytest.mark.slow              # about 20 s: SimHash of 16k queries in Python
@pytest.mark.needs_shared
def test_tdro_dedup_on_real_miracl_train_against_the_dev_topics(tmp_path: Path, shared_data: Path) -> None:
    """Real rows: the 2,799 MIRACL train rows of train-multidomain placed as tDRO's hand-placed miracl set,
    deduplicated against MIRACL v1.0's dev topics (18 languages, 13,495 queries) as tDRO's script does.
    The train and dev query ids are disjoint, yet 39 train queries repeat a dev query: 4 verbatim, 22 up to
    case/spacing/punctuation, 13 at SimHash distance <= 2 (e.g. 'রাయলসీমা లో' written apart or together)."""
    src = tmp_path / "sources"
    src.mkdir()
    shutil.copyfile(shared_data / "train-multidomain" / "miracl.jsonl", src / "miracl.jsonl")
    report = build(get_recipe("tdro"), tmp_path / "out", src,
                   {"sets": "miracl", "eval_queries": str(shared_data / "miracl" / "topics")}, offline=True)
    stats = report.manifest["subsets"]["miracl"]["stats"]
    assert stats["eval_queries"] == 13495 and stats["rows_read"] == 2799
    assert (stats["removed_exact"], stats["removed_normalised"], stats["removed_simhash"]) == (4, 22, 13)
    assert report.manifest["subsets"]["miracl"]["rows"] == 2760
