"""Probe configs for the cpu-scale TRA Table 1 (issue 14 item 4). Not part of the repo."""
import json, sys, time, os
import torch
import lengen
from lengen.recipes.tra_flipflop import model_config

def run(model, seed, out, **over):
    cfg = model_config(model, "cpu", seed)
    for k, v in over.items():
        sec, key = k.split("__")
        cfg[sec][key] = v
    name = f"{model}-s{seed}-" + "-".join(f"{k.split('__')[1]}{v}" for k, v in over.items())
    cfg["name"] = name
    cfg["train"]["threads"] = 1
    cfg["train"]["progress"] = False
    t0 = time.time()
    _, _, rows = lengen.train(lengen.resolve(cfg), os.path.join(out, name), quiet=True)
    acc = {r["split"]: round(100 * r["value"], 2) for r in rows if r["metric"] == "seq_acc"}
    rec = dict(name=name, model=model, seed=seed, **over, minutes=round((time.time() - t0) / 60, 2), **acc)
    print(json.dumps(rec), flush=True)
    with open(os.path.join(out, "probe.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")

if __name__ == "__main__":
    out = sys.argv[1]
    spec = json.loads(sys.argv[2])
    for item in spec:
        run(item.pop("model"), item.pop("seed"), out, **item)
