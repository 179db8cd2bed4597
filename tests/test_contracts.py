"""Every entry of every registry through the generic contracts (:mod:`lengen.contracts`, the
same code ``lengen check`` runs): positional schemes with every attention kind and the reverse
(causality, evaluation path == training path, ``[B, T]`` equal rows == ``[T]`` with gradients
in float64, float64 kept by every hook, KV-cache generation == recomputation, unknown kwargs
refused), samplers inside a RoPE and a NoPE model, and tasks (determinism, splits, masks,
answers by the task's own solver). The grid is read from the registries at import, so a scheme,
attention kind, sampler or task added later is covered by registering it; a combination that
two entries' plans share runs once. A skip means the contract does not apply (its reason)."""
from __future__ import annotations

import pytest

from lengen.contracts import plan, run_one
from lengen.contracts.model import Failure
from lengen.attention import ATTENTIONS
from lengen.posenc import POSENCS
from lengen.samplers import SAMPLERS
from lengen.tasks import TASKS

REGISTRIES = {"posenc": POSENCS, "attention": ATTENTIONS, "positions": SAMPLERS, "task": TASKS}


def _grid():
    seen = {}
    for kind, registry in REGISTRIES.items():
        for name in registry:
            for contract, combo in plan(kind, name):
                key = (contract, repr(sorted(combo.items())))
                seen.setdefault(key, (contract, combo))
    return list(seen.values())


GRID = _grid()
IDS = [f"{c}-" + "-".join(str(v) for k, v in sorted(combo.items())) for c, combo in GRID]


@pytest.mark.parametrize("contract,combo", GRID, ids=IDS)
def test_contract(contract, combo):
    status, reason = run_one(contract, combo)
    # plan() leaves out what cannot apply, so a registered entry never skips here
    assert status == "pass", f"{status}: {reason}"


def test_a_broken_scheme_fails_its_contracts(monkeypatch):
    """The contracts can fail: ALiBi computing its bias in float32 whatever the model's dtype
    (fails 'dtype'), and a scheme whose bias peeks at the next position (fails 'causal')."""
    import torch

    from lengen.posenc.alibi import ALiBi

    def fp32_bias(self, pos_q, pos_k, q=None, k=None):
        return -self.slopes[:, None, None].float() * self.pairwise(pos_q, pos_k).float().abs()

    monkeypatch.setattr(ALiBi, "bias", fp32_bias)
    status, reason = run_one("dtype", {"posenc": "alibi", "attention": "softmax"})
    assert status == "fail" and "returns torch.float32 in a float64 model" in reason

    def future_bias(self, pos_q, pos_k, q=None, k=None):
        b = torch.zeros(self.n_heads, len(pos_q), len(pos_k), dtype=pos_q.dtype)
        b[:, :, 1:] = 0.0
        if k is not None:                     # leak: every query reads the last key's norm
            b = b + k[0, :, -1:].norm(dim=-1, keepdim=True)
        return b

    monkeypatch.setattr(ALiBi, "bias", future_bias)
    status, reason = run_one("causal", {"posenc": "alibi", "attention": "softmax"})
    assert status == "fail" and "changed with tokens after" in reason
    assert issubclass(Failure, AssertionError)
