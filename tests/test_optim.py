"""The optimizer ``build_optimizer`` makes: torch's fused AdamW / Adam kernel for float32 CPU
parameters, whose updates match the default per-op loop to fp32 rounding over many steps, with
the same state (so a checkpoint moves between the two), and the default elsewhere."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lengen.train.optim import build_optimizer, fused_on_cpu


def config(optimizer="adamw"):
    return SimpleNamespace(optimizer=optimizer, lr=3e-3, betas=(0.9, 0.98), eps=1e-8,
                           weight_decay=0.1, decay_all=False)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(11, 16), nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32),
                         nn.Linear(32, 11))


@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
def test_fused_matches_the_loop(optimizer):
    """30 steps on the same gradients: parameters and state agree to fp32 rounding, and the
    state dict of one loads into the other."""
    fast, slow = model(), model()
    opt_f = build_optimizer(fast, config(optimizer))
    assert opt_f.defaults["fused"]
    cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    twin = dict(zip(map(id, fast.parameters()), slow.parameters()))    # fast's param -> slow's
    opt_s = cls([{**{k: v for k, v in g.items() if k not in ("params", "fused")},
                  "params": [twin[id(p)] for p in g["params"]]} for g in opt_f.param_groups],
                fused=False, foreach=False)
    tokens = torch.randint(0, 11, (8, 5), generator=torch.Generator().manual_seed(1))
    for _ in range(30):
        for net, opt in ((fast, opt_f), (slow, opt_s)):
            opt.zero_grad()
            net(tokens).logsumexp(-1).mean().backward()
            opt.step()
    for a, b in zip(fast.parameters(), slow.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    opt_s.load_state_dict(opt_f.state_dict())                         # same state layout
    opt_f.load_state_dict(opt_s.state_dict())


def test_loop_where_not_all_float32_cpu():
    net = model().double()
    assert not fused_on_cpu(net.parameters())
    assert not build_optimizer(net, config()).defaults["fused"]
    assert fused_on_cpu(model().parameters()) and not fused_on_cpu([])


def test_resume_keeps_this_machines_implementation():
    """A checkpoint saved by the per-parameter loop (an older lengen, or another device)
    restores its values into a fused optimizer that stays fused, and fp16's GradScaler can
    step it; and the other way round."""
    from lengen.train.optim import load_optimizer_state, param_groups
    old = model()
    loop = torch.optim.AdamW(param_groups(old, 0.1), lr=1e-3, fused=False, foreach=False)
    old(torch.zeros(2, 3, dtype=torch.long)).sum().backward()
    loop.step()
    fused = build_optimizer(model(), config())
    load_optimizer_state(fused, loop.state_dict())
    assert all(g["fused"] for g in fused.param_groups)
    assert all(torch.equal(a["exp_avg"], b["exp_avg"])
               for a, b in zip(fused.state.values(), loop.state.values()))
    scaler = torch.amp.GradScaler("cpu")
    params = [p for g in fused.param_groups for p in g["params"]]
    scaler.scale(sum(p.sum() for p in params)).backward()
    scaler.step(fused)                                    # fails if it steps as the loop
    scaler.update()
    load_optimizer_state(loop, fused.state_dict())
    assert all(not g["fused"] for g in loop.param_groups)
