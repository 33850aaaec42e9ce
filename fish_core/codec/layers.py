"""Causal convolution building blocks of the codec, each carrying its left context between
chunks in a ``state`` dict (``State``): the last ``k - stride`` input samples of every conv.

Module names mirror the checkpoint's key layout (``.block``, ``.conv``); convs stored with weight
norm record its style in ``weight_norm_keys`` (folded at load by ``codec_checkpoint``).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .snake import fused_snake

# Checkpoint key suffixes of the two weight-norm styles: (g, v); weight = g * v / ||v||.
WN_PARAMETRIZATIONS = ("parametrizations.weight.original0", "parametrizations.weight.original1")
WN_LEGACY = ("weight_g", "weight_v")

State = dict  # module -> carried left context (tensor, (k, v) pair or position counter)


@contextmanager
def cudnn_flag(name: str, value: bool):
    """``torch.backends.cudnn.<name> = value`` for the block, back as it was after; no other
    flag is touched. ``torch.backends.cudnn.flags`` is not used: it sets every flag (reading
    ``allow_tf32`` raises where conv and RNN TF32 were set apart through the newer API). Where
    the flags are frozen (``torch.backends.disable_global_flags``) the block runs as they are."""
    cudnn = torch.backends.cudnn
    before = getattr(cudnn, name)
    switch = before != value
    if switch:
        try:
            setattr(cudnn, name, value)
        except RuntimeError:  # frozen flags
            switch = False
    try:
        yield
    finally:
        if switch:
            setattr(cudnn, name, before)


class Stateful:
    """Marker: ``forward(x, state)``, where ``state`` carries left context from the previous
    chunk."""


class Chain(Stateful, nn.Sequential):
    """nn.Sequential that hands ``state`` to the layers that need it."""

    def forward(self, x: Tensor, state: State) -> Tensor:
        for layer in self:
            x = layer(x, state) if isinstance(layer, Stateful) else layer(x)
        return x


class Block(Stateful, nn.Module):
    """A chain stored as ``.block`` (mirrors the checkpoint's ``...block.N...`` keys)."""

    def __init__(self, *layers: nn.Module):
        super().__init__()
        self.block = Chain(*layers)

    def forward(self, x: Tensor, state: State) -> Tensor:
        return self.block(x, state)


class CausalConv1d(Stateful, nn.Module):
    """Conv1d zero-padded on the left by (k-1)*d+1-stride; output length ceil(L / stride)."""

    def __init__(self, c_in, c_out, kernel_size, stride=1, dilation=1, groups=1, weight_norm=False):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel_size, stride=stride, dilation=dilation,
                              groups=groups)
        if weight_norm:
            self.conv.weight_norm_keys = WN_PARAMETRIZATIONS
        self.stride = stride
        self.context = (kernel_size - 1) * dilation + 1 - stride

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, C_in, L] -> [B, C_out, ceil(L/s)]
        # The reference's "extra right padding" rule; with a left pad of k_eff - s it reduces to
        # padding L to a multiple of the stride. Chunks are whole frames, so within a stream it
        # never fires (a standalone odd length is necessarily the end of its stream).
        extra = -x.shape[-1] % self.stride
        if self.context > 0:
            prev = state.get(self)
            if prev is None:  # stream start: zeros, as the reference pads
                prev = x.new_zeros(x.shape[0], x.shape[1], self.context)
            x = torch.cat([prev, x], dim=-1)
            state[self] = x[..., x.shape[-1] - self.context:].clone()  # not a view of the chunk
        return self.conv(F.pad(x, (0, extra)) if extra else x)


class CausalConvTranspose1d(Stateful, nn.Module):
    """ConvTranspose1d whose right overhang (k - stride) is dropped: output length L * stride."""

    def __init__(self, c_in, c_out, kernel_size, stride, weight_norm=False):
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel_size, stride=stride)
        if weight_norm:
            self.conv.weight_norm_keys = WN_PARAMETRIZATIONS
        self.stride = stride
        self.context = -(-(kernel_size - stride) // stride)  # input steps whose overhang reaches us

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, C_in, L] -> [B, C_out, L*s]
        length = x.shape[-1] * self.stride
        prev = state.get(self)  # None at stream start: nothing overhangs from the left
        if prev is not None:
            x = torch.cat([prev, x], dim=-1)
        if self.context > 0:
            state[self] = x[..., -self.context:].clone()
        skip = 0 if prev is None else prev.shape[-1] * self.stride
        return self.conv(x)[..., skip:skip + length]


def version(t: Tensor) -> int | None:
    """``t``'s version counter (bumped by each in-place write), or None for a tensor made under
    ``torch.inference_mode`` (it has none: ComfyUI loads and runs models in that mode)."""
    return None if t.is_inference() else t._version


class Snake(nn.Module):
    """x + sin(alpha * x)^2 / (alpha + 1e-9), per channel: one kernel on CUDA (``snake``), the
    eager formula on the CPU."""

    compiled = None  # torch.compile(snake), set by Codec.compile_activations

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))
        self._inverse: tuple | None = None  # (alpha, its version, dtype, 1 / (alpha + 1e-9))

    def inverse_for(self, dtype: torch.dtype) -> Tensor:
        """``1 / (alpha + 1e-9)`` in ``dtype``, computed once per weights and dtype: again only
        when ``alpha`` is replaced, cast or moved (``.to``, ``set_precision``, a load) or changed
        in place through the parameter (its version counter)."""
        alpha, cached = self.alpha, self._inverse
        if (cached is None or cached[0].data_ptr() != alpha.data_ptr()
                or cached[0].device != alpha.device or cached[0].dtype != alpha.dtype
                or cached[1] != version(alpha) or cached[2] != dtype):
            # 1e-9 in fp32: in fp16 it would round to 0 (and a zero alpha divide by zero)
            inverse = (alpha.detach().float() + 1e-9).reciprocal().to(dtype)
            # the detached alpha shares the parameter's storage (kept alive, so its address is
            # never another alpha's) and its version counter
            cached = self._inverse = (alpha.detach(), version(alpha), dtype, inverse)
        return cached[3]

    def forward(self, x: Tensor) -> Tensor:  # [B, C, L]
        inverse = self.inverse_for(x.dtype)
        if self.compiled is not None:
            return self.compiled(x, self.alpha, inverse)
        return fused_snake(x, self.alpha, inverse)


class ResidualUnit(Block):
    """x + conv1x1(snake(conv7_dilated(snake(x))))."""

    def __init__(self, dim: int, dilation: int):
        super().__init__(
            Snake(dim),
            CausalConv1d(dim, dim, 7, dilation=dilation, weight_norm=True),
            Snake(dim),
            CausalConv1d(dim, dim, 1, weight_norm=True),
        )

    def forward(self, x: Tensor, state: State) -> Tensor:
        return x + self.block(x, state)


class ConvNeXtBlock(Stateful, nn.Module):
    """x + gamma * pw2(gelu(pw1(layernorm(causal depthwise conv k7(x)))))."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor, state: State) -> Tensor:  # [B, C, L]
        y = self.dwconv(x, state).transpose(1, 2)  # [B, L, C]
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).transpose(1, 2)

