"""``lengen export RUN OUT --to llama4``: a stock ``transformers`` ``Llama4ForCausalLM`` (text
model, every MLP dense) that loads without lengen, written only when the lengen model computes
what Llama 4's text model computes (Meta's Llama 4; ``transformers`` ``models/llama4``):

* per layer, either RoPE (``posenc=rope``, whole head, no scaling: ``no_rope_layers[i] = 1``) or
  NoPE (``no_rope_layers[i] = 0``), softmax attention, as many key/value heads as query heads;
* every RoPE layer chunked with the same ``chunk`` (``attention_chunk_size``) or none is, and
  q/k RMS-normalised after RoPE (``qk_norm=rms``, ``use_qk_norm``) on all RoPE layers or on none;
  NoPE layers are global, without q/k norm;
* temperature tuning (``attention_kwargs.logn=llama4``) on every NoPE layer with the same
  ``logn_floor_scale`` (an integer, ``floor_scale``) and ``logn_attn_scale`` (``attn_scale``),
  or on none (``attn_temperature_tuning``); no sliding ``window`` (Llama 4 has none);
* the rest as for ``--to llama`` (:func:`lengen.hf.export.llama_refusals`'s block checks):
  SwiGLU, pre-RMSNorm with a final norm, no embedding scale, positions 0, 1, ... at evaluation.

Weights: as ``--to llama`` (``mlp`` -> ``feed_forward``; ``moe_layers=[]`` so every layer is a
``Llama4TextMLP`` of width ``intermediate_size_mlp``), except that each head's q and k rows are
permuted: Llama 4 rotates channel pairs (2c, 2c + 1) as complex numbers, lengen pairs (c, c + d/2)
(``rotate_half``); both rotate pair c by position x frequency c, so row 2c of the export is
lengen's row c and row 2c + 1 lengen's row c + d/2. Scores q.k and the RMS norm are unchanged by
a permutation applied to q and k alike. ``rms_norm_eps`` is lengen's 1e-6 (the block norms and
the q/k norm share it, as in Llama 4).
"""
from __future__ import annotations

import torch

from lengen.errors import ExportError
from lengen.model import Transformer

RMS_EPS = 1e-6                     # lengen.model.block.RMSNorm's and lengen.attention.base's


def identity_at_eval(model) -> bool:
    """Whether the model's sampler gives positions 0, 1, ... at evaluation (what a transformers
    checkpoint uses)."""
    s = model.sampler
    if getattr(s, "uses_batch", False) or getattr(s, "reads_tokens", False):
        return False
    for T in (1, 7, 64, 1000):
        try:
            pos = s.sample(T, training=False, generator=torch.Generator().manual_seed(T))
        except (ValueError, RuntimeError):
            return False
        if tuple(pos.shape) != (T,) or not torch.equal(pos.float(), torch.arange(T).float()):
            return False
    return True


def block_refusals(model: Transformer) -> list[str]:
    """What a Llama and Llama 4 share outside attention that ``model`` does not have: positions
    0, 1, ... at evaluation, SwiGLU, pre-RMSNorm, a final norm, no embedding scale (also
    :func:`lengen.hf.export.llama_refusals`'s)."""
    mc, why = model.cfg, []
    if not identity_at_eval(model):
        why.append(f"model.positions={mc.positions} with {mc.positions_kwargs} (Llama uses "
                   f"positions 0, 1, ... at evaluation; this sampler does not)")
    if mc.mlp != "swiglu":
        why.append(f"model.mlp={mc.mlp} (Llama's MLP is SwiGLU)")
    if mc.norm != "rms":
        why.append(f"model.norm={mc.norm} (Llama uses RMSNorm)")
    if mc.norm_position != "pre":
        why.append(f"model.norm_position={mc.norm_position} (Llama is pre-norm)")
    if not mc.final_norm:
        why.append("model.final_norm=false (Llama always normalises before the head)")
    if mc.embed_scale:
        why.append("model.embed_scale=true (Llama does not scale its embeddings)")
    return why


