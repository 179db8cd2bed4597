"""Shared pytest setup: single-threaded torch (the test machine is small and shared; one thread
also keeps float reductions in a fixed order), the tests folder on ``sys.path`` so test files can
``from reference_loops import ...``, and a seeded generator fixture."""
from __future__ import annotations

import os
import sys

import pytest
import torch

torch.set_num_threads(1)

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def gen():
    """A fresh, seeded CPU generator per test."""
    return torch.Generator().manual_seed(0)
