"""SparseVectors (CSR term weights) and top-k pruning."""
from __future__ import annotations

import numpy as np
import pytest

from harness.encoders.sparse_vectors import SparseVectors, keep_top_k
from harness.errors import ConfigError

W = np.array([[0.0, 2.0, 0.0, 1.0, 0.5],
              [0.0, 0.0, 0.0, 0.0, 0.0],
              [3.0, 3.0, 1.0, 0.0, 0.0]], dtype=np.float32)


def test_from_dense_is_csr_of_the_non_zeros():
    v = SparseVectors.from_dense(W)
    assert len(v) == 3 and v.vocab_size == 5
    assert v.indptr.tolist() == [0, 3, 3, 6]
    assert v.indices.tolist() == [1, 3, 4, 0, 1, 2]
    assert v.data.tolist() == [2.0, 1.0, 0.5, 3.0, 3.0, 1.0]
    assert v.nnz.tolist() == [3, 0, 3]
    assert np.array_equal(v.to_dense(), W)
    assert np.array_equal(v.to_scipy().toarray(), W)


def test_terms_recover_token_strings():
    v = SparseVectors.from_dense(W)
    vocab = ["[CLS]", "cancer", "cell", "##s", "p53"]
    assert v.terms(0, vocab) == {"cancer": 2.0, "##s": 1.0, "p53": 0.5}
    assert v.terms(1, vocab) == {}


def test_top_k_keeps_the_largest_and_lower_id_on_ties():
    pruned = keep_top_k(W, 2)
    assert pruned.tolist() == [[0, 2, 0, 1, 0], [0, 0, 0, 0, 0], [3, 3, 0, 0, 0]]
    assert SparseVectors.from_dense(W, top_k=1).to_dense().tolist() == [[0, 2, 0, 0, 0], [0] * 5, [3, 0, 0, 0, 0]]
    # k >= vocabulary: nothing pruned
    assert np.array_equal(SparseVectors.from_dense(W, top_k=9).to_dense(), W)


def test_concatenate_and_take_round_trip():
    a, b = SparseVectors.from_dense(W[:2]), SparseVectors.from_dense(W[2:])
    both = SparseVectors.concatenate([a, b])
    assert np.array_equal(both.to_dense(), W)
    assert np.array_equal(both.take(np.array([2, 0, 1])).to_dense(), W[[2, 0, 1]])


@pytest.mark.parametrize("call", [
    lambda: SparseVectors(np.array([0, 2]), np.array([0], np.int32), np.array([1.0], np.float32), 3),
    lambda: SparseVectors(np.array([0, 1]), np.array([5], np.int32), np.array([1.0], np.float32), 3),
    lambda: SparseVectors.concatenate([SparseVectors.empty(3), SparseVectors.empty(4)]),
    lambda: keep_top_k(W, 0),
    lambda: SparseVectors.from_dense(np.zeros(3)),
])
def test_inconsistent_vectors_are_refused(call):
    with pytest.raises(ConfigError):
        call()
