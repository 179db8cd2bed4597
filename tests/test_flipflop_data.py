"""Official-format flip-flop files: save/load round trips, row validation, file-backed splits."""
from __future__ import annotations

import json

import pytest
import torch

from lengen.tasks.flipflop import FlipFlop, generate_flipflop
from lengen.tasks.flipflop_data import load_flipflop, save_flipflop_text

EXTS = ["txt", "jsonl", "parquet"]


def sequences(n=6, n_pairs=10, seed=0):
    return generate_flipflop(n, n_pairs, 0.5, torch.Generator().manual_seed(seed))


def to_text(row) -> str:
    return "".join("wri01"[int(t)] for t in row)


def write_rows(path, texts):
    ext = str(path).rsplit(".", 1)[-1]
    if ext == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": texts}), str(path))
    elif ext == "jsonl":
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        path.write_text("".join(t + "\n" for t in texts))


@pytest.mark.parametrize("ext", EXTS)
def test_save_load_round_trip(tmp_path, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow")
    tokens = sequences()
    path = tmp_path / f"ff.{ext}"
    save_flipflop_text(tokens, str(path))
    loaded = load_flipflop(str(path))
    assert loaded.dtype == torch.long
    assert torch.equal(loaded, tokens)
    assert torch.equal(load_flipflop(str(path), limit=2), tokens[:2])


def test_text_format_is_the_official_one(tmp_path):
    # 'w1i0r1' style: token ids w0 r1 i2 '0'3 '1'4
    path = tmp_path / "ff.txt"
    save_flipflop_text(torch.tensor([[0, 4, 2, 3, 1, 4]]), str(path))
    assert path.read_text() == "w1i0r1\n"
    path.write_text("w0w1i1r1\nw0i1r0r0\n")
    assert load_flipflop(str(path)).tolist() == [[0, 3, 0, 4, 2, 4, 1, 4], [0, 3, 2, 4, 1, 3, 1, 3]]


def corrupt(text: str, kind: str) -> str:
    """Make one malformed version of a valid sequence."""
    if kind == "bad_char":
        return text[:4] + "x" + text[5:]
    if kind == "bad_bit_char":
        return text[:5] + "2" + text[6:]
    if kind == "odd_length":
        return text + "w"
    if kind == "first_not_w":
        return "i" + text[1:]
    if kind == "last_not_r":
        return text[:-2] + "i" + text[-1]
    if kind == "wrong_read":
        p = text.index("r", 2)                # some read after the first pair
        return text[:p + 1] + ("0" if text[p + 1] == "1" else "1") + text[p + 2:]
    if kind == "different_length":
        return to_text(sequences(1, n_pairs=6, seed=9)[0])
    raise AssertionError(kind)


# malformation -> a word the error's reason must contain
KINDS = {"bad_char": "instruction", "bad_bit_char": "bit", "odd_length": "even",
         "first_not_w": "first instruction", "last_not_r": "last instruction",
         "wrong_read": "read", "different_length": "differs"}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bad_row", [0, 3])
def test_malformed_row_raises_naming_the_row(tmp_path, kind, bad_row):
    texts = [to_text(r) for r in sequences()]
    if kind == "different_length" and bad_row == 0:
        bad_row = 3                          # the first row defines the expected length
    texts[bad_row] = corrupt(texts[bad_row], kind)
    path = tmp_path / "ff.txt"
    write_rows(path, texts)
    with pytest.raises(ValueError, match=rf"row {bad_row}\b.*{KINDS[kind]}"):
        load_flipflop(str(path))


@pytest.mark.parametrize("ext", EXTS)
def test_malformed_row_raises_in_every_format(tmp_path, ext):
    if ext == "parquet":
        pytest.importorskip("pyarrow")
    texts = [to_text(r) for r in sequences()]
    texts[4] = corrupt(texts[4], "wrong_read")
    path = tmp_path / f"ff.{ext}"
    write_rows(path, texts)
    with pytest.raises(ValueError, match=r"row 4\b.*read"):
        load_flipflop(str(path))


def test_file_backed_split_is_evaluated_in_order(tmp_path, gen):
    tokens = sequences(n=7, n_pairs=12, seed=3)
    path = tmp_path / "iid.txt"
    save_flipflop_text(tokens, str(path))
    task = FlipFlop(n_pairs=8, data_files={"iid": str(path)})
    assert task.max_input_length() == 23
    batches = list(task.eval_batches("iid", 5, 2, 0))
    assert [b.inputs.shape[0] for b in batches] == [2, 2, 1]
    seqs = torch.cat([torch.cat([b.inputs, b.targets[:, -1:]], 1) for b in batches])
    assert torch.equal(seqs, tokens[:5])
    for b in batches:
        assert torch.equal(b.loss_mask, b.inputs == 1)     # supervised right after each 'r'
    # generated splits are unaffected
    assert task.eval_batch("dense", 2, gen).inputs.shape == (2, 15)


def test_file_backed_training_draws_file_rows(tmp_path, gen):
    tokens = sequences(n=5, n_pairs=10, seed=4)
    path = tmp_path / "train.jsonl"
    save_flipflop_text(tokens, str(path))
    task = FlipFlop(n_pairs=10, data_files={"train": str(path)})
    b = task.train_batch(12, gen)
    seqs = torch.cat([b.inputs, b.targets[:, -1:]], 1)
    for s in seqs:
        assert (tokens == s).all(1).any()
