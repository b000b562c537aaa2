"""Retrieval: dense search with faiss (:mod:`harness.retrieval.dense`) and BM25 through Lucene.

Import the submodule you need; this package imports nothing on purpose, so that
dense retrieval never pulls in Pyserini and its Java runtime (and BM25 never pulls in torch).
"""
