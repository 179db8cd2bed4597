"""The C-kernel loader (``lengen/ops/ckernels.py``): build once into the cache, reuse, fall back
to the PyTorch path with one clear warning when kernels are off or cannot be built, and build with
the ``ziglang`` package's compiler where no system compiler exists. The kernels' maths is tested
against the dense references in ``tests/test_fast_cpu_diff_cope.py`` (both paths)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
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


def rows_reference(S, G, z2, b, dL, top):
    """CoPE's row logic written out per row in float64 (the kernels' contract in
    ``cope_rows.c``): -> (base-2 logits, g (1 - g), positions, score gradient, z' gradient)."""
    Gn, tq, ke = S.shape
    out = [torch.empty_like(S) for _ in range(4)]
    dz = torch.zeros_like(z2)
    for gi in range(Gn):
        for r in range(tq):
            gates = G[gi, r].clone()
            gates[:max(tq - 1 - r, 0)] = 0                             # future keys
            p = gates.cumsum(0).clamp(0, top)
            lo = p.long()
            w = p - lo
            bl = b[gi, r, lo]
            out[0][gi, r] = rows.LOG2E * (S[gi, r] + w * bl) + z2[gi, r, lo]
            out[1][gi, r] = gates * (1 - gates)
            out[2][gi, r] = p
            d = dL[gi, r].clone()
            d[:max(tq - 1 - r, 0)] = 0
            dgate = (d * bl).flip(0).cumsum(0).flip(0)                 # sum over c' >= c
            out[3][gi, r] = dgate * out[1][gi, r] + d
            dz[gi, r].index_add_(0, lo, d * (1 - w))
            dz[gi, r].index_add_(0, (lo + 1).clamp(max=top), d * w)    # w = 0 at the top
    return (*out, dz)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("top_b", ["zero", "nonzero"])
def test_row_kernels_match_a_per_row_reference(top_b, dtype):
    """The C kernels against ``rows_reference`` (float64) on rows that reach the top position
    partway (the kernels' fast stretch when b[top] = 0, as the op builds b), at their first valid
    key (gates of exactly 1) and never; groups of four mixing such rows, odd row counts (a
    remainder group), keys fewer than rows, npos 1 and 2."""
    lib = rows.kernels()
    assert lib is not None
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    for Gn, tq, ke, npos in [(3, 5, 23, 4), (2, 7, 40, 9), (1, 6, 4, 3), (5, 3, 17, 30),
                             (3, 4, 9, 1), (2, 5, 12, 2), (2, 8, 30, 6)]:
        g = torch.Generator().manual_seed(Gn * 100 + ke)

        def r(*s, g=g):
            return torch.randn(*s, generator=g, dtype=torch.float64)
        S, G = r(Gn, tq, ke), torch.sigmoid(3 * r(Gn, tq, ke))
        if npos == 6:            # mixed groups: gates 1 (top at once), near 0 (never), random
            G[0, 1], G[1, 2], G[1, 5] = 1.0, 0.01, 1.0
        z2, b, dL = r(Gn, tq, npos), r(Gn, tq, npos), r(Gn, tq, ke)
        if top_b == "zero":
            b[..., -1] = 0
        for i in range(tq):                                            # future keys: no gradient
            dL[:, i, :max(tq - 1 - i, 0)] = 0
        S, G, z2, b, dL = (t.to(dtype) for t in (S, G, z2, b, dL))
        ref = rows_reference(*(t.double() for t in (S, G, z2, b, dL)), npos - 1)
        S1, G1, P1, dL1, dz1 = S.clone(), G.clone(), torch.empty_like(S), dL.clone(), \
            torch.zeros_like(z2)
        rows.forward(lib, S1, G1, P1, z2, b, npos - 1)
        rows.backward(lib, dL1, G1, P1, b, dz1)
        for name, got, want in zip(["S", "g(1-g)", "P", "dS", "dz"], (S1, G1, P1, dL1, dz1), ref):
            assert torch.allclose(got.double(), want, rtol=tol, atol=tol), \
                f"{name} ({Gn}, {tq}, {ke}, {npos}, b[top] {top_b}, {dtype})"


# ---- the cache never keeps a partial library; the first compile says so; build-kernels --------

def fake_cc(tmp_path, body: str) -> str:
    """A compiler stand-in (a Python script) whose behaviour ``body`` decides; ``out`` is the
    path after ``-o``."""
    script = tmp_path / "fakecc"
    script.write_text(f"#!{sys.executable}\nimport sys\nout = sys.argv[sys.argv.index('-o') + 1]\n"
                      f"{body}\n")
    script.chmod(0o755)
    return str(script)


def cache_files(tmp_path) -> list[str]:
    d = tmp_path / "cache" / "ckernels"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_a_failed_build_leaves_nothing_in_the_cache(monkeypatch, tmp_path):
    cc = fake_cc(tmp_path, "open(out, 'wb').write(b'half a library'); sys.exit(1)")
    with pytest.raises(subprocess.CalledProcessError):
        ckernels.build(rows.SOURCE, [cc], ckernels.cache_dir())
    assert cache_files(tmp_path) == []


def test_an_interrupted_build_leaves_nothing_in_the_cache(monkeypatch, tmp_path):
    def interrupted(cmd, *a, **k):
        out = cmd[cmd.index("-o") + 1]
        open(out, "wb").write(b"half a library")          # the compiler got this far
        raise KeyboardInterrupt

    monkeypatch.setattr(ckernels.subprocess, "run", interrupted)
    monkeypatch.setattr(ckernels, "_version", lambda cc: "fake 1.0")
    with pytest.raises(KeyboardInterrupt):
        ckernels.build(rows.SOURCE, ["fakecc"], ckernels.cache_dir())
    assert cache_files(tmp_path) == []


def test_what_killed_builds_left_is_swept(monkeypatch, tmp_path):
    """Empty ``tmp*.so`` files (older lengen versions' temporary names, left by a killed
    process) and this version's stale ``.partial`` files go; a live build's young ones stay."""
    d = ckernels.cache_dir()
    d.mkdir(parents=True)
    old = time.time() - ckernels.BUILD_TIMEOUT_S - 60
    for name in ("tmpab12cd.so", ".cope_rows-x.so.123.0.partial"):
        (d / name).write_bytes(b"")
        os.utime(d / name, (old, old))
    for name in ("tmpyoung.so", ".cope_rows-y.so.456.0.partial", "rms_rows-0123.so"):
        (d / name).write_bytes(b"")
    cc = fake_cc(tmp_path, "open(out, 'wb').write(b'a library')")
    lib = ckernels.build(rows.SOURCE, [cc], d)
    assert cache_files(tmp_path) == sorted([".cope_rows-y.so.456.0.partial", lib.name,
                                            "rms_rows-0123.so", "tmpyoung.so"])


def test_the_first_compile_says_so_once(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(ckernels, "_noted", False)
    cc = fake_cc(tmp_path, "open(out, 'wb').write(b'a library')")
    lib = ckernels.build(rows.SOURCE, [cc], ckernels.cache_dir())
    err = capsys.readouterr().err
    assert err.count("lengen: compiling C kernels for this machine (one time, ~") == 1
    assert "lengen build-kernels" in err and len(err.strip().splitlines()) == 1
    lib.unlink()
    ckernels.build(rows.SOURCE, [cc], ckernels.cache_dir())          # a second compile: quiet
    assert capsys.readouterr().err == ""


def test_nothing_is_said_when_the_library_is_cached(monkeypatch, tmp_path, capsys):
    cc = fake_cc(tmp_path, "open(out, 'wb').write(b'a library')")
    ckernels.build(rows.SOURCE, [cc], ckernels.cache_dir())
    capsys.readouterr()
    monkeypatch.setattr(ckernels, "_noted", False)                   # a new process
    ckernels.build(rows.SOURCE, [cc], ckernels.cache_dir())
    assert capsys.readouterr().err == ""


@needs_compiler
def test_build_kernels_command(monkeypatch, tmp_path, capsys):
    """``lengen build-kernels`` builds every shipped source (here through a stand-in that
    compiles a one-line C file, so the test does not wait for the real kernels) and says where."""
    tiny = tmp_path / "tiny.c"
    tiny.write_text("int tiny(void) { return 1; }\n")
    real = ckernels.compiler()[0]
    cc = fake_cc(tmp_path, f"import subprocess\nsubprocess.run([{real!r}, '-shared', '-fPIC', "
                           f"'-o', out, {str(tiny)!r}], check=True)")
    monkeypatch.setenv("CC", cc)
    from lengen.cli import main

    assert main(["build-kernels"]) == 0
    out = capsys.readouterr().out
    assert str(ckernels.cache_dir()) in out
    for source in ckernels.sources():
        assert f"{source.relative_to(ckernels._PACKAGE)}: built in" in out
    assert len([f for f in cache_files(tmp_path) if f.endswith(".so")]) == len(ckernels.sources())
    assert main(["build-kernels"]) == 0
    assert capsys.readouterr().out.count(": cached") == len(ckernels.sources())


def test_build_kernels_without_a_compiler_or_with_a_failing_one(monkeypatch, capsys):
    from lengen.cli import main

    monkeypatch.setenv("CC", "false")
    assert main(["build-kernels"]) == 1
    assert capsys.readouterr().out.count("FAILED") == len(ckernels.sources())
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert main(["build-kernels"]) == 1
    assert "no such program" in capsys.readouterr().err
    monkeypatch.setenv("LENGEN_C_KERNELS", "0")
    assert main(["build-kernels"]) == 2
    assert "LENGEN_C_KERNELS is off" in capsys.readouterr().err
