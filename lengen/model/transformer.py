"""The transformer: a config, blocks (:mod:`lengen.model.block`), and a decoder/encoder,
readable top to bottom.

Single-device and free of logging or config parsing; compile, mixed precision and DDP are applied
from outside. Positions are data: ``forward`` takes an explicit positions tensor, ``[T]`` (shared by
the batch) or ``[B, T]`` (one row per sequence), or draws one from the configured sampler
(``lengen.samplers``), so randomized / interpolated positions compose with every scheme.
``forward(..., cache=)`` runs cached decoding steps (:mod:`lengen.model.cache`) and ``generate``
continues prompts (:mod:`lengen.model.generate`). The positional scheme is one module shared by
all layers (a scheme built with ``per_layer=True`` gets one instance per layer instead); attention modules call its hooks (see ``lengen.posenc.base``).

Decoder (``causal=True``): next-token logits at every position. Encoder (``causal=False``):
bidirectional attention; tasks append output placeholder tokens and read logits there.

``forward`` reads embed -> blocks -> final norm -> head. The input checks live in
:mod:`lengen.model.inputs`; the rows a training forward leaves out or shares (``keep=``) are
planned once per call by :meth:`Transformer.row_plan` (:mod:`lengen.ops.rows`) and handed to
every block as ``plan=``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from lengen.errors import ArgumentError, ConfigError
from lengen.model.block import Block, built, make_norm
from lengen.model.cache import KVCache
from lengen.model.config import ModelConfig
from lengen.model.generate import generate
from lengen.model.memory import check_forward
from lengen.model.inputs import check_keep, check_positions, check_tokens, input_problem
from lengen.ops import token_rows
from lengen.ops.linear import Linear
from lengen.ops.packing import Packing
from lengen.ops.rows import NO_ROWS, RowPlan, plan_rows
from lengen.ops.token_rows import TokenRows
from lengen.posenc import POSENC_POINT, build_posenc
from lengen.posenc.base import PositionalScheme
from lengen.samplers import SAMPLER_POINT, build_sampler
from lengen.samplers.base import PositionSampler


def as_model_config(cfg) -> ModelConfig:
    """``cfg`` checked as a config file's model section is (fields, registry names, ``*_kwargs``
    keys and values; ConfigError naming the key), a plain dict made into a ModelConfig first."""
    if isinstance(cfg, dict):
        cfg = ModelConfig.from_dict(cfg)
    if not isinstance(cfg, ModelConfig):
        # a whole experiment config (lengen.config, a layer above: known by its sections)
        hint = ("; pass its model section, cfg.model" if isinstance(getattr(cfg, "model", None),
                                                                     ModelConfig)
                else "; pass its model section, lengen.resolve(...).config.model"
                if isinstance(getattr(getattr(cfg, "config", None), "model", None), ModelConfig)
                else "")
        raise ArgumentError(f"Transformer needs a ModelConfig (or a dict of its keys), got "
                            f"{type(cfg).__name__}{hint}")
    # checked again only where a field changed since the last check (a config lengen.resolve
    # validated is not; a hand-made one, or one whose fields were set after it was made, is)
    if not cfg.checked(registry=True):
        if not cfg.checked():
            cfg.validate()
        cfg.registry_parts()
    return cfg


def config_sampler(cfg: ModelConfig):
    """The position sampler ``model.positions`` names, built with ``model.positions_kwargs`` (a
    constructor's complaint as a ConfigError naming both keys); every backbone builds it so."""
    return built(f"position sampler '{cfg.positions}' (model.positions, model.positions_kwargs="
                 f"{cfg.positions_kwargs})", build_sampler, cfg.positions, cfg.positions_kwargs)


def check_given(cfg: ModelConfig, posenc, sampler) -> None:
    """A scheme or sampler handed to the model must be of the class ``cfg`` names (an instance
    built from ``cfg``; its keyword arguments cannot be compared), never silently another one."""
    for given, point, name, arg in ((posenc, POSENC_POINT, cfg.layer_config(0).posenc, "posenc"),
                                    (sampler, SAMPLER_POINT, cfg.positions, "sampler")):
        if given is not None and type(given) is not point.get(name):
            raise ArgumentError(f"{arg} must be the {point.kind} '{name}' of {point.key}, "
                                f"built from the config, got a {type(given).__name__}; leave "
                                f"{arg} out to build it from the config")


class Transformer(nn.Module):
    #: check token ids and positions in forward (one device sync); the training loop turns it
    #: off for batches the task made itself (see lengen.train.loop)
    check_inputs: bool = True
    #: forward takes ``keep=`` (the positions whose logits are wanted; see forward): training
    #: asks for the scored tokens' logits only (lengen.train.step.scored_rows)
    supports_keep: bool = True

    def __init__(self, cfg: ModelConfig | dict, *, posenc: PositionalScheme | None = None,
                 sampler: PositionSampler | None = None):
        """``posenc`` (layer 0's scheme) and ``sampler``: already built from ``cfg``, as
        :func:`lengen.config.validate` builds them to check lengths (``prepare`` hands copies
        on from :class:`lengen.config.Resolved`); built here when not given. The weights of a
        seed are the same either way."""
        super().__init__()
        cfg = as_model_config(cfg)
        self.cfg = cfg
        check_given(cfg, posenc, sampler)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)

        def scheme(lc):
            return built(f"positional scheme '{lc.posenc}' (model.posenc, model.posenc_kwargs="
                         f"{lc.posenc_kwargs})", build_posenc, lc.posenc, lc.posenc_kwargs,
                         **lc.posenc_args())

        # schemes and the sampler are built on a forked RNG, so a seed's weights do not depend on
        # whether they were built here or handed in: what their constructors draw is never kept
        # (the generic init and reset_parameters below set every parameter)
        with torch.random.fork_rng(devices=[]):
            # layer 0's scheme; its embed hook serves the model (model.layers may not disagree
            # on a scheme that adds to the embeddings: ModelConfig._check_layout)
            lcs = cfg.layer_configs()
            self.posenc = posenc if posenc is not None else scheme(lcs[0])
            # blocks 1.. get instances of their own where the scheme is built per layer or
            # model.layers gives them another one (None: all share posenc); layers that name
            # the same scheme with the same kwargs share one instance, as a plain model's do
            self.layer_posencs = None
            keys = [(lc.posenc, repr(sorted(lc.posenc_kwargs.items()))) for lc in lcs]
            if self.posenc.per_layer or len(set(keys)) > 1:
                shared = {keys[0]: self.posenc}
                self.layer_posencs = nn.ModuleList(
                    scheme(lc) if self.posenc.per_layer else
                    shared.setdefault(key, scheme(lc)) if key not in shared else shared[key]
                    for lc, key in zip(lcs[1:], keys[1:]))
            self.sampler = sampler if sampler is not None else config_sampler(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm_f = make_norm(cfg) if cfg.final_norm else nn.Identity()
        self.head = Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        for block in self.blocks:
            block.attn.reset_parameters()    # kind-specific inits (gate biases) after the generic one
        for scheme_ in self.unique_posencs():
            scheme_.reset_parameters(init=cfg.init)   # a scheme's own init (tables) wins too
        # Ruoss et al.'s reference drops out embeddings only where a scheme added to them
        self.embed_dropout = (cfg.embed_dropout == "always" or self.posenc.adds_embedding)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    def _init(self, m):
        """Generic init. ``normal``: N(0, init_std) for linear weights and embeddings (GPT-2).
        ``haiku``: the defaults of Haiku, which Ruoss et al.'s reference runs on: linear weights
        truncated normal (+-2 std) with std 1/sqrt(fan_in), token embeddings truncated normal
        with std init_std (their ``emb_init_scale`` 0.02). Biases start at 0 either way."""
        if isinstance(m, nn.Linear):
            if self.cfg.init == "haiku":
                std = m.in_features ** -0.5
                nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
            else:
                nn.init.normal_(m.weight, std=self.cfg.init_std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            if self.cfg.init == "haiku":
                s = self.cfg.init_std
                nn.init.trunc_normal_(m.weight, std=s, a=-2 * s, b=2 * s)
            else:
                nn.init.normal_(m.weight, std=self.cfg.init_std)

    def unique_posencs(self) -> list:
        """Every positional-scheme instance once (one, or one per layer), in block order."""
        return list(dict.fromkeys(self.block_posencs()))

    def check_length(self, length: int) -> None:
        """Raise ValueError now if inputs of ``length`` tokens cannot be encoded (e.g. a learned
        table that is too small), instead of failing, or silently clamping, mid-training."""
        for scheme in self.unique_posencs():
            scheme.check_positions(self.sampler.max_position(length))

    def sample_positions(self, length: int, *, batch_size: int | None = None, device=None,
                         generator=None, batch=None, lengths: torch.Tensor | None = None,
                         tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Positions from the configured sampler (train or eval behaviour by ``self.training``):
        [T], or [B, T] from a per-instance sampler given ``batch_size``. Draws from
        ``generator``, else torch's global RNG. ``lengths`` [B] (real row lengths) and ``tokens``
        [B, T] feed batch-aware samplers (:mod:`lengen.samplers`); ``batch`` (a
        :class:`lengen.tasks.base.Batch`) gives both, computed only for such samplers."""
        reads = getattr(self.sampler, "uses_batch", False) or (
            self.training and getattr(self.sampler, "uses_lengths_in_training", False))
        if not reads:
            batch = {}                                                 # others never see it
        elif batch is not None:
            batch = {"lengths": batch.lengths(), "tokens": batch.inputs}
        else:
            batch = {"lengths": lengths, "tokens": tokens}
        return self.sampler.sample(length, training=self.training, device=device,
                                   generator=generator, batch_size=batch_size, **batch)

    def new_cache(self, capacity: int = 0) -> KVCache:
        """An empty KV cache for :meth:`forward` (``capacity``: tokens to reserve room for); a
        sliding-window layer keeps only its last ``window`` keys and values, a chunked layer
        only those of its current ``chunk``."""
        return KVCache(len(self.blocks), capacity,
                       windows=[getattr(b.attn, "window", None) for b in self.blocks],
                       chunks=[getattr(b.attn, "chunk", None) for b in self.blocks])

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None, *,
                cache: KVCache | None = None, keep: torch.Tensor | None = None) -> torch.Tensor:
        """tokens: [B, T] int64 -> logits [B, T, V]. positions: [T] or [B, T] float (default:
        drawn from the sampler). With ``cache`` (from :meth:`new_cache`) the tokens continue the
        cached ones: they attend to every cached token and are appended to the cache; a
        non-empty cache needs their explicit positions.

        ``keep`` (bool [B, T]): only the logits at those positions are wanted, e.g. the scored
        tokens of a training batch: returns [N, V], ``logits[keep]`` of the full call, computed
        on fewer rows (:meth:`row_plan`: the last block's MLP, the final norm and the head run
        on those N rows alone, the same saving as Hugging Face's ``logits_to_keep`` for any set
        of positions, and a causal model skips the tokens after each row's last kept one).
        Equal to the full call up to fp32 rounding; with dropout in training mode only in
        distribution (dropout draws over fewer rows). Training uses it when a batch scores few
        of its tokens (:func:`lengen.train.step.forward_loss`)."""
        pos = self.checked_positions(tokens, positions, cache, keep)   # [T] or [B, T]
        plan = self.row_plan(tokens, keep) if cache is None else NO_ROWS
        x = self.embed(tokens)                                          # [B, T, D]
        if self.cfg.embed_scale:
            x = x * math.sqrt(self.cfg.d_model)
        x = self.posenc.embed(x, pos)
        x = self.drop(x) if self.embed_dropout else x
        x = plan.packed(x)                                    # [N, D] when it packs the batch
        layers = [None] * len(self.blocks) if cache is None else cache.layers
        key_pos = None if cache is None else cache.extend_positions(pos)   # [Tc + T] / [B, ..]
        for block, posenc, layer in zip(self.blocks, self.block_posencs(), layers):
            x = block(x, pos, posenc, plan=plan, cache=layer, key_pos=key_pos)
        return self.head(self.norm_f(x))                   # [B, T, V], or [N, V] with keep

    def checked_positions(self, tokens: torch.Tensor, positions: torch.Tensor | None,
                          cache: KVCache | None, keep: torch.Tensor | None) -> torch.Tensor:
        """The positions of ``tokens`` ([T] or [B, T]: ``positions`` checked, or drawn from the
        sampler), after checking the call's inputs (:mod:`lengen.model.inputs`; their values too,
        in one device sync, unless ``check_inputs`` is off)."""
        check_tokens(tokens)
        B, T = tokens.shape
        if self.check_inputs and cache is None and not torch.compiler.is_compiling():
            # millions of tokens are refused up front, not by the allocator (lengen.model.memory)
            check_forward(self.cfg, batch=B, length=T, training=self.training,
                          device=tokens.device)
        if keep is not None:
            check_keep(keep, B, T, cache, tokens.device)
        if cache is not None and not self.cfg.causal:
            raise ValueError("a KV cache needs a causal decoder (model.causal=true); an "
                             "encoder's earlier outputs depend on later tokens")
        if positions is None:
            if cache is not None and cache.length:
                raise ValueError("forward with a non-empty cache needs the new tokens' positions: "
                                 "pass positions=pos[..., Tc:Tc + T] of the positions drawn for "
                                 "the whole sequence")
            pos = self.sample_positions(T, batch_size=B, device=tokens.device, tokens=tokens)
        else:
            pos = check_positions(positions, B, T)
        if self.check_inputs and not torch.compiler.is_compiling():
            problem = input_problem(tokens, None if positions is None else pos,
                                    self.cfg.vocab_size)
            if problem:
                raise ConfigError(problem)
        return pos

    def row_plan(self, tokens: torch.Tensor, keep: torch.Tensor | None = None) -> RowPlan:
        """What the blocks may leave out or share in this forward (:mod:`lengen.ops.rows`):
        with ``keep`` (bool [B, T], the outputs wanted) the last block's kept rows and the query
        rows its attention reads, and for a causal model the packing of the needed tokens when
        that pays (:func:`lengen.ops.rows.plan_rows`); the first block's token rows when they
        pay (:meth:`token_rows`)."""
        pack = kept = None
        if keep is not None:
            pack, kept = plan_rows(keep, self.cfg.causal)
        return RowPlan(pack=pack, tokens=self.token_rows(tokens, pack), keep=kept, rows=keep,
                       n_layers=len(self.blocks))

    def token_rows(self, tokens: torch.Tensor, pack: Packing | None) -> TokenRows | None:
        """The first block's input as one row per vocabulary entry (:mod:`lengen.ops.token_rows`)
        where the input is a function of the token alone and that pays: in CPU training
        (evaluation keeps the batch-sized products, as the other fast paths do; on CUDA the
        gather's backward would add into the table's few rows with atomics, in no fixed order),
        with no position added to the embeddings and no dropout drawn on them, when the block
        sees at least twice as many rows as the vocabulary has entries. None otherwise (and with
        ``LENGEN_TOKEN_ROWS=0``)."""
        if (not self.training or tokens.device.type != "cpu" or self.posenc.adds_embedding
                or not token_rows.enabled()):
            return None
        if self.embed_dropout and self.drop.p > 0:
            return None
        ids = tokens if pack is None else pack.pack(tokens)     # [B, T] or [N]
        if 2 * self.cfg.vocab_size > ids.numel():
            return None
        table = self.embed.weight                                # [V, D]
        if self.cfg.embed_scale:
            table = table * math.sqrt(self.cfg.d_model)
        return TokenRows(table, ids)

    def generate(self, prompts, max_new_tokens: int, eos_id: int | None = None, *,
                 positions: torch.Tensor | None = None, temperature: float = 0.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> list[torch.Tensor]:
        """Continue each prompt by up to ``max_new_tokens`` tokens (greedy at temperature 0);
        see :func:`lengen.model.generate.generate`."""
        return generate(self, prompts, max_new_tokens, eos_id, positions=positions,
                        temperature=temperature, top_k=top_k, generator=generator,
                        use_cache=use_cache)

    def block_posencs(self) -> list:
        """The positional scheme each block uses, in order."""
        if self.layer_posencs is None:
            return [self.posenc] * len(self.blocks)
        return [self.posenc, *self.layer_posencs]

    def record_attention(self, on: bool = True) -> None:
        """Make every attention layer keep its last weights ([B, H, T, T]) in ``last_weights``."""
        for block in self.blocks:
            block.attn.record_weights = on
            block.attn.last_weights = None

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
