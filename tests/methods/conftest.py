"""Fixtures shared by the method tests."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's torch work on one thread: tiny models train fastest that way (also on a machine
    shared with other jobs), and the speed tests compare like with like.  Use it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
