"""How ``run_times.txt`` was made: the whole cpu scale's wall time on 2 workers from measured
per-run seconds, for a run that reused earlier runs.

A sweep's ``sweep.json`` records ``seconds`` for the runs it trained (``done``); the runs it
reused (``cached``) were trained by an earlier sweep into the directory it was copied from. Give
the sweeps oldest first: each run takes its seconds from the newest sweep that trained it. The
runs are scheduled in the order the recipe gives them (``build_specs``) with
:func:`lengen.recipes.estimate.makespan`, as ``lengen.sweep`` dispatches them.

    python experiments/randomized-pe-cpu-encodings/makespan.py OLDEST/sweep.json ... NEWEST/sweep.json
"""
import json
import sys

from lengen.recipes.estimate import makespan
from lengen.recipes.randomized_pe import build_specs


def main(sweeps: list[str], workers: int = 2) -> None:
    trained = [json.load(open(p))["runs"] for p in sweeps]
    specs = build_specs("cpu")
    rows = []   # (name, which sweep trained it: 1 = oldest, its seconds)
    for s in specs:
        done = [i for i, runs in enumerate(trained) if runs.get(s.name, {}).get("status") == "done"]
        if not done:
            sys.exit(f"no sweep given trained {s.name}: pass every sweep that trained a run")
        # a run's name does not change with its step count: if the newest sweep given is not
        # the one that ran the current budgets, its times are stale, so give every sweep
        rows.append((s.name, done[-1] + 1, trained[done[-1]][s.name]["seconds"]))
    total, per = makespan([sec for _, _, sec in rows], workers)
    counts = ", ".join(f"sweep {k}: {sum(i == k for _, i, _ in rows)}"
                       for k in range(1, len(sweeps) + 1))
    print(f"runs {len(rows)} ({counts}), worker-min {sum(sec for _, _, sec in rows) / 60:.1f}, "
          f"makespan on {workers} workers {total / 60:.1f} min, "
          f"per worker {[round(p / 60, 1) for p in per]}")
    for name, i, sec in rows:
        print(f"{name:50s} sweep {i} {sec / 60:5.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
