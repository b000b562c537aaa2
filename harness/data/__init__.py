"""Data formats: BEIR datasets, TREC qrels and runs, training rows (all validated)."""
from harness.data.beir import BeirDataset, Corpus, Queries, load_beir, read_corpus, read_queries
from harness.data.qrels import Qrels, read_qrels, write_qrels
from harness.data.run import Run, read_run, write_run
from harness.data.training import TrainingRow, read_training_rows

__all__ = [
    "BeirDataset", "Corpus", "Queries", "Qrels", "Run", "TrainingRow",
    "load_beir", "read_corpus", "read_queries", "read_qrels", "write_qrels",
    "read_run", "write_run", "read_training_rows",
]
