"""LMDM: Ditto's motion-space diffusion transformer.

The network denoises an 80-frame window of 265-wide motion vectors (the layout of
:func:`~ditto_core.models.keypoints.pack_motion`). It is conditioned on one reference motion
frame (the source portrait, or the last frame of the previous window), on 80 per-frame
condition vectors (1103 wide in the released model: 1024 HuBERT audio features, then 8
emotion, 2 eye-openness, 6 eye-ball and 63 source-keypoint channels) and on the diffusion timestep, and it predicts the clean
window x0 directly.

Layout, in the order data flows:

* condition encoder: the conditions are projected to 512, run through two pre-norm
  transformer encoder layers, mean-pooled into a "hidden" vector and kept as 80 tokens;
* timestep: a sinusoidal embedding and an MLP give a FiLM vector (plus the pooled hidden)
  and two extra memory tokens;
* decoder: eight pre-norm layers of self-attention, cross-attention over the 82 memory
  tokens and a GELU feed-forward, each sub-block's output modulated by FiLM.

Rotary position embedding rotates the whole 512-wide token before the attention in-projection,
for queries and keys only. Attribute names follow the official checkpoint
(``lmdm_v0.4_hubert.pth`` -> ``model_state_dict``) so it loads with ``strict=True``.

A pass is split by what it depends on, so that samplers do each part as rarely as possible:

* :meth:`LMDM.encode_condition` / :meth:`LMDM.encode_guidance`: the conditions only (the
  encoder, the pooled hidden, the cross-attention keys/values of the 80 condition tokens):
  once per window;
* :meth:`LMDM.time_condition`: the timestep (FiLM modulations, time-token keys/values): for a
  fixed schedule, all steps of a window in one batch;
* :meth:`LMDM.denoise` / :meth:`LMDM.guided_step`: the decoder over ``x``: every step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import InputError
from .keypoints import MOTION_DIM
from .meta_build import building_on_meta

WINDOW = 80
"""Frames per denoised window (the length the null condition embedding was trained for)."""
DIFFUSION_STEPS = 1000
GUIDANCE_WEIGHT = 2.0

_LATENT = 512
_HEADS = 8
_FF = 1024
_ENCODER_LAYERS = 2
_DECODER_LAYERS = 8
_TIME_TOKENS = 2


def cosine_alphas_cumprod(num_steps: int = DIFFUSION_STEPS, s: float = 0.008) -> Tensor:
    """Cumulative products ᾱ of the cosine noise schedule, (num_steps,) float32 on the CPU.

    The betas are derived in float64 and clipped at 0.999 before the float32 cumulative
    product: that is the exact recipe the model was trained and released with, and it
    reproduces the reference's ᾱ bit for bit.
    """
    f = torch.cos((torch.arange(num_steps + 1, dtype=torch.float64) / num_steps + s) / (1 + s) * math.pi / 2) ** 2
    f = f / f[0]
    betas = (1 - f[1:] / f[:-1]).clamp(0.0, 0.999)
    return torch.cumprod(1.0 - betas.to(torch.float32), dim=0)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding over adjacent feature pairs.

    Pair ``(2i, 2i + 1)`` of the token at position ``p`` is rotated by the angle
    ``p * freqs[i]``. ``freqs`` is a persistent buffer because the checkpoint stores it.

    Args:
        dim: feature width rotated (even).
        theta: base of the geometric frequency ladder.
    """

    def __init__(self, dim: int = _LATENT, theta: float = 10000.0) -> None:
        super().__init__()
        # A meta build takes the checkpoint's values (see meta_build).
        freqs = torch.empty(dim // 2) if building_on_meta() else 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)
        self.register_buffer("freqs", freqs)

    def tables(self, length: int) -> tuple[Tensor, Tensor]:
        """``(cos, sin)`` for positions ``0 .. length-1``, each (length, dim) in the buffer dtype.

        ``sin`` carries the sign of the pair rotation (``-sin`` on even features) so that
        :meth:`forward` is a multiply and a multiply-add. Built from device ops only, so it can be
        recorded into a CUDA graph.
        """
        pos = torch.arange(length, device=self.freqs.device, dtype=self.freqs.dtype)
        angles = torch.outer(pos, self.freqs)
        sin = angles.sin()
        return angles.cos().repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)

    def forward(self, x: Tensor, tables: tuple[Tensor, Tensor]) -> Tensor:
        """Rotate (..., L, dim) tokens with tables of exactly L positions."""
        cos, sin = tables
        swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (x1, x0, x3, x2, ...)
        return torch.addcmul(x * cos, swapped, sin)


