"""``harness compare`` on real SciFact runs, checked against pytrec_eval, scipy and statsmodels."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from optional_extras import require_extra
from scipy import sparse, stats

from harness.cli import main
from harness.data import Run, load_beir, read_qrels, read_run, write_run
from harness.metrics import evaluate
from harness.protocol import ProtocolCard
from harness.store import write_result

pytrec_eval = require_extra("pytrec_eval")
multipletests = require_extra("statsmodels.stats.multitest").multipletests

TOP_K = 100


def _term_matrix(texts: list[str], vocab: dict[str, int]) -> sparse.csr_matrix:
    rows, cols = [], []
    for i, text in enumerate(texts):
        for token in re.findall(r"[a-z0-9]+", text.lower()):
            rows.append(i)
            cols.append(vocab.setdefault(token, len(vocab)))
    data = np.ones(len(rows))
    return sparse.csr_matrix((data, (rows, cols)), shape=(len(texts), 1 << 20))


def _top_run(scores: np.ndarray, qids, dids, name: str) -> Run:
    top = np.argpartition(-scores, TOP_K, axis=1)[:, :TOP_K]
    q = np.repeat(np.asarray(qids), TOP_K)
    return Run.from_arrays(q, np.asarray(dids)[top.ravel()], np.take_along_axis(scores, top, 1).ravel(), name=name)


def lexical_runs(folder, split, out_dir) -> dict:
    """Two real lexical runs on a BEIR-layout set: shared-term count and TF-IDF cosine."""
    ds = load_beir(folder, split)
    vocab: dict[str, int] = {}
    docs = _term_matrix(ds.corpus.passages(), vocab)
    queries = _term_matrix(list(ds.queries.texts), vocab)
    n_docs = docs.shape[0]
    df = np.asarray((docs > 0).sum(axis=0)).ravel()
    idf = sparse.diags(np.log((n_docs + 1) / (df + 1)))

    def unit(m):
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        return sparse.diags(1 / np.maximum(norms, 1e-12)) @ m

    overlap = ((queries > 0).astype(float) @ (docs > 0).astype(float).T).toarray()
    tfidf = (unit(queries @ idf) @ unit(docs @ idf).T).toarray()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"qrels": folder / "qrels" / f"{split}.tsv"}
    for name, scores in (("overlap", overlap), ("tfidf", tfidf)):
        paths[name] = out_dir / f"{name}.trec"
        write_run(_top_run(scores, ds.queries.ids, ds.corpus.ids, name), paths[name])
    return paths


@pytest.fixture(scope="module")
def scifact_runs(shared_data, tmp_path_factory):
    return lexical_runs(shared_data / "scifact", "test", tmp_path_factory.mktemp("runs"))


def _pytrec_per_query(qrels_path, run_path, measure):
    qrels = {}
    judged = read_qrels(qrels_path)
    for q, d, r in zip(judged.query_ids.tolist(), judged.doc_ids.tolist(), judged.relevance.tolist()):
        qrels.setdefault(q, {})[d] = int(r)
    run = {}
    for line in run_path.read_text().splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    out = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run)
    key = measure.replace(".", "_")
    return {q: v[key] for q, v in out.items()}


def _compare_json(capsys, *args) -> dict:
    assert main(["compare", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_matches_pytrec_eval_scipy_and_statsmodels(scifact_runs, capsys):
    out = _compare_json(capsys, "--qrels", scifact_runs["qrels"], "--run", scifact_runs["overlap"],
                        "--run", scifact_runs["tfidf"], "-m", "ndcg@10", "-m", "mrr")
    assert out["baseline"] == "overlap" and out["test"] == "ttest" and out["correction"] == "holm"
    by_metric = {c["metric"]: c for c in out["comparisons"]}
    raw = []
    for metric, measure in (("ndcg@10", "ndcg_cut.10"), ("mrr", "recip_rank")):
        base = _pytrec_per_query(scifact_runs["qrels"], scifact_runs["overlap"], measure)
        system = _pytrec_per_query(scifact_runs["qrels"], scifact_runs["tfidf"], measure)
        qids = sorted(base)
        assert sorted(system) == qids and len(qids) == 300
        b = np.array([base[q] for q in qids])
        s = np.array([system[q] for q in qids])
        c = by_metric[metric]
        assert c["n"] == 300
        assert c["mean_base"] == pytest.approx(b.mean(), abs=1e-9)
        assert c["mean"] == pytest.approx(s.mean(), abs=1e-9)
        assert c["delta"] == pytest.approx(s.mean() - b.mean(), abs=1e-9)
        assert c["p_value"] == pytest.approx(stats.ttest_rel(s, b).pvalue, rel=1e-6, abs=1e-12)
        d = s - b
        assert c["effect_size"] == pytest.approx(d.mean() / d.std(ddof=1), abs=1e-9)
        assert (c["wins"], c["ties"], c["losses"]) == (int((d > 0).sum()), int((d == 0).sum()), int((d < 0).sum()))
        assert c["ci_low"] < c["delta"] < c["ci_high"]
        raw.append(c["p_value"])
    adjusted = multipletests(raw, method="holm")[1]
    assert [by_metric[m]["p_adjusted"] for m in ("ndcg@10", "mrr")] == pytest.approx(adjusted, abs=1e-15)
    # TF-IDF beats raw term overlap on SciFact by a wide margin.
    assert by_metric["ndcg@10"]["delta"] > 0.05 and by_metric["ndcg@10"]["p_adjusted"] < 1e-3


def test_randomization_output_is_identical_across_calls(scifact_runs, capsys):
    args = ("--qrels", scifact_runs["qrels"], "--run", scifact_runs["overlap"], "--run", scifact_runs["tfidf"],
            "-m", "ndcg@10", "--test", "randomization", "--seed", "7", "--resamples", "2000")
    first = _compare_json(capsys, *args)
    assert _compare_json(capsys, *args) == first
    c = first["comparisons"][0]
    assert c["test_method"] == "randomization (Monte Carlo, B=2000)" and c["p_value"] == 1 / 2001


def test_missing_queries_error_then_zero(scifact_runs, tmp_path, capsys):
    lines = scifact_runs["tfidf"].read_text().splitlines()
    qids = sorted({line.split()[0] for line in lines})
    dropped = set(qids[:4])
    partial = tmp_path / "partial.trec"
    partial.write_text("\n".join(x for x in lines if x.split()[0] not in dropped) + "\n")
    args = ["compare", "--qrels", str(scifact_runs["qrels"]), "--run", str(scifact_runs["overlap"]),
            "--run", str(partial), "-m", "ndcg@10"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "4 queries scored for overlap but not for partial" in err
    assert repr(sorted(dropped)[0]) in err and "missing='zero'" in err
    assert main(args + ["--missing", "zero"]) == 0
    c = json.loads(capsys.readouterr().out)["comparisons"][0]
    assert c["n"] == 300 and c["missing_in_system"] == 4 and c["missing_in_base"] == 0


def test_tables_state_test_correction_and_alpha(scifact_runs, capsys):
    base = ["compare", "--qrels", str(scifact_runs["qrels"]), "--run", str(scifact_runs["overlap"]),
            "--run", str(scifact_runs["tfidf"]), "-m", "ndcg@10", "-m", "recall@100", "--correction", "bonferroni"]
    assert main(base + ["--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| System | nDCG@10 | R@100 |" in md and "| overlap |" in md and "<sup>†</sup> (+" in md
    assert "Bonferroni-adjusted p over 2 comparisons &lt; 0.05, two-sided paired t-test" in md
    assert main(base + ["--format", "latex", "--alpha", "0.01"]) == 0
    tex = capsys.readouterr().out
    assert r"\begin{tabular}" in tex and r"\textsuperscript{\textdagger{}}" in tex and "0.01" in tex


def _store(directory, qrels_path, run_path, card):
    qrels, run = read_qrels(qrels_path), read_run(run_path)
    evaluation = evaluate(qrels, run, ["ndcg@10", "recall@100"])
    return write_result(directory, run=run, evaluation=evaluation, card=card, manifest={"name": run_path.stem})


def test_stored_results_compare_and_refuse_other_protocols(scifact_runs, tmp_path, capsys):
    card = ProtocolCard(dataset="scifact", metrics=("ndcg@10", "recall@100"))
    a = _store(tmp_path / "a", scifact_runs["qrels"], scifact_runs["overlap"], card)
    b = _store(tmp_path / "b", scifact_runs["qrels"], scifact_runs["tfidf"], card)
    out = _compare_json(capsys, "--result", a, "--result", b, "-m", "nDCG@10")
    assert out["systems"] == ["overlap", "tfidf"] and [c["metric"] for c in out["comparisons"]] == ["ndcg@10"]
    both = _compare_json(capsys, "--result", a, "--result", b)
    assert [c["metric"] for c in both["comparisons"]] == ["ndcg@10", "recall@100"]
    from_runs = _compare_json(capsys, "--qrels", scifact_runs["qrels"], "--run", scifact_runs["overlap"],
                              "--run", scifact_runs["tfidf"], "-m", "ndcg@10", "-m", "recall@100")
    for stored, fresh in zip(both["comparisons"], from_runs["comparisons"]):
        assert stored["p_value"] == pytest.approx(fresh["p_value"], rel=1e-12)
        assert (stored["mean_base"], stored["mean"]) == pytest.approx((fresh["mean_base"], fresh["mean"]), rel=1e-12)
        # The bootstrap stream is keyed by dataset too ("scifact" from the card vs unnamed for runs).
        assert stored["dataset"] == "scifact" and fresh["dataset"] is None
        assert stored["ci_low"] != fresh["ci_low"]
        assert stored["ci_low"] == pytest.approx(fresh["ci_low"], abs=0.01)
    elsewhere = _store(tmp_path / "d", scifact_runs["qrels"], scifact_runs["tfidf"], card.with_(dataset="nfcorpus"))
    assert main(["compare", "--result", str(a), "--result", str(elsewhere)]) == 2
    assert "each dataset has a single result (scifact, nfcorpus)" in capsys.readouterr().err
    other = _store(tmp_path / "c", scifact_runs["qrels"], scifact_runs["tfidf"], card.with_(exclude_self=True))
    assert main(["compare", "--result", str(a), "--result", str(other)]) == 2
    err = capsys.readouterr().err
    assert "protocol cards differ in exclude_self: False vs True" in err


def test_usage_errors(scifact_runs, capsys):
    assert main(["compare", "--run", str(scifact_runs["overlap"]), "--run", str(scifact_runs["tfidf"]),
                 "-m", "ndcg@10"]) == 2
    assert "--run needs --qrels" in capsys.readouterr().err
    assert main(["compare", "--qrels", str(scifact_runs["qrels"]), "--run", str(scifact_runs["overlap"]),
                 "--run", str(scifact_runs["overlap"]), "-m", "ndcg@10"]) == 2
    assert "give each a --name" in capsys.readouterr().err


def test_aggregates_over_datasets_from_stored_results(shared_data, scifact_runs, tmp_path, capsys):
    sets = {"scifact": scifact_runs}
    for lang in ("sw", "id"):
        sets[f"miracl-{lang}"] = lexical_runs(shared_data / "miracl-dev-subset" / lang, "dev", tmp_path / lang)
    dirs, per_query = [], {}
    for system in ("overlap", "tfidf"):
        for name, paths in sets.items():
            card = ProtocolCard(dataset=name, metrics=("ndcg@10", "recall@100"))
            stored = _store(tmp_path / "results" / name / system, paths["qrels"], paths[system], card)
            dirs += ["--result", str(stored), "--name", system]
            per_query[(name, system)] = np.asarray(
                _pytrec_per_query_sorted(paths["qrels"], paths[system], "ndcg_cut.10"))
    out = _compare_json(capsys, *dirs, "-m", "ndcg@10", "--aggregate", "MIRACL=miracl-sw,miracl-id",
                        "--aggregate", "all", "--correction", "bh")
    assert out["datasets"] == ["scifact", "miracl-sw", "miracl-id"] and out["aggregate_method"] == "pooled"
    by_dataset = {c["dataset"]: c for c in out["comparisons"]}
    assert len(by_dataset) == 5 and {c["family_size"] for c in out["comparisons"]} == {5}
    miracl = by_dataset["MIRACL"]
    langs = ("miracl-sw", "miracl-id")
    assert miracl["mean_base"] == pytest.approx(np.mean([per_query[(d, "overlap")].mean() for d in langs]), abs=1e-9)
    assert miracl["mean"] == pytest.approx(np.mean([per_query[(d, "tfidf")].mean() for d in langs]), abs=1e-9)
    pooled_base = np.concatenate([per_query[(d, "overlap")] for d in langs])
    pooled_sys = np.concatenate([per_query[(d, "tfidf")] for d in langs])
    assert miracl["n"] == len(pooled_base) == 43 + 29 - miracl["missing_in_base"] - miracl["missing_in_system"]
    assert miracl["p_value"] == pytest.approx(stats.ttest_rel(pooled_sys, pooled_base).pvalue, rel=1e-6)
    assert miracl["ci_low"] <= miracl["delta"] <= miracl["ci_high"]
    everything = by_dataset["Avg"]
    assert everything["datasets"] == ["scifact", "miracl-sw", "miracl-id"]
    assert everything["delta"] == pytest.approx(np.mean([by_dataset[d]["delta"] for d in everything["datasets"]]))
    macro = _compare_json(capsys, *dirs, "-m", "ndcg@10", "--aggregate", "all", "--aggregate-method", "macro")
    agg = next(c for c in macro["comparisons"] if c["dataset"] == "Avg")
    deltas = [by_dataset[d]["delta"] for d in everything["datasets"]]
    assert agg["n"] == 3 and agg["p_value"] == pytest.approx(stats.ttest_1samp(deltas, 0).pvalue, rel=1e-9)
    assert main(["compare", *dirs, "-m", "ndcg@10", "--aggregate", "all", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "Avg nDCG@10" in md and "Aggregates: macro average over datasets" in md


def _pytrec_per_query_sorted(qrels_path, run_path, measure) -> list[float]:
    values = _pytrec_per_query(qrels_path, run_path, measure)
    return [values[q] for q in sorted(values)]
