"""The wheel carries every C kernel source: built from a copy of the repository as pip builds it
(``pip wheel --no-deps --no-build-isolation``, this environment's setuptools, no download), then
the wheel's file list is compared with the ``.c`` files under ``lengen/`` (a source missing from
``package-data`` would leave an installed lengen on the slower PyTorch path without saying so)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from lengen.ops import ckernels

ROOT = Path(__file__).resolve().parents[1]


def test_the_kernel_list_is_every_c_file_in_the_package():
    found = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "lengen").rglob("*.c"))
    assert [p.relative_to(ROOT).as_posix() for p in ckernels.sources()] == found
    assert "lengen/ops/glu/glu_rows.c" in found and len(found) >= 4


def test_the_wheel_ships_every_c_kernel(tmp_path):
    src = tmp_path / "src"
    # a copy: a build writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", "runs", "results", "benchmarks",
        ".pytest_cache", "tests"))
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "--no-build-isolation", str(src), "-w", str(out)],
                          capture_output=True, text=True, env={**os.environ, "PIP_NO_INDEX": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("lengen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {p.relative_to(ROOT).as_posix() for p in (ROOT / "lengen").rglob("*.c")}
    assert wanted and wanted <= names, sorted(wanted - names)
    # the sources sit where the ops look for them (SOURCE = Path(__file__).with_name(...))
    from lengen.ops import fused_rows
    from lengen.ops.cope import rows
    from lengen.ops.glu import gated
    from lengen.ops.norm import rms
    for mod in (fused_rows, rows, gated, rms):
        assert mod.SOURCE.relative_to(ROOT).as_posix() in names, mod.__name__
