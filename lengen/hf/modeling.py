"""Every lengen model as a Hugging Face ``transformers`` model: ``LengenConfig`` (model type
``lengen``) holds the lengen ``ModelConfig`` as a dict, ``LengenForCausalLM`` wraps
:class:`lengen.model.Transformer` unchanged, so every positional scheme, attention kind and
position sampler (TRA, FoT, CoPE, FIRE, randomized positions ...) runs exactly as in lengen.
Importing :mod:`lengen.hf` registers the pair with ``AutoConfig`` / ``AutoModelForCausalLM``, so
``AutoModelForCausalLM.from_pretrained(dir)`` loads a directory written by ``lengen export RUN
OUT --to hf`` (config.json + model.safetensors, the lengen parameter names under ``model.``).

``forward(input_ids, positions=None | position_ids=None, labels=None)`` returns HF's
``CausalLMOutputWithPast`` (logits [B, T, V]; the shifted cross-entropy when ``labels`` are
given, -100 ignored). Positions are lengen's: given (``positions`` float [T] / [B, T], or integer
``position_ids``) or else drawn from the model's sampler in its current mode, as
``Transformer.forward`` does. An ``attention_mask`` may only mark right padding (a causal model's
real tokens never see it); lengen has no padding mask, so left padding is refused in ``forward``.

``generate`` is lengen's (:mod:`lengen.model.generate`: KV cache for every attention kind,
sampler positions, per-row prompt lengths), behind HF's calling convention: ``input_ids`` (left
padding allowed, given ``attention_mask``), ``max_new_tokens``, greedy or ``do_sample`` with
``temperature`` / ``top_k``, ``eos_token_id`` / ``pad_token_id``; it returns [B, T_in + N] token
ids like HF (rows that stop early are padded). Beam search and HF's logits processors are not
supported and are refused by name.

Loading: transformers 5 builds models on the meta device and refills non-persistent buffers
(RoPE frequencies, ALiBi slopes ...) with uninitialised memory, expecting ``_init_weights`` to
recompute them; :meth:`LengenForCausalLM.from_pretrained` instead copies them from a freshly built
lengen model of the same config, so loaded models are exact.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import (AutoConfig, AutoModelForCausalLM, PretrainedConfig,
                          PreTrainedModel)
from transformers.modeling_outputs import CausalLMOutputWithPast

from lengen.consent import untrusted_source
from lengen.model import ModelConfig, Transformer

MODEL_TYPE = "lengen"
#: where an exported model's plugin import paths come from (they need the user's consent to be
#: imported: lengen.consent)
_SOURCE = "the Hugging Face config.json's lengen_model"


class LengenConfig(PretrainedConfig):
    """``lengen_model``: the lengen ``ModelConfig`` as a dict (as in a run's config.json);
    ``lengen_task``: the run's task section (name, kwargs), for the record (tokenisation is the
    task's). The usual HF size attributes are derived from it."""

    model_type = MODEL_TYPE

    def __init__(self, lengen_model: dict | None = None, lengen_task: dict | None = None,
                 **kwargs):
        self.lengen_model = dict(lengen_model or {})
        self.lengen_task = dict(lengen_task or {})
        m = ModelConfig(**self.lengen_model) if self.lengen_model else ModelConfig()
        self.vocab_size = m.vocab_size
        self.hidden_size = m.d_model
        self.num_hidden_layers = m.n_layers
        self.num_attention_heads = m.n_heads
        self.intermediate_size = m.d_ff
        kwargs["tie_word_embeddings"] = bool(m.tie_embeddings)
        super().__init__(**kwargs)


class LengenForCausalLM(PreTrainedModel):
    config_class = LengenConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    # lengen ties the head to the embedding itself (model.tie_embeddings); HF saves one copy
    _tied_weights_keys = {"model.head.weight": "model.embed.weight"}

    def __init__(self, config: LengenConfig):
        super().__init__(config)
        # built on a real device even inside transformers' meta-device loading context: some
        # schemes compute constants from tensors in their constructors
        with torch.device("cpu"), untrusted_source(_SOURCE):
            self.model = Transformer(ModelConfig(**config.lengen_model))
        self.model.eval()
        self.post_init()

    def _init_weights(self, module):
        """Nothing: lengen's Transformer initialises itself (``model.init``); loaded weights
        replace it."""

    def get_input_embeddings(self):
        return self.model.embed

    def get_output_embeddings(self):
        return self.model.head

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        model = super().from_pretrained(*args, **kwargs)
        model.restore_buffers()
        return model

    def restore_buffers(self) -> None:
        """Copy every non-persistent buffer (computed from the config, never saved) from a
        freshly built lengen model of this config."""
        with torch.device("cpu"), untrusted_source(_SOURCE):
            fresh = Transformer(ModelConfig(**self.config.lengen_model))
        fresh_buffers = dict(fresh.named_buffers())
        for name, buf in list(self.model.named_buffers()):
            owner_name, _, attr = name.rpartition(".")
            owner = self.model.get_submodule(owner_name) if owner_name else self.model
            if attr in owner._non_persistent_buffers_set:
                owner._buffers[attr] = fresh_buffers[name].to(buf.device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, return_dict: bool | None = None,
                **kwargs) -> CausalLMOutputWithPast:
        unsupported = sorted(k for k, v in kwargs.items()
                             if v is not None and k not in ("use_cache", "output_attentions",
                                                             "output_hidden_states"))
        if kwargs.get("past_key_values") is not None or unsupported:
            raise ValueError(f"LengenForCausalLM.forward does not take {', '.join(unsupported)}: "
                             f"it runs the whole sequence (cached decoding is in its generate)")
        if attention_mask is not None:
            check_right_padding(attention_mask)
        pos = positions if positions is not None else position_ids
        logits = self.model(input_ids, None if pos is None else pos.float())      # [B, T, V]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                 max_new_tokens: int | None = None, do_sample: bool = False,
                 temperature: float | None = None, top_k: int | None = None,
                 eos_token_id: int | None = None, pad_token_id: int | None = None,
                 generator: torch.Generator | None = None, use_cache: bool = True,
                 positions: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """HF-style ``generate`` through lengen's generation (see the module docstring)."""
        gc = kwargs.pop("generation_config", None) or getattr(self, "generation_config", None)
        ignored = {"num_beams": 1, "num_return_sequences": 1, "top_p": 1.0}
        bad = sorted(k for k, v in kwargs.items() if not (k in ignored and v == ignored[k]))
        if bad:
            raise ValueError(f"LengenForCausalLM.generate does not support {', '.join(bad)} "
                             f"(lengen's generation: greedy, or do_sample with temperature and "
                             f"top_k; max_new_tokens, eos_token_id, pad_token_id, positions)")
        n = max_new_tokens or getattr(gc, "max_new_tokens", None) or 20
        eos = eos_token_id if eos_token_id is not None else getattr(gc, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            if len(eos) > 1:
                raise ValueError("LengenForCausalLM.generate takes one eos_token_id")
            eos = eos[0] if eos else None
        pad = pad_token_id if pad_token_id is not None else getattr(gc, "pad_token_id", None)
        pad = pad if pad is not None else (eos if eos is not None else 0)
        temp = (temperature if temperature is not None else 1.0) if do_sample else 0.0
        if attention_mask is not None:
            starts = check_left_padding(attention_mask)
        else:
            starts = [0] * input_ids.shape[0]
        prompts = [row[s:] for row, s in zip(input_ids, starts)]
        outs = self.model.generate(prompts, n, eos, positions=positions, temperature=temp,
                                   top_k=top_k if do_sample else None, generator=generator,
                                   use_cache=use_cache)
        width = max(o.numel() for o in outs)
        out = torch.full((input_ids.shape[0], input_ids.shape[1] + width), pad,
                         dtype=input_ids.dtype, device=input_ids.device)
        out[:, :input_ids.shape[1]] = input_ids
        for i, o in enumerate(outs):
            out[i, input_ids.shape[1]:input_ids.shape[1] + o.numel()] = o
        return out


def check_right_padding(mask: torch.Tensor) -> None:
    """Ones then zeros in every row (padding after the real tokens only)."""
    m = mask.bool()
    if bool((m[:, 1:] & ~m[:, :-1]).any()):
        raise ValueError("LengenForCausalLM.forward: attention_mask marks padding before real "
                         "tokens; lengen models have no padding mask, so only right padding "
                         "(which a causal model never attends from the real tokens) is allowed; "
                         "run rows of different lengths separately or pad on the right")


def check_left_padding(mask: torch.Tensor) -> list[int]:
    """Zeros then ones in every row (HF's padding for decoder-only generation) -> the start of
    each row's prompt."""
    m = mask.bool()
    if bool((m[:, :-1] & ~m[:, 1:]).any()) or not bool(m[:, -1].all()):
        raise ValueError("LengenForCausalLM.generate: pad prompts on the left (attention_mask "
                         "zeros before the ones), as for every decoder-only HF model")
    return (~m).sum(dim=1).tolist()


AutoConfig.register(MODEL_TYPE, LengenConfig, exist_ok=True)
AutoModelForCausalLM.register(LengenConfig, LengenForCausalLM, exist_ok=True)

__all__ = ["LengenConfig", "LengenForCausalLM", "MODEL_TYPE"]
