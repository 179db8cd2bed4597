"""How ``run_times.txt`` was made: the whole cpu scale's wall time on 2 workers from measured
per-run seconds, for a run that reused earlier runs.

The sweep's ``sweep.json`` records ``seconds`` for the runs it trained; reused (``cached``) runs
take theirs from the earlier sweep's ``sweep.json``. The runs are scheduled in the order the
recipe gives them (``build_specs``) with :func:`lengen.recipes.estimate.makespan`, as
``lengen.sweep`` dispatches them.

    python results/randomized-pe-cpu-encodings/makespan.py EARLIER/sweep.json NEW/sweep.json
"""
import json
import sys

from lengen.recipes.estimate import makespan
from lengen.recipes.randomized_pe.recipe import build_specs


def main(earlier: str, new: str, workers: int = 2) -> None:
    old_runs = json.load(open(earlier))["runs"]
    new_runs = json.load(open(new))["runs"]
    specs = build_specs("cpu")
    rows = []   # (name, where its time comes from, seconds)
    for s in specs:
        r = new_runs.get(s.name, {})
        rows.append((s.name, "new", r["seconds"]) if r.get("status") == "done"
                    else (s.name, "old", old_runs[s.name]["seconds"]))
    total, per = makespan([sec for _, _, sec in rows], workers)
    print(f"runs {len(rows)} (new {sum(w == 'new' for _, w, _ in rows)}), worker-min "
          f"{sum(sec for _, _, sec in rows) / 60:.1f}, makespan on {workers} workers "
          f"{total / 60:.1f} min, per worker {[round(p / 60, 1) for p in per]}")
    for name, where, sec in rows:
        print(f"{name:50s} {where:4s} {sec / 60:5.1f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
