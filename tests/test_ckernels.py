"""The C-kernel loader (``lengen/ops/ckernels.py``): build once into the cache, reuse, fall back
to the PyTorch path with one clear warning when kernels are off or cannot be built, and build with
the ``ziglang`` package's compiler where no system compiler exists. The kernels' maths is tested
against the dense references in ``tests/test_fast_cpu_diff_cope.py`` (both paths)."""
from __future__ import annotations

import importlib.util
import subprocess
import warnings

import pytest
import torch

from lengen.ops import ckernels
from lengen.ops.cope import rows
from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu
from lengen.ops.cope.naive import cope_attention_naive


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """An empty kernel cache per test, nothing loaded before or after."""
    monkeypatch.setenv("LENGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LENGEN_C_KERNELS", raising=False)
    ckernels.reset()
    yield
    ckernels.reset()


#: tests that build the kernels need a C compiler (an optional part of the machine: without one
#: lengen runs the PyTorch path, tested by the fallback tests here)
needs_compiler = pytest.mark.skipif(
    ckernels.compiler() is None,
    reason="no C compiler here (cc/gcc/clang, or pip install 'lengen[ckernels]' for ziglang)")


def compile_calls(monkeypatch) -> list:
    """Record the compiler invocations (``-shared`` builds) made through ckernels."""
    calls, real = [], subprocess.run

    def spy(cmd, *a, **k):
        if "-shared" in cmd:
            calls.append(cmd)
        return real(cmd, *a, **k)

    monkeypatch.setattr(ckernels.subprocess, "run", spy)
    return calls


def cope_matches_reference():
    g = torch.Generator().manual_seed(3)
    q, k, v = (2 * torch.randn(1, 2, 37, 8, generator=g, dtype=torch.float64) for _ in range(3))
    pe = torch.randn(8, 9, generator=g, dtype=torch.float64)
    assert torch.allclose(cope_attention_fast_cpu(q, k, v, pe), cope_attention_naive(q, k, v, pe),
                          atol=1e-10)


@needs_compiler
def test_builds_once_then_reuses_the_cached_library(monkeypatch, tmp_path):
    calls = compile_calls(monkeypatch)
    assert rows.kernels() is not None
    assert len(calls) == 1
    built = sorted(p.name for p in (tmp_path / "cache" / "ckernels").iterdir())
    assert len(built) == 1 and built[0].startswith("cope_rows-")    # no temporary file left
    ckernels.reset()                                   # a new process: load from the cache
    assert rows.kernels() is not None
    assert len(calls) == 1
    cope_matches_reference()


def test_switched_off_builds_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("LENGEN_C_KERNELS", "0")
    calls = compile_calls(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # off on purpose: no warning
        assert rows.kernels() is None
    assert calls == [] and not (tmp_path / "cache" / "ckernels").exists()
    cope_matches_reference()


@pytest.mark.parametrize("cc,why", [("/nonexistent/cc", "CC='/nonexistent/cc': no such program"),
                                    ("false", "returned non-zero exit status")])
def test_missing_or_failing_compiler_falls_back_with_one_warning(monkeypatch, cc, why):
    monkeypatch.setenv("CC", cc)
    with pytest.warns(RuntimeWarning, match=f"cope_rows.c unavailable .*{why}") as rec:
        assert rows.kernels() is None
        assert rows.kernels() is None                  # decided once per process
    assert len(rec) == 1
    assert "using the PyTorch path" in str(rec[0].message)
    cope_matches_reference()


def test_no_compiler_anywhere_falls_back(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(ckernels.shutil, "which", lambda name: None)
    monkeypatch.setattr(ckernels.importlib.util, "find_spec", lambda name: None)
    with pytest.warns(RuntimeWarning, match="no C compiler found"):
        assert rows.kernels() is None
    cope_matches_reference()


@needs_compiler
def test_cc_with_arguments_is_split_like_a_shell(monkeypatch):
    """CC="ccache gcc" / "gcc -m64" are common: the first word is the program, the rest its
    arguments (it used to be looked up whole and never found)."""
    cc = ckernels.compiler()[0]
    monkeypatch.setenv("CC", f"{cc} -Wall")
    assert ckernels.compiler() == [cc, "-Wall"]
    calls = compile_calls(monkeypatch)
    assert rows.kernels() is not None
    assert calls[0][:2] == [cc, "-Wall"]


@needs_compiler
def test_a_cached_library_that_does_not_load_is_rebuilt(monkeypatch, tmp_path):
    # built by "another process" (not loaded here: overwriting a mapped library would crash us)
    lib = ckernels.build(rows.SOURCE, ckernels.compiler(), ckernels.cache_dir())
    lib.write_bytes(b"not a shared library")          # truncated / foreign file in the cache
    calls = compile_calls(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rows.kernels() is not None
    assert len(calls) == 1 and lib.read_bytes()[:4] == b"\x7fELF"
    cope_matches_reference()


def test_cuda_tensors_never_reach_the_c_kernels(monkeypatch):
    """The kernels take raw CPU pointers: the op asks for them only for CPU tensors."""
    import lengen.ops.cope.fast_cpu as fc

    asked = []
    monkeypatch.setattr(fc.cope_rows, "kernels", lambda: asked.append(1))
    cope_matches_reference()
    assert asked                                      # CPU: asked
    asked.clear()
    # a non-CPU device (meta: shapes only, no CUDA needed) runs the PyTorch ops without asking
    q, k, v = (torch.randn(1, 2, 8, 4, device="meta") for _ in range(3))
    out = fc.cope_attention_fast_cpu(q, k, v, torch.randn(4, 5, device="meta"))
    assert out.shape == (1, 2, 8, 4) and asked == []


@needs_compiler
def test_backward_scratch_failure_raises_not_a_wrong_gradient(monkeypatch):
    """The C backward reports a failed allocation; the binding raises instead of returning the
    untouched logit gradient as if it were the score gradient."""
    lib = rows.kernels()
    assert lib is not None

    class Failing:
        def __getattr__(self, name):
            return lambda *a: 1

    g = torch.Generator().manual_seed(0)
    dL, G, P = (torch.rand(1, 4, 4, generator=g) for _ in range(3))
    b, dz = torch.zeros(1, 4, 3), torch.zeros(1, 4, 3)
    with pytest.raises(MemoryError, match="cope_rows backward"):
        rows.backward(Failing(), dL, G, P, b, dz)
    rows.backward(lib, dL, G, P, b, dz)                 # the real kernel reports success


@needs_compiler
def test_version_mismatch_is_refused(monkeypatch):
    with pytest.warns(RuntimeWarning, match=f"version {rows.VERSION} != 99"):
        assert ckernels.load(rows.SOURCE, 99) is None


@pytest.mark.skipif(importlib.util.find_spec("ziglang") is None,
                    reason="optional dependency ziglang not installed (pip install "
                           "'lengen[ckernels]')")
def test_ziglang_compiler_from_the_package_registry(monkeypatch):
    """No CC and nothing on PATH: the ziglang wheel's C compiler builds the kernels."""
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(ckernels.shutil, "which", lambda name: None)
    cmd = ckernels.compiler()
    assert cmd[1:] == ["-m", "ziglang", "cc"]
    calls = compile_calls(monkeypatch)
    assert rows.kernels() is not None
    assert len(calls) == 1 and calls[0][:4] == cmd
    cope_matches_reference()
