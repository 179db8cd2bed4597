"""Functional attention ops. Each op lives in ``ops/<op>/`` with ``naive.py`` (the ground truth,
materialises [B, H, T, T]) beside faster paths (``chunked.py``: query blocks, memory linear in T).

Common signature: ``op(q, k, v, ..., bias_fn=None, scale=None, return_weights=False)`` with
q, k, v: [B, H, T, hd]. ``bias_fn(s, e)`` returns the additive logit bias for query rows s..e-1
against all keys, broadcastable to [B, H, e-s, Tk]; blocked paths call it per block so a
positional bias never has to exist as a full T x T tensor.
"""
