"""lengen.fileio: atomic writes (no temporary file left, the old file kept when writing fails)
and file digests equal to hashing the whole content."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from lengen.fileio import file_digest, save_json_atomic, write_text_atomic


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


@pytest.mark.parametrize("algo,params", [("sha256", {}), ("blake2b", {"digest_size": 16})])
def test_file_digest_is_the_digest_of_the_content(tmp_path, algo, params):
    data = os.urandom(3 * (1 << 20) + 17)                          # several read blocks
    p = tmp_path / "blob"
    p.write_bytes(data)
    assert file_digest(str(p), algo, **params) == hashlib.new(algo, data, **params).hexdigest()