def llama4_refusals(model: Transformer) -> list[str]:
    """What in ``model`` a stock ``Llama4ForCausalLM`` cannot express (empty: it maps)."""
    mc = model.cfg
    why = (["model.causal=false (an encoder; Llama 4 is a causal decoder)"]
           if not mc.causal else []) + block_refusals(model)
    rope_layers, chunks, qk, logn = [], set(), set(), set()
    for i, (lc, scheme) in enumerate(zip(mc.layer_configs(), model.block_posencs())):
        key = mc._layer_key
        kw = dict(lc.attention_kwargs)
        tuning = kw.pop("logn", "none")
        floor, scale = kw.pop("logn_floor_scale", 8192.0), kw.pop("logn_attn_scale", 0.1)
        if lc.attention != "softmax" or kw:
            why.append(f"{key(i, 'attention')}={lc.attention} with attention_kwargs "
                       f"{lc.attention_kwargs} (Llama 4's attention is softmax)")
        if lc.window is not None:
            why.append(f"{key(i, 'window')}={lc.window} (Llama 4 has chunked, not sliding, "
                       f"local attention)")
        if lc.posenc == "rope":
            if scheme.rot_dim != scheme.head_dim or scheme.scaling != "none":
                why.append(f"{key(i, 'posenc_kwargs')}={lc.posenc_kwargs} (Llama 4 rotates the "
                           f"whole head without scaling)")
            rope_layers.append(scheme.base)
            chunks.add(lc.chunk)
            qk.add((lc.qk_norm, lc.qk_norm_position))
            if tuning != "none":
                why.append(f"{key(i, 'attention_kwargs')}.logn={tuning} on a RoPE layer "
                           f"(Llama 4 tunes the temperature of NoPE layers only)")
        elif lc.posenc == "nope":
            if lc.chunk is not None or lc.qk_norm != "none":
                why.append(f"layer {i}: chunk={lc.chunk}, qk_norm={lc.qk_norm} on a NoPE layer "
                           f"(Llama 4's NoPE layers are global, without q/k norm)")
            logn.add((tuning, float(floor), float(scale)))
        else:
            why.append(f"{key(i, 'posenc')}={lc.posenc} (Llama 4's layers are RoPE or NoPE)")
    if len(set(rope_layers)) > 1:
        why.append(f"RoPE bases {sorted(set(rope_layers))} differ between layers (one rope_theta)")
    if len(chunks) > 1:
        why.append(f"chunk sizes {sorted(chunks, key=str)} differ between RoPE layers (one "
                   f"attention_chunk_size)")
    if len(qk) > 1 or (qk and next(iter(qk))[0] != "none" and next(iter(qk))[1] != "after_rope"):
        why.append(f"qk_norm {sorted(qk)} on the RoPE layers (Llama 4: rms after RoPE on all of "
                   f"them, or none)")
    if len(logn) > 1 or any(t not in ("none", "llama4") for t, _, _ in logn):
        why.append(f"temperature tuning {sorted(logn)} on the NoPE layers (Llama 4: logn=llama4 "
                   f"with one floor_scale and attn_scale on all of them, or none)")
    if any(t == "llama4" and not f.is_integer() for t, f, _ in logn):
        why.append("logn_floor_scale must be an integer (Llama 4's floor_scale)")
    return why