class RotaryAttention(nn.Module):
    """Multi-head attention whose queries/keys arrive already rotated.

    Parameters mirror :class:`torch.nn.MultiheadAttention` (packed ``in_proj_weight`` /
    ``in_proj_bias`` and ``out_proj``) so official weights load unchanged; the computation
    uses :func:`~torch.nn.functional.scaled_dot_product_attention` (flash / memory-efficient
    kernels on GPU). Tokens are batch-first, (N, L, dim).
    """

    def __init__(self, dim: int = _LATENT, heads: int = _HEADS) -> None:
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)

    def _project(self, x: Tensor, first: int, count: int) -> Tensor:
        """Apply ``count`` consecutive blocks (0 = q, 1 = k, 2 = v) of the packed in-projection."""
        d = self.out_proj.in_features
        rows = slice(first * d, (first + count) * d)
        return F.linear(x, self.in_proj_weight[rows], self.in_proj_bias[rows])

    def keys_values(self, rotated: Tensor, plain: Tensor) -> tuple[Tensor, Tensor]:
        """Keys from rotated tokens and values from the same tokens unrotated, each (N, L, dim)."""
        return self._project(rotated, 1, 1), self._project(plain, 2, 1)

    def self_attention(self, x: Tensor, rotated: Tensor) -> Tensor:
        """``q = k = rotated``, ``v = x``; queries and keys share one matmul."""
        q, k = self._project(rotated, 0, 2).chunk(2, dim=-1)
        return self.attend(q, k, self._project(x, 2, 1))

    def cross_attention(self, rotated: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        """Rotated queries (N, Lq, dim) against projected memory keys/values (N, Lk, dim)."""
        return self.attend(self._project(rotated, 0, 1), keys, values)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Projected (N, L, dim) queries/keys/values -> (N, Lq, dim) after the out-projection."""
        n, lq, d = q.shape
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(1, 2).reshape(n, lq, d))


class FiLM(nn.Module):
    """Feature-wise affine modulation ``(1 + scale) * x + shift`` from a conditioning vector.

    Split in two because the conditioning vector depends only on the timestep: :meth:`forward`
    turns it into a modulation (possibly for many steps at once), :func:`modulate` applies it.

    Shape: cond (N, dim) -> modulation (2, N, 1, dim) holding ``(1 + scale, shift)``.
    """

    def __init__(self, dim: int = _LATENT) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Mish(), nn.Linear(dim, 2 * dim))

    def forward(self, cond: Tensor) -> Tensor:
        scale, shift = self.block(cond).unsqueeze(1).chunk(2, dim=-1)
        return torch.stack((scale + 1, shift))


def modulate(x: Tensor, modulation: Tensor) -> Tensor:
    """``(1 + scale) * x + shift`` for x (N, L, dim) and a :class:`FiLM` modulation (2, N, 1, dim)."""
    return torch.addcmul(modulation[1], modulation[0], x)


class _PreNormLayer(nn.Module):
    """What encoder and decoder layers share: rotary self-attention and a GELU feed-forward.

    ``rotary`` is the network's single :class:`RotaryEmbedding`; registering it in every layer
    reproduces the checkpoint, which stores its buffer once per layer.
    """

    def __init__(self, rotary: RotaryEmbedding, dim: int = _LATENT, ff: int = _FF, heads: int = _HEADS) -> None:
        super().__init__()
        self.rotary = rotary
        self.self_attn = RotaryAttention(dim, heads)
        self.linear1 = nn.Linear(dim, ff)
        self.linear2 = nn.Linear(ff, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)

    def _self_attention_block(self, x: Tensor, tables: tuple[Tensor, Tensor]) -> Tensor:
        h = self.norm1(x)
        return self.self_attn.self_attention(h, self.rotary(h, tables))

    def _feed_forward(self, h: Tensor) -> Tensor:
        return self.linear2(F.gelu(self.linear1(h)))


class ConditionEncoderLayer(_PreNormLayer):
    """Pre-norm transformer encoder layer over the condition tokens, (N, L, dim) -> same."""

    def forward(self, x: Tensor, tables: tuple[Tensor, Tensor]) -> Tensor:
        x = x + self._self_attention_block(x, tables)
        return x + self._feed_forward(self.norm2(x))


class FiLMDecoderLayer(_PreNormLayer):
    """Pre-norm decoder layer: self-attention, cross-attention, feed-forward, each FiLM-modulated.

    The memory enters as keys/values already projected by :meth:`memory_keys_values`, so the
    part that does not change between diffusion steps is projected once per window.
    """

    def __init__(self, rotary: RotaryEmbedding, dim: int = _LATENT, ff: int = _FF, heads: int = _HEADS) -> None:
        super().__init__(rotary, dim, ff, heads)
        self.multihead_attn = RotaryAttention(dim, heads)
        self.norm3 = nn.LayerNorm(dim)
        self.film1 = FiLM(dim)
        self.film2 = FiLM(dim)
        self.film3 = FiLM(dim)

    def memory_keys_values(self, memory: Tensor, tables: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """Cross-attention keys/values of normalised memory tokens (N, M, dim) at the tables' positions."""
        return self.multihead_attn.keys_values(self.rotary(memory, tables), memory)

    def modulations(self, film: Tensor) -> Tensor:
        """The three sub-blocks' FiLM modulations for FiLM vectors (N, dim): (3, 2, N, 1, dim)."""
        return torch.stack((self.film1(film), self.film2(film), self.film3(film)))

    def forward(
        self, x: Tensor, keys: Tensor, values: Tensor, modulations: Tensor, tables: tuple[Tensor, Tensor]
    ) -> Tensor:
        """x (N, L, dim); keys/values (N, M, dim); modulations (3, 2, N, 1, dim); tables for L positions."""
        x = x + modulate(self._self_attention_block(x, tables), modulations[0])
        h = self.norm2(x)
        x = x + modulate(self.multihead_attn.cross_attention(self.rotary(h, tables), keys, values), modulations[1])
        return x + modulate(self._feed_forward(self.norm3(x)), modulations[2])


class DecoderStack(nn.Module):
    """The decoder layers (a wrapper only because the checkpoint nests them as ``stack``)."""

    def __init__(self, layers: list[FiLMDecoderLayer]) -> None:
        super().__init__()
        self.stack = nn.ModuleList(layers)


class SinusoidalTimeEmbedding(nn.Module):
    """Integer timesteps (N,) -> (N, dim) float32: ``dim/2`` sines then ``dim/2`` cosines."""

    def __init__(self, dim: int = _LATENT) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, t: Tensor) -> Tensor:
        half = self.dim // 2
        freqs = torch.exp(torch.arange(half, device=t.device) * (-math.log(10000.0) / (half - 1)))
        angles = t[:, None] * freqs[None, :]
        return torch.cat((angles.sin(), angles.cos()), dim=-1)


