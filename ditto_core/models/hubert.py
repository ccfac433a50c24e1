"""HuBERT: raw 16 kHz speech -> 1024-wide rows at 50 Hz, batched over windows.

The speech encoder behind Ditto's ``hubert_streaming_fix_kv.onnx`` (HuBERT-large): a stack of
1-D convolutions turns samples into 512-channel frames (receptive field 400 samples, hop 320),
a linear projection widens them to the transformer width, a grouped convolution adds relative
positions, and a stack of self-attention layers mixes the frames of one window. The output is
the last hidden state. :mod:`.hubert_onnx_weights` reads the weights of such a graph.

Two layouts exist (:class:`HubertConfig`): HuBERT-large ("stable layer norm") normalises every
conv layer's output over channels and runs a pre-norm transformer ending in a layer norm;
HuBERT-base group-normalises the first conv layer only and runs a post-norm transformer whose
layer norm comes first.

Half precision: layer norms are computed in float32 and rounded back (the conv front-end's
activations are large before their norms), attention uses ``scaled_dot_product_attention``
(its softmax accumulates in float32); everything else runs in the module's dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

ExtractorNorm = Literal["layer", "group"]

# Not cuDNN's attention, PyTorch's first choice on Hopper: it builds an execution plan at a
# process's first call of each shape, which a new process's first clip waits for; the flash and
# memory-efficient kernels need no plan (math is the CPU's).
_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@dataclass(frozen=True)
class HubertConfig:
    """Sizes and layout of a HuBERT; the defaults are HuBERT-large (315 M parameters)."""

    hidden_size: int = 1024
    num_layers: int = 24
    num_heads: int = 16
    ffn_size: int = 4096
    conv_channels: tuple[int, ...] = (512,) * 7
    conv_kernels: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_strides: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    conv_bias: bool = True
    extractor_norm: ExtractorNorm = "layer"  # "layer": every conv layer; "group": the first only
    pre_norm: bool = True  # layer norm before attention / feed-forward (HuBERT-large)
    pos_conv_kernel: int = 128
    pos_conv_groups: int = 16
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if not len(self.conv_channels) == len(self.conv_kernels) == len(self.conv_strides) > 0:
            raise ValueError(f"{self}: conv_channels, conv_kernels and conv_strides need one entry per conv layer")
        if self.hidden_size % self.num_heads or self.hidden_size % self.pos_conv_groups:
            raise ValueError(f"{self}: hidden_size must divide into num_heads and pos_conv_groups")
        if self.extractor_norm not in ("layer", "group"):
            raise ValueError(f"{self}: extractor_norm must be 'layer' or 'group'")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def num_rows(self, num_samples: int) -> int:
        """Output rows for ``num_samples`` input samples (20 for Ditto's 6480-sample window)."""
        for kernel, stride in zip(self.conv_kernels, self.conv_strides):
            num_samples = (num_samples - kernel) // stride + 1
        return num_samples


def _layer_norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    """``norm(x)`` computed in float32 whatever the dtype of ``x``, returned in that dtype."""
    weight = None if norm.weight is None else norm.weight.float()
    bias = None if norm.bias is None else norm.bias.float()
    return F.layer_norm(x.float(), norm.normalized_shape, weight, bias, norm.eps).to(x.dtype)


class ConvLayer(nn.Module):
    """Conv1d -> optional channel norm -> GELU. Shape: (B, C_in, T) -> (B, C_out, T')."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, bias: bool,
                 norm: Literal["layer", "group", "none"], eps: float) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride=stride, bias=bias)
        self.norm_kind = norm
        if norm == "layer":
            self.norm: nn.Module = nn.LayerNorm(c_out, eps=eps)
        elif norm == "group":  # one group per channel: each channel normalised over time
            self.norm = nn.GroupNorm(c_out, c_out, eps=eps)
        else:
            self.norm = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        if self.norm_kind == "layer":
            x = _layer_norm(self.norm, x.transpose(1, 2)).transpose(1, 2)
        elif self.norm_kind == "group":
            x = F.group_norm(x.float(), self.norm.num_groups, self.norm.weight.float(),
                             self.norm.bias.float(), self.norm.eps).to(x.dtype)
        return F.gelu(x)


class FeatureExtractor(nn.Module):
    """Raw samples (B, S) -> conv features (B, C, T)."""

    def __init__(self, config: HubertConfig) -> None:
        super().__init__()
        widths = (1, *config.conv_channels)
        layers = []
        for i, (kernel, stride) in enumerate(zip(config.conv_kernels, config.conv_strides)):
            norm = "layer" if config.extractor_norm == "layer" else ("group" if i == 0 else "none")
            layers.append(ConvLayer(widths[i], widths[i + 1], kernel, stride, config.conv_bias, norm,
                                    config.layer_norm_eps))
        self.layers = nn.ModuleList(layers)

    def forward(self, samples: Tensor) -> Tensor:
        x = samples.unsqueeze(1)
        for layer in self.layers:
            x = layer(x)
        return x


class FeatureProjection(nn.Module):
    """Conv features (B, T, C) -> layer norm -> linear -> (B, T, hidden)."""

    def __init__(self, config: HubertConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.conv_channels[-1], eps=config.layer_norm_eps)
        self.linear = nn.Linear(config.conv_channels[-1], config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(_layer_norm(self.norm, x))


class PositionalConvEmbedding(nn.Module):
    """Grouped conv over time whose output is added to the frames: (B, T, hidden) -> same.

    The weight is the effective one (weight norm ``g * v / ||v||`` already applied). An even
    kernel with ``kernel // 2`` padding yields one frame too many; the last one is dropped.
    """

    def __init__(self, config: HubertConfig) -> None:
        super().__init__()
        kernel = config.pos_conv_kernel
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, kernel, padding=kernel // 2,
                              groups=config.pos_conv_groups)
        self.trim = 1 if kernel % 2 == 0 else 0

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x.transpose(1, 2))
        if self.trim:
            y = y[:, :, : -self.trim]
        return F.gelu(y).transpose(1, 2)


class SelfAttention(nn.Module):
    """Multi-head self-attention over all frames of a window: (B, T, hidden) -> same."""

    def __init__(self, config: HubertConfig) -> None:
        super().__init__()
        width = config.hidden_size
        self.num_heads = config.num_heads
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        batch, time, width = x.shape

        def heads(t: Tensor) -> Tensor:
            return t.view(batch, time, self.num_heads, width // self.num_heads).transpose(1, 2)

        context = F.scaled_dot_product_attention(heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x)))
        return self.out_proj(context.transpose(1, 2).reshape(batch, time, width))


class FeedForward(nn.Module):
    """Linear -> GELU -> linear: (B, T, hidden) -> same."""

    def __init__(self, config: HubertConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_size)
        self.fc2 = nn.Linear(config.ffn_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderLayer(nn.Module):
    """One transformer layer, pre-norm or post-norm: (B, T, hidden) -> same."""

    def __init__(self, config: HubertConfig) -> None:
        super().__init__()
        self.pre_norm = config.pre_norm
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        if self.pre_norm:
            x = x + self.attention(_layer_norm(self.attention_norm, x))
            return x + self.feed_forward(_layer_norm(self.ffn_norm, x))
        x = _layer_norm(self.attention_norm, x + self.attention(x))
        return _layer_norm(self.ffn_norm, x + self.feed_forward(x))


class Encoder(nn.Module):
    """Positions + transformer layers + the encoder's own layer norm (after the layers when
    pre-norm, before them when post-norm): (B, T, hidden) -> same."""

    def __init__(self, config: HubertConfig) -> None:
        super().__init__()
        self.pre_norm = config.pre_norm
        self.pos_conv = PositionalConvEmbedding(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.pos_conv(x)
        if not self.pre_norm:
            x = _layer_norm(self.norm, x)
        for layer in self.layers:
            x = layer(x)
        return _layer_norm(self.norm, x) if self.pre_norm else x


class Hubert(nn.Module):
    """HuBERT on equal-length windows of raw speech, batch axis first.

    Shape:
        - samples: (B, S) float, 16 kHz, unnormalised (as Ditto feeds its ONNX model).
        - returns (B, config.num_rows(S), hidden_size), the dtype of the weights.
    """

    def __init__(self, config: HubertConfig = HubertConfig()) -> None:
        super().__init__()
        self.config = config
        self.feature_extractor = FeatureExtractor(config)
        self.feature_projection = FeatureProjection(config)
        self.encoder = Encoder(config)

    def forward(self, samples: Tensor) -> Tensor:
        x = self.feature_extractor(samples.to(self.feature_projection.linear.weight.dtype))
        with sdpa_kernel(_ATTENTION_BACKENDS):
            return self.encoder(self.feature_projection(x.transpose(1, 2)))
