"""lengen.fileio: atomic writes (no temporary file left, the old file kept when writing fails)
and file digests equal to hashing the whole content."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from lengen.fileio import file_digest, save_json_atomic, savefig_atomic, write_text_atomic


def test_atomic_writes_leave_only_the_file(tmp_path):
    p = str(tmp_path / "rows.json")
    save_json_atomic({"a": 1, "path": tmp_path}, p)            # non-JSON values as str
    assert json.load(open(p)) == {"a": 1, "path": str(tmp_path)}
    write_text_atomic("x,y\n", str(tmp_path / "rows.csv"))
    assert sorted(os.listdir(tmp_path)) == ["rows.csv", "rows.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    p = str(tmp_path / "r.json")
    save_json_atomic({"old": True}, p)
    with pytest.raises(TypeError):
        write_text_atomic(object(), p)                             # not text: write fails
    assert json.load(open(p)) == {"old": True}
    assert os.listdir(tmp_path) == ["r.json"]                       # no temporary file left


def test_savefig_atomic_writes_the_format_of_the_extension_and_keeps_old_on_failure(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png, pdf = str(tmp_path / "a.png"), str(tmp_path / "a.pdf")
    assert savefig_atomic(fig, png, dpi=50) == png
    savefig_atomic(fig, pdf)
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"      # not .tmp's guess
    assert open(pdf, "rb").read(5) == b"%PDF-"
    before = open(png, "rb").read()
    with pytest.raises(ValueError):
        savefig_atomic(fig, png, format="no-such-format")
    assert open(png, "rb").read() == before                          # the old figure is kept
    assert sorted(os.listdir(tmp_path)) == ["a.pdf", "a.png"]         # no temporary file left
    plt.close(fig)


@pytest.mark.parametrize("algo,params", [("sha256", {}), ("blake2b", {"digest_size": 16})])
def test_file_digest_is_the_digest_of_the_content(tmp_path, algo, params):
    data = os.urandom(3 * (1 << 20) + 17)                          # several read blocks
    p = tmp_path / "blob"
    p.write_bytes(data)
    assert file_digest(str(p), algo, **params) == hashlib.new(algo, data, **params).hexdigest()
