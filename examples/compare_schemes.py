"""Compare NoPE, RoPE and ALiBi on copy over two seeds: mean accuracy per test length."""
import argparse

from lengen.sweep import Grid, run_sweep


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=1000, help="training steps per run")
    p.add_argument("--out", default="runs/compare", help="the sweep's folder")
    args = p.parse_args()
    grid = Grid(base={"task": {"name": "copy", "kwargs": {"max_train_length": 10}},
                      "model": {"d_model": 64, "n_layers": 2},
                      "train": {"steps": args.steps, "lr": 1e-3},
                      "eval": {"sequences": 64, "splits": ["len=5", "len=10", "len=15", "len=20"]}},
                axes={"model.posenc": ["nope", "rope", "alibi"], "train.seed": [0, 1]})
    df = run_sweep(grid, args.out, workers=2).frame()     # 2 worker processes; resumable
    acc = df[df.metric == "seq_acc"].pivot_table(index="pe", columns="split", values="value")
    print((100 * acc).round(1))


if __name__ == "__main__":   # needed: the workers are spawned processes that import this file
    main()
