"""``harness evaluate``: JSON, per-query JSON, table output, protocol flags and bad input."""
from __future__ import annotations

import gzip
import json

import pytest

from harness.cli import main

QRELS_TREC = "q1 0 d1 1\nq1 0 d2 0\nq1 0 d3 2\nq2 0 d9 1\nq3 0 x 1\n"
QRELS_BEIR = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq1\td3\t2\nq2\td9\t1\nq3\tx\t1\n"
# q1: d2 and d3 tie; "d3" > "d2" so d3 ranks 2nd.  q2 retrieves itself first.  q3 is absent.
RUN = (
    "q1 Q0 d1 1 3.0 sys\nq1 Q0 d2 2 2.0 sys\nq1 Q0 d3 3 2.0 sys\n"
    "q2 Q0 q2 1 5.0 sys\nq2 Q0 d9 2 1.0 sys\n"
)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "qrels.txt").write_text(QRELS_TREC)
    (tmp_path / "qrels.tsv").write_text(QRELS_BEIR)
    (tmp_path / "run.trec").write_text(RUN)
    return tmp_path


def _evaluate(capsys, *args):
    code = main(["evaluate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_default_metrics(files, capsys):
    code, out, _ = _evaluate(capsys, "--qrels", str(files / "qrels.txt"), "--run", str(files / "run.trec"))
    assert code == 0
    values = json.loads(out)
    assert list(values) == ["ndcg@10", "recall@100", "mrr@10", "map", "p@10", "success@10"]
    # q1 mrr 1 (d1), q2 mrr 1/2 (q2 itself first); q3 has no results and is left out.
    assert values["mrr@10"] == pytest.approx(0.75)
    assert values["p@10"] == pytest.approx((2 / 10 + 1 / 10) / 2)


def test_beir_qrels_and_gzip_give_the_same_numbers(files, capsys):
    with gzip.open(files / "run.trec.gz", "wt") as handle:
        handle.write(RUN)
    _, trec_out, _ = _evaluate(capsys, "--qrels", str(files / "qrels.txt"), "--run", str(files / "run.trec"))
    _, beir_out, _ = _evaluate(capsys, "--qrels", str(files / "qrels.tsv"), "--run", str(files / "run.trec.gz"))
    assert json.loads(beir_out) == json.loads(trec_out)


def test_per_query_json(files, capsys):
    code, out, _ = _evaluate(capsys, "--qrels", str(files / "qrels.txt"), "--run", str(files / "run.trec"),
                             "-m", "mrr", "-m", "ndcg@2", "--per-query")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"aggregate", "per_query"}
    assert data["per_query"]["q1"]["mrr"] == 1.0 and data["per_query"]["q2"]["mrr"] == 0.5
    # q1: DCG@2 = 1 + 2/log2(3) (d3 before d2), ideal = 2 + 1/log2(3).
    assert data["per_query"]["q1"]["ndcg@2"] == pytest.approx((1 + 2 / 1.584962500721156) / (2 + 1 / 1.584962500721156))
    assert set(data["per_query"]) == {"q1", "q2"}
    assert data["aggregate"]["mrr"] == pytest.approx(0.75)


def test_protocol_flags(files, capsys):
    args = ["--qrels", str(files / "qrels.txt"), "--run", str(files / "run.trec"), "-m", "mrr", "-m", "p@1"]
    _, out, _ = _evaluate(capsys, *args, "--exclude-self", "--complete", "--per-query")
    data = json.loads(out)
    assert data["per_query"] == {"q1": {"mrr": 1.0, "p@1": 1.0}, "q2": {"mrr": 1.0, "p@1": 1.0},
                                 "q3": {"mrr": 0.0, "p@1": 0.0}}
    _, out, _ = _evaluate(capsys, *args, "--relevance-threshold", "2")
    assert json.loads(out) == {"mrr": pytest.approx((1 / 2 + 0) / 2), "p@1": 0.0}


def test_table_states_values_and_options(files, capsys):
    code, out, _ = _evaluate(capsys, "--qrels", str(files / "qrels.txt"), "--run", str(files / "run.trec"),
                             "-m", "mrr", "-m", "P_1", "--format", "table", "--exclude-self")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["metric", "value"]
    assert lines[1].split() == ["mrr", "1.0000"]
    assert lines[2].split() == ["p@1", "1.0000"]
    assert "queries: 2 evaluated (1 judged queries missing from the run ignored" in out
    assert "relevance threshold 1, exclude self yes (1 removed), complete no" in out


def test_per_query_table(files, capsys):
    _, out, _ = _evaluate(capsys, "--qrels", str(files / "qrels.txt"), "--run", str(files / "run.trec"),
                          "-m", "mrr", "--format", "table", "--per-query", "--complete")
    rows = [line.split() for line in out.splitlines()[:5]]
    assert rows == [["query", "mrr"], ["q1", "1.0000"], ["q2", "0.5000"], ["q3", "0.0000"], ["all", "0.5000"]]
    assert "1 judged queries missing from the run scored 0" in out and "complete yes" in out


def test_trec_eval_test_collection(shared_data, capsys):
    folder = shared_data / "trec-eval-test"
    _, out, _ = _evaluate(capsys, "--qrels", str(folder / "qrels.test"), "--run", str(folder / "results.test"),
                          "-m", "ndcg@10", "-m", "map", "-m", "P@10", "-m", "recall@100", "-m", "mrr")
    # Values printed by trec_eval -m all_trec (out.test.a).
    assert {k: f"{v:.4f}" for k, v in json.loads(out).items()} == {
        "ndcg@10": "0.3016", "map": "0.1785", "p@10": "0.3000", "recall@100": "0.4980", "mrr": "0.4064"}


@pytest.mark.parametrize("name, content, message", [
    ("qrels.txt", "q1 0 d1 1\nq1 d2 1\n", "qrels.txt:2: expected 4 columns (qid iter docid rel), got 3"),
    ("qrels.txt", "q1 0 d1 high\n", "qrels.txt:1: relevance 'high' is not an integer"),
    ("qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\n", "qrels.tsv:2: expected 3 tab-separated columns"),
    ("run.trec", "q1 Q0 d1 1 2.0 sys\nq1 Q0 d2 2 nan sys\n", "run.trec:2: score 'nan' is not finite"),
    ("run.trec", "q1 Q0 d1 1 2.0\n", "run.trec:1: expected 6 columns (qid Q0 docid rank score tag), got 5"),
    ("run.trec", "q1 Q0 d1 1 2.0 s\nq1 Q0 d1 2 1.0 s\n", "run.trec:2: document 'd1' appears twice for query 'q1'"),
    ("run.trec", "q1 Q0 d1 1 high s\n", "run.trec:1: score 'high' is not a number"),
])
def test_bad_input_names_file_and_line(files, capsys, name, content, message):
    (files / name).write_text(content)
    qrels = files / (name if name.startswith("qrels") else "qrels.txt")
    run = files / (name if name.startswith("run") else "run.trec")
    code, out, err = _evaluate(capsys, "--qrels", str(qrels), "--run", str(run))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and message in err


def test_unknown_metric_fails_before_reading(files, capsys):
    code, out, err = _evaluate(capsys, "--qrels", str(files / "missing.txt"), "--run", str(files / "run.trec"),
                               "-m", "ndcg@10", "-m", "bleu")
    assert (code, out) == (2, "")
    assert "harness evaluate: error: unknown metric 'bleu'; known metrics:" in err


def test_missing_file_and_disjoint_queries(files, capsys):
    code, _, err = _evaluate(capsys, "--qrels", str(files / "missing.txt"), "--run", str(files / "run.trec"))
    assert code == 2 and "missing.txt: qrels file does not exist" in err
    (files / "other.trec").write_text("zz Q0 d1 1 1.0 sys\n")
    code, _, err = _evaluate(capsys, "--qrels", str(files / "qrels.txt"), "--run", str(files / "other.trec"))
    assert code == 2 and "other.trec: no query of the run has judgements in the qrels" in err


def test_help_lists_default_metrics(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "ndcg@10 recall@100 mrr@10 map p@10 success@10" in " ".join(capsys.readouterr().out.split())
