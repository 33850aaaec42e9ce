"""Hyper-parameters of the S2-Pro codec (``CodecConfig``) and how ``codec_config.json`` (keys
mirroring the reference's ``modded_dac_vq.yaml``) overrides them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

CONFIG_NAME = "codec_config.json"


class CodecLoadError(ValueError):
    """codec.pth (or codec_config.json) cannot be loaded into the codec."""


@dataclass(frozen=True)
class TransformerConfig:
    n_layer: int
    n_head: int
    head_dim: int
    intermediate_size: int
    window: int  # causal attention window, the query position included
    rope_base: float = 10000.0
    norm_eps: float = 1e-5


@dataclass(frozen=True)
class CodecConfig:
    """Hyper-parameters; the defaults are the real S2-Pro codec (``modded_dac_vq.yaml``)."""

    sample_rate: int = 44100
    encoder_dim: int = 64
    encoder_rates: tuple = (2, 4, 8, 8)
    encoder_transformer_layers: tuple = (0, 0, 0, 4)
    latent_dim: int = 1024
    decoder_dim: int = 1536
    decoder_rates: tuple = (8, 8, 4, 2)
    # Encoder transformers: n_head = dim // 64 and FFN = 3 * dim are fixed by the reference; these
    # come from its `transformer_general_config` (window 512 unless that config sets one).
    encoder_window: int = 512
    head_dim: int = 64
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    # Quantizer: pre_module and post_module share this shape (a yaml anchor in the reference).
    quantizer_transformer: TransformerConfig = field(
        default_factory=lambda: TransformerConfig(8, 16, 64, 3072, 128))
    downsample_factors: tuple = (2, 2)
    n_codebooks: int = 9
    codebook_size: int = 1024
    semantic_codebook_size: int = 4096
    codebook_dim: int = 8

    @property
    def frame_length(self) -> int:
        return math.prod(self.encoder_rates) * math.prod(self.downsample_factors)

    def encoder_transformer(self, dim: int, n_layer: int) -> TransformerConfig:
        return TransformerConfig(n_layer, dim // 64, self.head_dim, 3 * dim, self.encoder_window,
                                 self.rope_base, self.norm_eps)

    @classmethod
    def from_json(cls, path) -> "CodecConfig":
        """Defaults overridden by a ``codec_config.json`` (keys mirror the reference yaml)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CodecLoadError(f"cannot read codec config {path}: {e}") from None
        return cls().with_json(data, str(path))

    def with_json(self, data: dict, name: str = "codec config") -> "CodecConfig":
        out = {k: data[k] for k in ("sample_rate", "encoder_dim", "latent_dim", "decoder_dim")
               if data.get(k) is not None}
        for key in ("encoder_rates", "encoder_transformer_layers", "decoder_rates"):
            if data.get(key) is not None:
                out[key] = tuple(data[key])
        general = data.get("transformer_general_config") or {}
        for key in ("head_dim", "rope_base", "norm_eps"):
            if key in general:
                out[key] = general[key]
        encoder = data.get("encoder_transformer") or {}
        window = encoder.get("window_size", general.get("window_size"))
        if window is not None:
            out["encoder_window"] = window
        out.update(self._quantizer_json(data.get("quantizer") or {}, name))
        return replace(self, **out)

    def _quantizer_json(self, quant: dict, name: str) -> dict:
        """The fields a config's ``quantizer`` section overrides."""
        out = {k: quant[k] for k in ("n_codebooks", "codebook_size", "semantic_codebook_size",
                                     "codebook_dim") if k in quant}
        if "downsample_factor" in quant:
            out["downsample_factors"] = tuple(quant["downsample_factor"])
        if isinstance(quant.get("pre_module"), dict):
            pre = _transformer_from_json(quant["pre_module"], self.quantizer_transformer)
            post = quant.get("post_module")
            if isinstance(post, dict) and _transformer_from_json(post, pre) != pre:
                raise CodecLoadError(f"{name}: quantizer pre_module and post_module must have the "
                                     f"same shape and window")
            out["quantizer_transformer"] = pre
        return out


def _transformer_from_json(module: dict, base: TransformerConfig) -> TransformerConfig:
    params = module.get("config") or {}
    return replace(
        base,
        n_layer=params.get("n_layer", base.n_layer),
        n_head=params.get("n_head", base.n_head),
        head_dim=params.get("head_dim", base.head_dim),
        intermediate_size=params.get("intermediate_size", base.intermediate_size),
        window=module.get("window_size", base.window),
        rope_base=params.get("rope_base", base.rope_base),
        norm_eps=params.get("norm_eps", base.norm_eps),
    )

