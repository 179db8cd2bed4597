"""impl='auto' picks the training op by device: tiled CPU op, Triton on CUDA, else the reference;
the base class's attend picks among a kind's declared ops by path."""
from types import SimpleNamespace

import pytest
import torch

from lengen.attention.base import Attention
from lengen.attention.fot import ForgettingAttention
from lengen.attention.tra import ThresholdRelativeAttention
from lengen.ops.fot import fot_attention_naive
from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu
from lengen.ops.select import Ops, triton_available
from lengen.ops.tra import tra_attention_naive
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu
from lengen.posenc import build_posenc


def fake(device, hd=64):
    return SimpleNamespace(device=SimpleNamespace(type=device), shape=(1, 2, 8, hd))


def test_cpu_trains_with_the_tiled_ops():
    assert ThresholdRelativeAttention.ops.training(fake("cpu")) is tra_attention_fast_cpu
    assert ForgettingAttention.ops.training(fake("cpu")) is fot_attention_fast_cpu


def test_torch_compile_traces_the_reference_not_the_tiled_ops(monkeypatch):
    """Under torch.compile (train.compile=true) the tiled CPU ops, whose Python caches are keyed
    by tensor identity, would recompile the graph at every step: the reference is traced."""
    from lengen.attention.softmax import SoftmaxAttention
    from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu

    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert ThresholdRelativeAttention.ops.training(fake("cpu")) is tra_attention_naive
    assert ForgettingAttention.ops.training(fake("cpu")) is fot_attention_naive
    layer = SoftmaxAttention(d_model=16, n_heads=2).train()
    q = torch.zeros(1, 2, 8, 8)
    assert layer.training_op(q, q, q, lambda s, e: None, None) is not softmax_attention_fast_cpu


def test_cuda_without_kernel_support_falls_back_to_the_reference():
    bias = lambda s, e: None  # noqa: E731
    assert ThresholdRelativeAttention.ops.training(fake("cuda"), bias) is tra_attention_naive
    assert ForgettingAttention.ops.training(fake("cuda", hd=256)) is fot_attention_naive
    assert ThresholdRelativeAttention.ops.training(fake("mps")) is tra_attention_naive


@pytest.mark.skipif(not triton_available(), reason="triton not installed")
def test_cuda_selects_the_triton_kernels():
    assert ThresholdRelativeAttention.ops.training(fake("cuda")).__name__ == "tra_attention_triton"
    assert ForgettingAttention.ops.training(fake("cuda")).__name__ == "fot_attention_triton"


def recording_op(name, calls):
    def op(q, k, v, *args, bias_fn=None, **kw):
        calls.append((name, args, sorted(kw)))
        out = torch.zeros_like(q)
        return (out, torch.ones(1)) if kw.get("return_weights") else out
    return op


@pytest.mark.parametrize("impl, train, record, expect", [
    ("auto", True, False, ("fast_cpu", ["flag"])),
    ("auto", False, False, ("lean", ["block_size", "flag"])),
    ("naive", True, False, ("naive", ["flag"])),
    ("lean", True, False, ("lean", ["block_size", "flag"])),
    ("auto", True, True, ("naive", ["flag", "return_weights"])),
])
def test_attend_dispatches_over_the_declared_ops(impl, train, record, expect):
    """The base class's attend picks among a kind's declared ops and hands each the kind's own
    inputs (op_args): recording -> naive with weights, naive, lean or evaluation -> lean, auto
    training -> the device's training op."""
    calls = []

    class Kind(Attention):
        ops = Ops(naive=recording_op("naive", calls), lean=recording_op("lean", calls),
                  fast_cpu=recording_op("fast_cpu", calls))

        def op_args(self, q, x):
            return ("extra",), {"flag": 1}

    layer = Kind(d_model=8, n_heads=2, impl=impl).train(train)
    layer.record_weights = record
    pe = build_posenc("nope", d_model=8, n_heads=2, head_dim=4, causal=True)
    assert layer(torch.randn(2, 5, 8), torch.arange(5.0), pe).shape == (2, 5, 8)
    assert calls == [(expect[0], ("extra",), expect[1])]
    assert (layer.last_weights is not None) == record


def test_a_kind_needs_ops_or_its_own_attend():
    class Nothing(Attention):
        pass

    with pytest.raises(TypeError, match="needs its ops"):
        Nothing(d_model=8, n_heads=2)
