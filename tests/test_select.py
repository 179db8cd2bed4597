"""impl='auto' picks the training op by device: tiled CPU op, Triton on CUDA, else the reference."""
from types import SimpleNamespace

import pytest

from lengen.attention.fot import ForgettingAttention
from lengen.attention.tra import ThresholdRelativeAttention
from lengen.ops.fot import fot_attention_naive
from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu
from lengen.ops.select import triton_available
from lengen.ops.tra import tra_attention_naive
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu


def fake(device, hd=64):
    return SimpleNamespace(device=SimpleNamespace(type=device), shape=(1, 2, 8, hd))


def test_cpu_trains_with_the_tiled_ops():
    assert ThresholdRelativeAttention.ops.training(fake("cpu")) is tra_attention_fast_cpu
    assert ForgettingAttention.ops.training(fake("cpu")) is fot_attention_fast_cpu


def test_cuda_without_kernel_support_falls_back_to_the_reference():
    bias = lambda s, e: None  # noqa: E731
    assert ThresholdRelativeAttention.ops.training(fake("cuda"), bias) is tra_attention_naive
    assert ForgettingAttention.ops.training(fake("cuda", hd=256)) is fot_attention_naive
    assert ThresholdRelativeAttention.ops.training(fake("mps")) is tra_attention_naive


@pytest.mark.skipif(not triton_available(), reason="triton not installed")
def test_cuda_selects_the_triton_kernels():
    assert ThresholdRelativeAttention.ops.training(fake("cuda")).__name__ == "tra_attention_triton"
    assert ForgettingAttention.ops.training(fake("cuda")).__name__ == "fot_attention_triton"
