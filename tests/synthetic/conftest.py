"""Shared fixtures: the default world in memory and on disk, and tiny models over it."""
from __future__ import annotations

import os

import pytest

from harness.synthetic import WorldSpec, make_tiny_model, make_world, write_world

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def world():
    return make_world()


@pytest.fixture(scope="session")
def peg_world():
    return make_world(WorldSpec.peg())


@pytest.fixture(scope="session")
def world_dir(world, tmp_path_factory):
    return write_world(world, tmp_path_factory.mktemp("world") / "default")


@pytest.fixture(scope="session")
def tiny_bert(world, tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "bert", world)


@pytest.fixture(scope="session")
def tiny_decoder(world, tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "decoder", world, kind="decoder")