@dataclass
class LMDMCondition:
    """The step-invariant part of an LMDM pass, for N rows (see :meth:`LMDM.encode_condition`).

    All tensors live on the network's device in its dtype.
    """

    frame_term: Tensor  # (N, 512): input-projection share of the reference frame, bias included
    hidden: Tensor  # (N, 512): pooled condition (or null) hidden, added to the FiLM vector
    keys: Tensor  # (layers, N, 80, 512): cross-attention keys of the 80 condition tokens
    values: Tensor  # (layers, N, 80, 512): their values
    tables: tuple[Tensor, Tensor]  # rotary (cos, sin), (82, 512) each: 80 frames + 2 time tokens

    @property
    def batch(self) -> int:
        return self.hidden.shape[0]


@dataclass
class LMDMTimeCondition:
    """The timestep-dependent part of an LMDM pass, for N rows (see :meth:`LMDM.time_condition`)."""

    modulations: Tensor  # (layers, 3, 2, N, 1, 512): FiLM (1 + scale, shift) of every decoder sub-block
    keys: Tensor  # (layers, N, 2, 512): cross-attention keys of the 2 time tokens
    values: Tensor  # (layers, N, 2, 512): their values

    def stacked_steps(self, steps: int) -> "LMDMTimeCondition":
        """The rows as ``steps`` equal consecutive groups (rows = steps x N, step-major, as a
        sampler with a fixed schedule computes them), stacked on a new leading axis, each group
        dense: :meth:`step` takes one out.

        One copy per tensor for all groups: a step's slice of the rows would be a view whose
        strides depend on the step count (``torch.compile`` guards on strides), and a copy per
        step would add three kernels to every step of a window.
        """
        def grouped(tensor: Tensor, row_dim: int) -> Tensor:
            return tensor.unflatten(row_dim, (steps, -1)).movedim(row_dim, 0).contiguous()

        return LMDMTimeCondition(grouped(self.modulations, 3), grouped(self.keys, 1), grouped(self.values, 1))

    def step(self, index: int | Tensor) -> "LMDMTimeCondition":
        """Step ``index`` of a :meth:`stacked_steps` condition: a view for a Python int; for a
        one-element int64 tensor on the device, a gathered copy, so that a CUDA graph of one step
        can read the step it is replayed for from the device."""
        if isinstance(index, int):
            return LMDMTimeCondition(self.modulations[index], self.keys[index], self.values[index])
        return LMDMTimeCondition(*(t.index_select(0, index).squeeze(0) for t in (self.modulations, self.keys,
                                                                                  self.values)))