def llama4_config(model: Transformer):
    """The ``Llama4TextConfig`` of a lengen model that maps onto Llama 4 (else ExportError)."""
    from transformers import Llama4TextConfig

    why = llama4_refusals(model)
    if why:
        raise ExportError("this lengen model cannot be written as a stock Llama4ForCausalLM: "
                          + "; ".join(why) + ". Export it with --to hf instead (a "
                          "LengenForCausalLM, loadable after `import lengen.hf`)")
    mc = model.cfg
    lcs = mc.layer_configs()
    rope = [i for i, lc in enumerate(lcs) if lc.posenc == "rope"]
    nope = [i for i, lc in enumerate(lcs) if lc.posenc == "nope"]
    first_rope = model.block_posencs()[rope[0]] if rope else None
    tuning = nope and lcs[nope[0]].attention_kwargs.get("logn", "none") == "llama4"
    kw0 = lcs[nope[0]].attention_kwargs if nope else {}
    return Llama4TextConfig(
        vocab_size=mc.vocab_size, hidden_size=mc.d_model, intermediate_size=mc.d_ff,
        intermediate_size_mlp=mc.d_ff, num_hidden_layers=mc.n_layers,
        num_attention_heads=mc.n_heads, num_key_value_heads=mc.n_heads,
        head_dim=mc.d_model // mc.n_heads, hidden_act="silu", rms_norm_eps=RMS_EPS,
        tie_word_embeddings=mc.tie_embeddings, attention_dropout=0.0, moe_layers=[],
        no_rope_layers=[int(lc.posenc == "rope") for lc in lcs],
        attention_chunk_size=lcs[rope[0]].chunk if rope else None,
        use_qk_norm=bool(rope) and lcs[rope[0]].qk_norm == "rms",
        attn_temperature_tuning=bool(tuning),
        floor_scale=int(kw0.get("logn_floor_scale", 8192)),
        attn_scale=float(kw0.get("logn_attn_scale", 0.1)),
        rope_parameters={"rope_type": "default",
                         "rope_theta": float(first_rope.base) if first_rope else 10000.0},
        bos_token_id=None, eos_token_id=None, pad_token_id=None)


def interleave_rows(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """q or k rows [H * hd, D] in lengen's half-split RoPE order -> Llama 4's interleaved order
    (row 2c <- c, row 2c + 1 <- c + hd/2 within each head)."""
    hd = w.shape[0] // n_heads
    perm = torch.stack([torch.arange(hd // 2), torch.arange(hd // 2) + hd // 2], -1).flatten()
    return w.view(n_heads, hd, -1)[:, perm].reshape_as(w)


def llama4_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """lengen's parameters under Llama 4's names (see the module docstring)."""
    mc = model.cfg
    D, H = mc.d_model, mc.n_heads
    sd = {"model.embed_tokens.weight": model.embed.weight,
          "model.norm.weight": model.norm_f.weight, "lm_head.weight": model.head.weight}
    for i, (b, lc) in enumerate(zip(model.blocks, mc.layer_configs())):
        pre = f"model.layers.{i}."
        q, k, v = b.attn.qkv.weight.split(D, dim=0)                 # each [D, D]
        if lc.posenc == "rope":
            q, k = interleave_rows(q, H), interleave_rows(k, H)
        sd.update({pre + "self_attn.q_proj.weight": q, pre + "self_attn.k_proj.weight": k,
                   pre + "self_attn.v_proj.weight": v,
                   pre + "self_attn.o_proj.weight": b.attn.proj.weight,
                   pre + "feed_forward.gate_proj.weight": b.mlp.gate.weight,
                   pre + "feed_forward.up_proj.weight": b.mlp.up.weight,
                   pre + "feed_forward.down_proj.weight": b.mlp.down.weight,
                   pre + "input_layernorm.weight": b.norm1.weight,
                   pre + "post_attention_layernorm.weight": b.norm2.weight})
    return {k: v.detach().clone() for k, v in sd.items()}


def to_llama4(model: Transformer):
    """A stock ``Llama4ForCausalLM`` computing what ``model`` computes (else ExportError)."""
    from transformers import Llama4ForCausalLM

    cfg = llama4_config(model)
    with torch.device("cpu"):
        out = Llama4ForCausalLM(cfg)
    missing, unexpected = out.load_state_dict(llama4_state_dict(model), strict=False)
    missing = [k for k in missing if not (cfg.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ExportError(f"the installed transformers' Llama4ForCausalLM has other parameter "
                          f"names (missing {missing}, unexpected {unexpected})")
    return out.eval()


__all__ = ["block_refusals", "identity_at_eval", "llama4_config", "llama4_refusals",
           "llama4_state_dict", "to_llama4"]
