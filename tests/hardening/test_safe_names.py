"""Every name that becomes a path is one safe component (harness.io.paths.check_component).

Found by an attacker: a suite file with ``name: ../../victim`` overwrote ``table.md`` and
``summary.json`` of a folder outside the results root (exit 0), and a variant or benchmark id
``../../../../../../escv`` wrote result folders at the file-system root.  Here:

* a property-based test (hypothesis) over hostile names (``..``, separators, absolute paths,
  NUL and control characters, Unicode dot and slash look-alikes, any non-ASCII, over-long,
  hidden or option-like names, random text): every accepted name is one component that stays
  inside a root after ``resolve()``, every hostile one is refused;
* suite files with a hostile suite name, variant id, benchmark id or generated cell id are
  refused by ``harness run`` with the file and the line of the value, nothing written;
* a sandbox: a tiny suite runs with its results root and cache in ``tmp_path``, then the same
  attacks are made by a programmatic caller; the whole tree around ``tmp_path`` is unchanged
  outside the results root and the cache.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import stat
import string
import unicodedata
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.errors import ConfigError
from harness.io.paths import MAX_COMPONENT_CHARS, check_component, child_of

REPO = Path(__file__).resolve().parents[2]
MINI = REPO / "tests" / "ablation" / "fixtures" / "mini.yaml"

# ------------------------------------------------------------------------------------------- the property
SAFE_FIRST = string.ascii_letters + string.digits + "_@=+"
SAFE_REST = SAFE_FIRST + ".-"
DOT_LOOKALIKES = "\u2024\u2025\u2026\uff0e\ufe52\u3002\uff61\u00b7\u2027\u0701\u0702\u2e33\u2e31\u06d4\u1362"
SLASH_LOOKALIKES = "\u2215\u2044\uff0f\u29f8\u2571\u29f5\uff3c\ufe68\u2216"
FIXED_HOSTILE = ["..", ".", "", "/", "\\", "/etc", "/etc/passwd", "../x", "a/../../b", "..\\..\\x", "C:\\x",
                 "C:", "\x00", "a\x00b", "\n", "a\tb", "\x7f", "\u2024", "\u2024\u2024", "\uff0e\uff0e",
                 "a\u2215b", "\u202e", "\u200b", "\ufeff", "-rf", "--help", ".hidden", ".git", "~", "~/x", "a b",
                 "a" * (MAX_COMPONENT_CHARS + 1), "a" * 256, "é" * 200, "\U0001f600"]
# 2,000 generated examples in all (plus the explicit ones), a few seconds; derandomized, so every run
# checks the same names (no example database is written).
HOSTILE_EXAMPLES, SAFE_EXAMPLES, RANDOM_EXAMPLES = 1000, 300, 700
EXAMPLES = {"hostile": 0, "safe": 0, "random": 0}


def safe_names():
    return st.builds(lambda first, rest: first + rest, st.sampled_from(SAFE_FIRST),
                     st.text(SAFE_REST, max_size=MAX_COMPONENT_CHARS - 1))


def hostile_names():
    """Names that must be refused, by category (each a strategy), plus the fixed list above."""
    short = st.text(SAFE_REST, max_size=20)
    bad_char = st.one_of(
        st.sampled_from("/\\"),                                     # separators
        st.characters(max_codepoint=31), st.just("\x7f"),           # NUL and control characters
        st.sampled_from(DOT_LOOKALIKES + SLASH_LOOKALIKES),         # look-alikes of '.' and '/'
        st.characters(min_codepoint=128),                           # anything non-ASCII
        st.sampled_from(" :*?\"<>|#%&'()!,;[]{}~^$`"),              # other ASCII that is not a name character
    )
    return st.one_of(
        st.sampled_from(FIXED_HOSTILE),
        st.builds(lambda a, c, b: a + c + b, short, bad_char, short),
        st.builds(lambda c, rest: c + rest, st.sampled_from(".-"), short),          # hidden / option-like
        st.builds(lambda s: "/" + s, short),                                          # absolute
        st.builds(lambda s: "\\" + s, short),
        st.lists(st.sampled_from(["..", ".", "a", "", "etc"]), min_size=2, max_size=8).map("/".join),
        st.lists(st.sampled_from(["..", ".", "a"]), min_size=2, max_size=8).map("\\".join),
        st.builds(lambda piece, n: (("a" + piece) * n)[:n], short, st.integers(MAX_COMPONENT_CHARS + 1, 400)),  # long
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("root") / "results"
    root.mkdir()
    return root


def _one_component_inside(root: Path, name: str) -> None:
    """What an accepted name guarantees: one component on every platform's path syntax, unchanged by
    normalisation, a child of ``root`` after resolve, within file-system name limits."""
    assert PurePosixPath(name).parts == (name,) and PureWindowsPath(name).parts == (name,)
    assert os.path.normpath(name) == name and unicodedata.normalize("NFKC", name) == name
    assert name not in (".", "..") and name[0] not in ".-" and name.isascii() and name.isprintable()
    assert 0 < len(name.encode("utf-8")) <= 255 and len(name) <= MAX_COMPONENT_CHARS
    assert (root / name).resolve().parent == root.resolve()
    assert child_of(root, name) == root / name
    assert child_of(root, name, name).resolve().parent.parent == root.resolve()


_FAST = dict(deadline=None, database=None, derandomize=True,
             suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@settings(max_examples=HOSTILE_EXAMPLES, **_FAST)
@given(name=hostile_names())
@example(name="../../victim")
@example(name="../../../../../../escv")
@example(name="\u2024\u2024")             # ONE DOT LEADER x2: looks like '..'
@example(name="\uff0e\uff0e")             # FULLWIDTH FULL STOP x2
def test_hostile_names_are_refused(root, name):
    EXAMPLES["hostile"] += 1
    with pytest.raises(ConfigError, match="cannot be used as a folder name"):
        check_component(name, "name")
    with pytest.raises(ConfigError):
        child_of(root, "ok", name)


@settings(max_examples=SAFE_EXAMPLES, **_FAST)
@given(name=safe_names())
@example(name="uniform@seed=3@step=20")
@example(name="k-means@k=4")
@example(name="a" * MAX_COMPONENT_CHARS)
def test_safe_names_are_accepted_and_stay_inside(root, name):
    EXAMPLES["safe"] += 1
    assert check_component(name, "name") == name
    _one_component_inside(root, name)


@settings(max_examples=RANDOM_EXAMPLES, **_FAST)
@given(name=st.one_of(st.text(), st.text(string.printable), st.binary(max_size=20), st.none(), st.integers()))
def test_random_text_is_refused_or_stays_inside(root, name):
    EXAMPLES["random"] += 1
    try:
        check_component(name, "name")
    except ConfigError:
        return
    assert isinstance(name, str)
    _one_component_inside(root, name)


def test_hypothesis_ran_its_examples(root):
    """The number of examples the three property tests ran (printed; ``pytest -s`` shows it).  Selected
    alone (``-k``), it runs the property tests itself rather than counting nothing."""
    for kind, prop in (("hostile", test_hostile_names_are_refused),
                       ("safe", test_safe_names_are_accepted_and_stay_inside),
                       ("random", test_random_text_is_refused_or_stays_inside)):
        if not EXAMPLES[kind]:
            prop(root)
    print(f"\nhypothesis examples: {EXAMPLES} (total {sum(EXAMPLES.values())})")
    assert EXAMPLES["hostile"] >= HOSTILE_EXAMPLES and EXAMPLES["safe"] >= SAFE_EXAMPLES
    assert EXAMPLES["random"] >= RANDOM_EXAMPLES


def test_shipped_suites_and_expectations_keep_their_names():
    """Every shipped suite (all scales: declared and generated cell ids) and every expected score loads."""
    from harness.ablation import list_suite_files, load_suite
    from harness.ablation.problems import Problems
    from harness.ablation.validate import _cell_ids, _names
    from harness.regression import load_all

    for name, path in list_suite_files().items():
        suite = load_suite(path)
        for scale in suite.scales:
            problems = Problems(path)
            _names(suite, scale, problems)
            for i in range(len(suite.variants)):
                _cell_ids(suite, scale, i, problems)
            assert not problems, f"{name} ({scale}): {[str(p) for p in problems.items]}"
    assert load_all()


# --------------------------------------------------------------------------------- hostile suite files
def _suite(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load(MINI.read_text())
    edit(raw)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _refused(tmp_path: Path, suite: Path, capsys) -> str:
    """``harness run SUITE`` exits 2 with one clean error and writes nothing anywhere in ``tmp_path``."""
    # Deep enough that even a name that escaped would land inside tmp_path, never above it.
    root = tmp_path / "a" / "b" / "c" / "d" / "e" / "f" / "results"
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert main(["run", str(suite), "--results-root", str(root), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("harness run: error: ")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    return err


def _at(path: Path, needle: str, key: str) -> str:
    """``line:column`` of ``key`` on the line holding ``needle`` (where an error about its value points)."""
    line = _line_of(path, needle)
    text = path.read_text().splitlines()[line - 1]
    return f"{line}:{text.index(key + ':') + 1}"


def test_suite_name_with_dot_dot_is_refused_at_its_line(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r.update(name="../../victim"))
    err = _refused(tmp_path, suite, capsys)
    assert f"{suite}:{_at(suite, '../../victim', 'name')}: name: suite name '../../victim' cannot be used as a " \
           "folder name" in err


def test_hostile_variant_id_is_refused_at_its_line(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r["variants"][1].update(id="../../../../../../escv"))
    err = _refused(tmp_path, suite, capsys)
    assert f"{suite}:{_at(suite, 'escv', 'id')}: variants[1].id: variant id '../../../../../../escv' cannot be " \
           "used as a folder name: it contains a path separator" in err


def test_hostile_benchmark_id_is_refused_at_its_line(tmp_path, capsys):
    suite = _suite(tmp_path, lambda r: r["scales"]["tiny"]["benchmarks"][1].update(id="../../../../../../escb"))
    err = _refused(tmp_path, suite, capsys)
    assert f"{suite}:{_at(suite, 'escb', 'id')}: scales.tiny.benchmarks[1].id: benchmark id " \
           "'../../../../../../escb' cannot be used as a folder name" in err


def test_every_hostile_name_is_reported_with_the_other_problems(tmp_path, capsys):
    long_id = "v" * (MAX_COMPONENT_CHARS - 2)

    def edit(raw):
        raw["scales"]["..."] = copy.deepcopy(raw["scales"]["tiny"])
        raw["name"] = "/tmp/victim"
        raw["variants"][1]["id"] = "hn\u2024only"                         # ONE DOT LEADER
        raw["variants"].append({"id": long_id, "method": "uniform", "seeds": [1, 2]})   # + '@seed=1': too long
        raw["scales"]["tiny"]["benchmarks"][0]["id"] = "-rf"
        raw["table"] = {"layouts": {".hidden": {"kind": "results",
                                                "columns": [{"benchmark": "latin_qa", "metric": "ndcg@10"}]}}}
        raw["stats"]["test"] = "wilcoxon"                                 # an ordinary problem, reported with them

    suite = _suite(tmp_path, edit)
    err = _refused(tmp_path, suite, capsys)
    assert "7 problems in the suite (nothing was run)" in err, err
    lines = err.splitlines()
    for needle, where in [("suite name '/tmp/victim'", "name"),
                          ("variant id 'hn\u2024only'", "variants[1].id"),
                          ("U+2024 ONE DOT LEADER", "variants[1].id"),
                          (f"cell id of variant '{long_id}'", "variants[2].seeds"),
                          ("benchmark id '-rf'", "scales.tiny.benchmarks[0].id"),
                          ("scale name '...'", "scales...."),
                          ("layout name '.hidden'", "table.layouts..hidden"),
                          ("test 'wilcoxon' is not supported", "stats.test")]:
        line = next((x for x in lines if needle in x), None)
        assert line is not None and f": {where}: " in line and line.startswith("  - line "), (needle, err)


def test_hostile_expected_score_result_path_is_refused(tmp_path):
    from harness.errors import InputError
    from harness.regression import load_expectations

    entry = {"id": "ok", "command": ["eval", "--out", "{out}"], "metrics": {"ndcg@10": 0.5},
             "recorded": {"by": "a", "at": "b", "commit": "c"}, "result": "x/\u2025/y"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "suite": "s", "entries": [entry]}))
    with pytest.raises(InputError, match="U\\+2025 TWO DOT LEADER") as info:
        load_expectations(path)
    assert info.value.line == _line_of(path, "- command")
    path.write_text(yaml.safe_dump({"version": 1, "entries": [], "suite": "../s"}))
    with pytest.raises(InputError) as info:
        load_expectations(path)
    assert info.value.line == _line_of(path, "suite:")


def test_default_eval_folder_is_always_inside_the_results_root(tmp_path):
    """``harness eval`` without --out names its folder after the suite, dataset and model."""
    from types import SimpleNamespace

    from harness.pipeline import default_out_dir

    root = tmp_path / "results"
    hostile = [("beir", "..", ".."), ("../..", ".hidden", "-rf"), ("beir", "scifact", "\u2024\u2024"),
               ("beir", "a/../../b", "/etc/passwd"), ("x" * 300, "\uff0e\uff0e", "minilm")]
    for suite, dataset, model in hostile:
        out = default_out_dir(root, SimpleNamespace(card=SimpleNamespace(suite=suite), name=dataset),
                              SimpleNamespace(name=model))
        assert out.resolve().parent.parent.parent == root.resolve(), out
        for part in out.relative_to(root).parts:
            check_component(part, "folder")
    out = default_out_dir(root, SimpleNamespace(card=SimpleNamespace(suite="beir"), name="scifact"),
                          SimpleNamespace(name="minilm"))
    assert out == root / "beir" / "scifact" / "minilm"       # ordinary names unchanged


# ------------------------------------------------------------------------------------------------ sandbox
def _tree(top: Path, skip: tuple[Path, ...]) -> dict[str, tuple[int, int, int]]:
    """``{relative path: (file type, size, mtime_ns)}`` of everything under ``top`` (links not followed),
    the folders in ``skip`` and their contents left out."""
    out: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        for name in dirnames + filenames:
            info = (here / name).lstat()
            kept = here / name not in skip      # the skipped folders themselves: present, contents free to change
            out[(here / name).relative_to(top).as_posix()] = (stat.S_IFMT(info.st_mode), info.st_size,
                                                              info.st_mtime_ns) if kept else (0, 0, 0)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
    return out


def _tiny_suite(raw: dict) -> None:
    """The mini suite cut down to a few seconds of work: an untrained baseline and one 4-step run."""
    raw["variants"] = [{"id": "untrained", "method": "none"}, {"id": "uniform", "method": "uniform"}]
    raw["baseline"] = "untrained"
    raw["scales"]["tiny"]["train"].update(steps=4, batch_size=8, warmup_steps=1, save_every=4)
    for bench in raw["scales"]["tiny"]["benchmarks"]:
        bench.update(max_queries=20, corpus_sample=50)


@pytest.mark.usefixtures("one_thread")
def test_a_suite_run_writes_only_inside_its_results_root_and_cache(tmp_path, monkeypatch):
    from harness.ablation import load_suite
    from harness.ablation.runner import run_suite

    results, cache = tmp_path / "results", tmp_path / "cache"
    results.mkdir()
    cache.mkdir()
    monkeypatch.setenv("HARNESS_CACHE", str(cache))    # synthetic worlds and models are built in it too
    suite = load_suite(_suite(tmp_path, _tiny_suite))
    outside = tmp_path.parent          # every test's folder of this session: the neighbourhood
    before = _tree(outside, (results, cache))
    assert f"{tmp_path.name}/results" in before and f"{tmp_path.name}/cache" in before

    outcome = run_suite(suite, "tiny", results, cache_dir=cache, progress=False)
    assert outcome.complete and (outcome.report_dir / "table.md").is_file()
    assert outcome.report_dir.resolve().is_relative_to(results.resolve())

    # The same suite from a programmatic caller, with the names an attacker chose (the cells are cached:
    # their keys do not depend on names).  Each '..' chain is counted to land in `outside`, beside tmp_path
    # (results/suites/<suite>, results/suites/mini/tiny/results/<variant>/<benchmark>); the plan's validation
    # refuses them, and without it (validate=False) the path builders of harness.ablation.paths do.
    tiny = suite.scale("tiny")
    attacks = {
        "suite name": dataclasses.replace(suite, name="../../../escaped-suite"),
        "variant id": dataclasses.replace(suite, variants=[
            suite.variants[0], dataclasses.replace(suite.variants[1], id="../../../../../../escaped-variant")]),
        "benchmark id": dataclasses.replace(suite, scales={"tiny": dataclasses.replace(tiny, benchmarks=[
            tiny.benchmarks[0], dataclasses.replace(tiny.benchmarks[1], id="../../../../../../../escaped-bench")])}),
    }
    for hostile in attacks.values():
        for validate in (True, False):
            with pytest.raises(ConfigError, match="cannot be used as a folder name"):
                run_suite(hostile, "tiny", results, cache_dir=cache, progress=False, validate=validate)

    after = _tree(outside, (results, cache))
    created = sorted(set(after) - set(before))
    changed = sorted(k for k in before if k in after and after[k] != before[k])
    removed = sorted(set(before) - set(after))
    assert (created, changed, removed) == ([], [], []), "the suite run touched files outside its results root"
    assert not list(outside.glob("escaped-*")) and not list(tmp_path.glob("escaped-*"))
