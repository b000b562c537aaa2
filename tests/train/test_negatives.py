"""ANCE-style negative refresh (harness.train.negatives): the training corpus, the seeded choice of
negatives among the current model's top passages, BM25 warm-up, batches with the mined negatives, and
iDRO with ``ance_refresh_steps``: exact kill-and-resume during an episode's re-encoding."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from trainutil import idro_spec, make_data, train_killed_while_reencoding

from harness.errors import ConfigError
from harness.train import negatives as N
from harness.train.logs import read_log

pytestmark = pytest.mark.usefixtures("one_thread")


def test_training_corpus_and_the_seeded_choice():
    data = make_data(n_sources=2, rows=4, negs=2)
    passages, positives = N.training_corpus(data)
    rows = [r for s in data.sources for r in s.rows]
    assert len(passages) == len({t for r in rows for t in (*r.pos, *r.neg)})
    assert [passages[i] for i in positives[5]] == rows[5].pos
    ranked = np.array([[3, 0, 7, 1, 9, -1], [2, 4, 6, 8, 10, 12]])
    pos = [np.array([0, 9]), np.array([12])]
    picked = N.pick_negatives(ranked, pos, keep=3, seed=1, step=5)
    assert picked.shape == (2, 3)
    assert set(picked[0]) <= {3, 7, 1} and len(set(picked[0])) == 3            # positives and pads removed
    assert set(picked[1]) <= {2, 4, 6, 8, 10} and len(set(picked[1])) == 3
    order = {v: i for i, v in enumerate(ranked[1])}
    assert [order[v] for v in picked[1]] == sorted(order[v] for v in picked[1])  # kept in rank order
    assert np.array_equal(picked, N.pick_negatives(ranked, pos, 3, 1, 5))       # seeded
    draws = {tuple(N.pick_negatives(ranked, pos, 3, 1, step)[1]) for step in range(10)}
    assert len(draws) > 1                                                       # a new draw per episode
    few = N.pick_negatives(np.array([[0, 9, 4]]), [np.array([0, 9])], keep=3, seed=0, step=0)
    assert few.tolist() == [[4, -1, -1]]
    none = N.pick_negatives(np.array([[0, -1]]), [np.array([0])], keep=2, seed=0, step=0)
    assert none.tolist() == [[-1, -1]]
    with pytest.raises(ConfigError, match="unknown ANCE warm-up negatives 'random'"):
        N.AnceNegatives(data, warmup="random")
    with pytest.raises(ConfigError, match="depth >= 1 and keep >= 1"):
        N.AnceNegatives(data, keep=0)


def test_dense_top_is_the_exact_top():
    gen = torch.Generator().manual_seed(0)
    q, p = torch.randn(7, 5, generator=gen), torch.randn(40, 5, generator=gen)
    for sim in ("dot", "cos"):
        scores = (q @ p.T) if sim == "dot" else torch.nn.functional.normalize(q, dim=1) @ \
            torch.nn.functional.normalize(p, dim=1).T
        expected = torch.argsort(scores, dim=1, descending=True)[:, :10].numpy()
        assert np.array_equal(N.dense_top(q, p, 10, sim, chunk=3), expected)
    assert N.dense_top(q, p, 100).shape == (7, 40)                              # depth capped at the corpus


def context(model_dir, data, **spec):
    from harness.train.context import TrainContext
    from harness.train.model import build_model
    from harness.train.spec import TrainSpec

    spec = TrainSpec(model=model_dir, pooling="cls", similarity="dot", batch_size=4, steps=2, warmup_steps=0,
                     n_hard_negatives=2, query_max_length=16, doc_max_length=32, progress=False,
                     use_instructions=False, **spec)
    model, tok, enc = build_model(spec)
    return TrainContext(spec=spec, data=data, model=model, tokenizer=tok, device=torch.device("cpu"), encoding=enc)


def test_refresh_mines_the_current_models_top_passages(tiny_model_nodrop, tmp_path):
    from harness.train.episodes import encode_texts

    data = make_data(n_sources=2, rows=6, negs=3)
    fingerprint = data.fingerprint()
    ctx = context(tiny_model_nodrop, data)
    ctx.step = 4
    ance = N.AnceNegatives(data, depth=5, keep=2, seed=3)
    ance.refresh(ctx, tmp_path)
    passages = encode_texts(ctx, ance.passages, 32)
    queries = encode_texts(ctx, [r.query for s in data.sources for r in s.rows], 16)
    top = torch.topk(queries @ passages.T, 5, dim=1).indices
    k = 0
    for s, src in enumerate(data.sources):
        for r, row in enumerate(src.rows):
            negs = ance.negatives_of(s, r)
            assert len(negs) == 2 and not set(negs) & set(row.pos)
            assert {ance.passages.index(t) for t in negs} <= set(top[k].tolist())
            k += 1
    assert np.array_equal(np.load(tmp_path / N.NEGATIVES_FILE), ance.mined)
    assert data.fingerprint() == fingerprint                                    # the data is not modified
    batch = ance.make_batch([(0, 1), (1, 2)], ctx, 0)
    assert set(batch.passages[1:3]) <= set(ance.negatives_of(0, 1))             # [pos, neg, neg] per query
    again = N.AnceNegatives(data, depth=5, keep=2, seed=3)
    again.load_state_dict(ance.state_dict())
    assert again.negatives_of(1, 2) == ance.negatives_of(1, 2)
    with pytest.raises(ConfigError, match="not the same training data"):
        N.AnceNegatives(make_data(n_sources=1), depth=5, keep=2).load_state_dict(ance.state_dict())
    data_warmup = N.AnceNegatives(data)
    data_warmup.warmup(ctx, tmp_path)
    assert data_warmup.negatives_of(0, 0) == data.sources[0].rows[0].neg       # the collection's negatives


def test_bm25_warmup_takes_lexical_neighbours(tiny_model_nodrop, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    data = make_data(n_sources=1, rows=6, negs=1)
    ctx = context(tiny_model_nodrop, data)
    ance = N.AnceNegatives(data, depth=4, keep=2, warmup="bm25")
    ance.warmup(ctx, tmp_path)
    for r, row in enumerate(data.sources[0].rows):
        negs = ance.negatives_of(0, r)
        assert len(negs) == 2 and not set(negs) & set(row.pos)
        words = set(row.query.split())
        assert all(words & set(n.split()) for n in negs)                        # BM25 needs a shared term


# ---------------------------------------------------------------------- iDRO with ANCE episodes
def test_idro_refreshes_negatives_with_its_clusters_and_resumes_exactly(tiny_model_nodrop, tmp_path, monkeypatch):
    from methods.idro import IDRO

    spec, data = idro_spec(tiny_model_nodrop), make_data()
    assert IDRO().episode_steps(spec) == [0, 3, 6]
    assert IDRO().schedules(idro_spec(tiny_model_nodrop, episode_every=2)) == ([0, 2, 4, 6], [0, 3, 6])
    straight = IDRO()
    straight.train(spec, data, tmp_path / "straight")
    assert straight.episodes == 3 and straight.negatives.refreshes == 3
    episodes = tmp_path / "straight" / "episodes"
    assert not (episodes / "step-00000000" / N.NEGATIVES_FILE).exists()        # warm-up: the data's negatives
    mined = [np.load(episodes / f"step-0000000{s}" / N.NEGATIVES_FILE) for s in (3, 6)]
    assert not np.array_equal(*mined)                                          # a new draw per episode

    train_killed_while_reencoding(monkeypatch, spec, data, tmp_path / "killed")
    IDRO().train(spec, data, tmp_path / "killed")
    logs = [read_log(tmp_path / run / "train_log.jsonl") for run in ("straight", "killed")]
    assert [r["loss"] for r in logs[0]] == [r["loss"] for r in logs[1]]         # step for step, bit-exact
    assert [r["method"] for r in logs[0]] == [r["method"] for r in logs[1]]
    wa, wb = (load_file(str(tmp_path / run / "final" / "model.safetensors")) for run in ("straight", "killed"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    for step in (3, 6):
        name = f"step-0000000{step}"
        assert np.array_equal(np.load(episodes / name / N.NEGATIVES_FILE),
                              np.load(tmp_path / "killed" / "episodes" / name / N.NEGATIVES_FILE))
    traces = [np.load(tmp_path / run / "method" / "dro_trace.npz") for run in ("straight", "killed")]
    assert traces[0]["weights"].shape == (7, 3) and traces[0]["steps"].tolist() == list(range(1, 8))
    for key in ("weights", "losses", "counts", "sizes"):
        assert np.array_equal(traces[0][key], traces[1][key], equal_nan=key == "losses")
    assert (traces[0]["counts"].sum(axis=1) == 8).all() and (traces[0]["sizes"].sum(axis=1) == 36).all()
