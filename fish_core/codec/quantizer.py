"""The codec's quantizer: downsample x4, pre transformer, one semantic VQ + a residual RVQ on
encode; VQ lookups, post transformer and upsample x4 on decode."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import CodecConfig
from .layers import (WN_LEGACY, CausalConv1d, CausalConvTranspose1d, Chain, ConvNeXtBlock,
                     State)
from .transformer import WindowedTransformer


def _pointwise_wn(c_in: int, c_out: int) -> nn.Conv1d:
    """Weight-normed 1x1 conv (checkpoint layout); applied channels-last by ``_project``."""
    conv = nn.Conv1d(c_in, c_out, 1)
    conv.weight_norm_keys = WN_LEGACY
    return conv


def _project(conv: nn.Conv1d, x: Tensor) -> Tensor:  # [B, T, C_in] -> [B, T, C_out]
    return F.linear(x, conv.weight[..., 0], conv.bias)


class VectorQuantizer(nn.Module):
    """One codebook: project to codebook_dim, nearest row by cosine, project the raw row back."""

    def __init__(self, dim: int, size: int, codebook_dim: int):
        super().__init__()
        self.in_proj = _pointwise_wn(dim, codebook_dim)
        self.out_proj = _pointwise_wn(codebook_dim, dim)
        self.codebook = nn.Embedding(size, codebook_dim)

    def quantize(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, D, T] -> codes [B, T], quantized [B, D, T]."""
        z_e = _project(self.in_proj, x.transpose(1, 2))  # [B, T, d]
        bsz, length, dim = z_e.shape
        enc = F.normalize(z_e.reshape(-1, dim))
        book = F.normalize(self.codebook.weight)
        # Squared distance of unit vectors (the reference's formula; argmin = max cosine).
        dist = enc.pow(2).sum(1, keepdim=True) - 2 * enc @ book.t() + book.pow(2).sum(1)[None]
        codes = (-dist).max(1).indices.view(bsz, length)
        z_q = F.embedding(codes, self.codebook.weight)  # [B, T, d]
        # z_e + (z_q - z_e) is the reference's straight-through form; it differs from z_q by
        # rounding, and the residual chain (hence later codes) depends on it.
        return codes, _project(self.out_proj, z_e + (z_q - z_e)).transpose(1, 2)

    def lookup(self, codes: Tensor) -> Tensor:  # [B, T] -> [B, D, T]
        return _project(self.out_proj, F.embedding(codes, self.codebook.weight)).transpose(1, 2)


class ResidualVQ(nn.Module):
    def __init__(self, dim: int, n_codebooks: int, size: int, codebook_dim: int):
        super().__init__()
        self.quantizers = nn.ModuleList(VectorQuantizer(dim, size, codebook_dim)
                                        for _ in range(n_codebooks))

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x [B, D, T] -> codes [B, n, T], residual left after all stages [B, D, T]."""
        codes = []
        for vq in self.quantizers:
            idx, z_q = vq.quantize(x)
            x = x - z_q
            codes.append(idx)
        return torch.stack(codes, dim=1), x

    def decode(self, codes: Tensor) -> Tensor:  # [B, n, T] -> [B, D, T]
        z = self.quantizers[0].lookup(codes[:, 0])
        for i in range(1, len(self.quantizers)):
            z = z + self.quantizers[i].lookup(codes[:, i])
        return z


class Quantizer(nn.Module):
    """Downsample x4, pre transformer, semantic VQ + residual RVQ; decode mirrors it."""

    def __init__(self, config: CodecConfig):
        super().__init__()
        dim = config.latent_dim
        self.semantic_quantizer = ResidualVQ(dim, 1, config.semantic_codebook_size,
                                             config.codebook_dim)
        self.quantizer = ResidualVQ(dim, config.n_codebooks, config.codebook_size,
                                    config.codebook_dim)
        self.downsample = Chain(*(Chain(CausalConv1d(dim, dim, f, stride=f), ConvNeXtBlock(dim))
                                  for f in config.downsample_factors))
        self.upsample = Chain(*(Chain(CausalConvTranspose1d(dim, dim, f, stride=f),
                                      ConvNeXtBlock(dim))
                                for f in reversed(config.downsample_factors)))
        self.pre_module = WindowedTransformer(dim, config.quantizer_transformer)
        self.post_module = WindowedTransformer(dim, config.quantizer_transformer)

    def encode(self, z: Tensor, state: State) -> Tensor:  # [B, D, 4n] -> codes [B, 10, n]
        z = self.pre_module(self.downsample(z, state), state)
        semantic, residual = self.semantic_quantizer.encode(z.to(_dtype(self.semantic_quantizer)))
        acoustic, _ = self.quantizer.encode(residual)
        return torch.cat([semantic, acoustic], dim=1)

    def decode(self, codes: Tensor, state: State) -> Tensor:
        # in-range codes [B, 10, n] -> [B, D, 4n]
        z = self.semantic_quantizer.decode(codes[:, :1]) + self.quantizer.decode(codes[:, 1:])
        return self.upsample(self.post_module(z.to(_dtype(self.post_module)), state), state)


def _dtype(module: nn.Module) -> torch.dtype:
    """The precision ``module`` runs in (that of its first parameter): the codec's encode and
    decode paths may run in different precisions (``Codec.set_precision``)."""
    return next(module.parameters()).dtype