def _positions(tables: tuple[Tensor, Tensor], start: int, stop: int) -> tuple[Tensor, Tensor]:
    """Rotary tables restricted to positions ``start .. stop-1``."""
    return tables[0][start:stop], tables[1][start:stop]


NullCond = Union[bool, Tensor]
"""``True``/``False`` for all rows, or an (N,) bool mask; True drops the condition (CFG's unconditional pass)."""


class LMDM(nn.Module):
    """Motion diffusion transformer predicting x0 for an 80-frame window of motion vectors.

    Args:
        cond_dim: width of the per-frame condition vectors (1103 in the released model).

    Shape (N rows, float32 unless noted):
        - x: (N, 80, 265) noisy motion window
        - cond_frame: (N, 265) reference motion frame
        - cond: (N, 80, cond_dim) per-frame conditions
        - t: (N,) int64 timesteps in [0, 1000)
        - output of :meth:`forward`: (N, 80, 265) predicted clean window

    ``alphas_cumprod`` (the cosine schedule, float32) is a non-persistent buffer: the checkpoint
    does not carry it. Keep the module in float32: it is small (48M parameters) and diffusion
    sampling accumulates rounding; use autocast for reduced-precision matmuls instead.
    """

    def __init__(self, cond_dim: int = 1103) -> None:
        super().__init__()
        self.cond_dim = cond_dim
        d = _LATENT
        self.rotary = RotaryEmbedding(d)
        self.time_mlp = nn.Sequential(SinusoidalTimeEmbedding(d), nn.Linear(d, 4 * d), nn.Mish())
        # One-element Sequentials: the checkpoint names these weights "<name>.0.*".
        self.to_time_cond = nn.Sequential(nn.Linear(4 * d, d))
        self.to_time_tokens = nn.Sequential(nn.Linear(4 * d, _TIME_TOKENS * d))
        draw = torch.empty if building_on_meta() else torch.randn  # a meta build takes the checkpoint's values
        self.null_cond_embed = nn.Parameter(draw(1, WINDOW, d))
        self.null_cond_hidden = nn.Parameter(draw(1, d))
        self.norm_cond = nn.LayerNorm(d)
        self.input_projection = nn.Linear(2 * MOTION_DIM, d)
        self.cond_encoder = nn.Sequential(*(ConditionEncoderLayer(self.rotary) for _ in range(_ENCODER_LAYERS)))
        self.cond_projection = nn.Linear(cond_dim, d)
        self.non_attn_cond_projection = nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d)
        )
        self.seqTransDecoder = DecoderStack([FiLMDecoderLayer(self.rotary) for _ in range(_DECODER_LAYERS)])
        self.final_layer = nn.Linear(d, MOTION_DIM)
        schedule = torch.empty(DIFFUSION_STEPS) if building_on_meta() else cosine_alphas_cumprod()
        self.register_buffer("alphas_cumprod", schedule, persistent=False)  # meta: init_non_persistent_buffers

    def init_non_persistent_buffers(self) -> None:
        """Recompute ``alphas_cumprod`` on the CPU (after a meta-device build: see checkpoints.build_network)."""
        self.alphas_cumprod = cosine_alphas_cumprod()

    # ---- condition side: once per window -------------------------------------------------

    def encode_condition(self, cond_frame: Tensor, cond: Tensor, null_cond: NullCond = False) -> LMDMCondition:
        """Everything of a pass that does not depend on ``x`` or ``t``, for N rows.

        ``null_cond`` replaces the condition tokens and pooled hidden by the learned null
        embeddings (per row when it is a mask); the reference frame is always used.
        """
        tokens, hidden, tables = self._encode(cond_frame, cond)
        if isinstance(null_cond, Tensor):
            drop = null_cond.to(device=tokens.device, dtype=torch.bool).reshape(-1, 1)
            tokens = torch.where(drop[:, :, None], self.null_cond_embed, tokens)
            hidden = torch.where(drop, self.null_cond_hidden, hidden)
        elif null_cond:
            tokens = self.null_cond_embed.expand_as(tokens)
            hidden = self.null_cond_hidden.expand_as(hidden)
        return self._condition(self._frame_term(cond_frame), tokens, hidden, tables)

    def encode_guidance(self, cond_frame: Tensor, cond: Tensor) -> LMDMCondition:
        """The 2N-row condition of classifier-free guidance: N conditional rows, then N null rows.

        The condition encoder runs on the N conditional rows only; the null rows need none.
        """
        tokens, hidden, tables = self._encode(cond_frame, cond)
        n = tokens.shape[0]
        tokens = torch.cat((tokens, self.null_cond_embed.expand(n, -1, -1)))
        hidden = torch.cat((hidden, self.null_cond_hidden.expand(n, -1)))
        return self._condition(self._frame_term(cond_frame).repeat(2, 1), tokens, hidden, tables)

    def _encode(self, cond_frame: Tensor, cond: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor]]:
        """Encoded condition tokens (N, 80, 512), their pooled hidden (N, 512), rotary tables."""
        self._check_condition(cond_frame, cond)
        tables = self.rotary.tables(WINDOW + _TIME_TOKENS)
        tokens = self.cond_projection(cond)
        for layer in self.cond_encoder:
            tokens = layer(tokens, _positions(tables, 0, WINDOW))
        return tokens, self.non_attn_cond_projection(tokens.mean(dim=1)), tables

    def _frame_term(self, cond_frame: Tensor) -> Tensor:
        # input_projection(cat(x, frame)) == W_x x + (W_f frame + b): the frame half is fixed
        # for the whole window, so it is projected once here instead of at every step.
        w_frame = self.input_projection.weight[:, MOTION_DIM:]
        return F.linear(cond_frame, w_frame, self.input_projection.bias)

    def _condition(
        self, frame_term: Tensor, tokens: Tensor, hidden: Tensor, tables: tuple[Tensor, Tensor]
    ) -> LMDMCondition:
        # LayerNorm is per token, so normalising the 80 condition tokens apart from the 2 time
        # tokens equals normalising the 82-token memory as a whole.
        memory = self.norm_cond(tokens)
        kv = [layer.memory_keys_values(memory, _positions(tables, 0, WINDOW)) for layer in self.seqTransDecoder.stack]
        keys, values = (torch.stack(parts) for parts in zip(*kv))
        return LMDMCondition(frame_term, hidden, keys, values, tables)

    def _check_condition(self, cond_frame: Tensor, cond: Tensor) -> None:
        if cond.ndim != 3 or cond.shape[1:] != (WINDOW, self.cond_dim):
            raise InputError(
                f"LMDM: cond has shape {tuple(cond.shape)}; expected (batch, {WINDOW}, {self.cond_dim}) per-frame "
                f"conditions (HuBERT features plus the control channels), one {WINDOW}-frame window at a time."
            )
        if cond_frame.ndim != 2 or cond_frame.shape != (cond.shape[0], MOTION_DIM):
            raise InputError(
                f"LMDM: cond_frame has shape {tuple(cond_frame.shape)}; expected ({cond.shape[0]}, {MOTION_DIM}) "
                f"packed motion vectors, one per row of cond."
            )

    # ---- per step ------------------------------------------------------------------------

    def time_condition(self, t: Tensor, condition: LMDMCondition) -> LMDMTimeCondition:
        """Timestep-dependent quantities for M rows: t (M,) int64, ``condition`` with M rows.

        Independent of ``x``: a sampler with a fixed schedule computes them for all its steps
        in one batch (rows = steps x N) and stacks them with :meth:`LMDMTimeCondition.stacked_steps`.
        """
        t_hidden = self.time_mlp(t)
        film = self.to_time_cond(t_hidden) + condition.hidden
        time_tokens = self.norm_cond(self.to_time_tokens(t_hidden).unflatten(-1, (_TIME_TOKENS, -1)))
        time_tables = _positions(condition.tables, WINDOW, WINDOW + _TIME_TOKENS)
        layers = self.seqTransDecoder.stack
        keys, values = zip(*(layer.memory_keys_values(time_tokens, time_tables) for layer in layers))
        modulations = torch.stack([layer.modulations(film) for layer in layers])
        return LMDMTimeCondition(modulations, torch.stack(keys), torch.stack(values))

    def denoise(
        self, x: Tensor, t: Tensor, condition: LMDMCondition, time: Optional[LMDMTimeCondition] = None
    ) -> Tensor:
        """One raw x0 prediction: x (N, 80, 265), t (N,) int64 -> (N, 80, 265).

        ``time`` is :meth:`time_condition` of (t, condition) when the caller precomputed it.
        """
        if time is None:
            time = self.time_condition(t, condition)
        frame_tables = _positions(condition.tables, 0, WINDOW)
        w_x = self.input_projection.weight[:, :MOTION_DIM]
        h = F.linear(x, w_x) + condition.frame_term[:, None, :]
        # Every layer's 82-token memory in one copy each for keys and values (two kernels a step,
        # not two per layer: the step's kernel count is what a live chunk's LMDM window costs).
        keys = torch.cat((condition.keys, time.keys), dim=2)
        values = torch.cat((condition.values, time.values), dim=2)
        for i, layer in enumerate(self.seqTransDecoder.stack):
            h = layer(h, keys[i], values[i], time.modulations[i], frame_tables)
        return self.final_layer(h)

    def guided_step(
        self, x: Tensor, t: Tensor, condition: LMDMCondition, time: Optional[LMDMTimeCondition] = None
    ) -> tuple[Tensor, Tensor]:
        """Classifier-free guided prediction as one 2N-row pass.

        Args:
            x: (N, 80, 265) noisy window.
            t: (N,) int64 timesteps.
            condition: from :meth:`encode_guidance` (2N rows).
            time: optional precomputed :meth:`time_condition` of (``t.repeat(2)``, condition).

        Returns:
            ``(pred_noise, x_start)``, each (N, 80, 265) float32: the guided x0
            ``unc + 2 (cond - unc)`` and the noise it implies at step t.
        """
        both = self.denoise(x.repeat(2, 1, 1), t.repeat(2), condition, time)
        cond_x0, uncond_x0 = both.float().chunk(2)
        x_start = uncond_x0 + (cond_x0 - uncond_x0) * GUIDANCE_WEIGHT
        return self.noise_from_x0(x.float(), t, x_start), x_start

    def noise_from_x0(self, x: Tensor, t: Tensor, x_start: Tensor) -> Tensor:
        """ε implied by x0 at step t: ``x / sqrt(1 - ᾱ) - x0 / sqrt(1/ᾱ - 1)`` (float32)."""
        a = self.alphas_cumprod.float()[t].reshape(-1, 1, 1)
        return torch.sqrt(1.0 / (1.0 - a)) * x - x_start / torch.sqrt(1.0 / a - 1)

    def guided(self, x: Tensor, cond_frame: Tensor, cond: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`guided_step` with the condition encoded on the spot (one-off calls)."""
        return self.guided_step(x, t, self.encode_guidance(cond_frame, cond))

    def forward(self, x: Tensor, cond_frame: Tensor, cond: Tensor, t: Tensor, null_cond: NullCond = False) -> Tensor:
        """One raw (unguided) x0 prediction, (N, 80, 265)."""
        return self.denoise(x, t, self.encode_condition(cond_frame, cond, null_cond))
