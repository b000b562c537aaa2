"""Compute estimates count every token a method feeds the model: echo embeddings read each text twice."""
from __future__ import annotations

import pytest

from harness.method import get_method
from harness.train.plan import KNOWN_CONFIGS, compute_estimate, estimate_parameters


def test_echo_doubles_the_tokens_and_plain_mode_does_not():
    method = get_method("echo-splade")
    spec = method.spec("paper")
    echo = compute_estimate(spec, 1000, length_factor=method.sequence_length_factor(spec))
    plain_spec = method.spec("paper", method_options={**spec.method_options, "echo": False})
    plain = compute_estimate(plain_spec, 1000, length_factor=method.sequence_length_factor(plain_spec))
    assert echo["tokens"] == 2 * plain["tokens"]
    assert get_method("splade").sequence_length_factor(get_method("splade").spec("tiny")) == 1.0


def test_mistral_v03_parameters_are_known_offline():
    params = estimate_parameters(KNOWN_CONFIGS["mistralai/Mistral-7B-v0.3"])
    assert params is not None
    # 7.25B parameters (Mistral's model card) less the untied LM head (not counted here); 32768 x 4096
    # of them are the input embeddings.
    assert params["total"] == pytest.approx(7.25e9 - 32768 * 4096, rel=0.005)
    assert params["total"] - params["non_embedding"] == 32768 * 4096
