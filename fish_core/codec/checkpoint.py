"""Read ``codec.pth`` into a codec: read it with our restricted reader (``pth.py``: no pickle
is ever run by Python's or torch's unpickler, on any torch), unwrap training checkpoints, fold
weight norm (either style) once, read the architecture from the shapes, and stream the weights
in through the one shape-checked loader (``weights.StreamedLoad``)."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from .config import CodecConfig, CodecLoadError
from .layers import WN_LEGACY, WN_PARAMETRIZATIONS
from .pth import read_state_dict
from ..loading.weights import StreamedLoad

LABELS = {"missing": "missing keys", "unexpected": "unexpected keys",
          "misshaped": "shape mismatches"}


def read_checkpoint(path) -> dict:
    """``codec.pth``'s object, read by ``pth.read_state_dict`` (a state dict's opcodes and
    globals only; anything else is refused with a ``CodecLoadError`` saying what)."""
    path = Path(path)
    if not path.is_file():
        raise CodecLoadError(f"codec checkpoint not found: {path}")
    return read_state_dict(path)


def normalize_keys(obj) -> dict:
    """Unwrap ``{"state_dict": ...}`` and keep only ``generator.*`` (prefix stripped) when present,
    as the reference does for training checkpoints."""
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise CodecLoadError(f"codec checkpoint must hold a state dict, got {type(obj).__name__}")
    names = [k for k in obj if not isinstance(k, str)]
    if names:
        raise CodecLoadError(f"codec checkpoint's state dict must be keyed by names (strings), "
                             f"got a key of type {type(names[0]).__name__}")
    if any(k.startswith("generator.") for k in obj):
        obj = {k[len("generator."):]: v for k, v in obj.items() if k.startswith("generator.")}
    bad = [k[:100] for k, v in obj.items() if not isinstance(v, Tensor)]
    if bad:
        raise CodecLoadError(f"codec checkpoint has non-tensor entries: {bad[:10]}")
    return obj


def fold_weight_norm(state_dict: dict) -> dict:
    """Replace every (g, v) pair of either style with ``weight = g * v / ||v||`` (norm over all dims
    but 0), computed once in fp32. Unpaired halves are left for the key check to report."""
    out = dict(state_dict)
    for g_suffix, v_suffix in (WN_PARAMETRIZATIONS, WN_LEGACY):
        for key in [k for k in state_dict if k.endswith("." + g_suffix)]:
            prefix = key[: -len(g_suffix)]
            if prefix + v_suffix in state_dict:
                g, v = out.pop(key), out.pop(prefix + v_suffix)
                if v.ndim < 2 or g.numel() != v.shape[0]:
                    raise CodecLoadError(
                        f"codec checkpoint: {key[:100]} (shape {list(g.shape)[:8]}) and "
                        f"{v_suffix} (shape {list(v.shape)[:8]}) are no weight-norm pair: "
                        "expected g with one value per row of a v of 2 or more dims")
                g = g.float().reshape(v.shape[0], *(1,) * (v.ndim - 1))
                out[prefix + "weight"] = torch._weight_norm(v.float(), g, 0)
    return out


MAX_COUNT = 64  # blocks, layers or codebooks of one kind (S2-Pro's codec: at most 9)
COUNTED = ("encoder.block.", "decoder.model.", "quantizer.downsample.",
           "quantizer.quantizer.quantizers.", "quantizer.pre_module.layers.")


def index_after(key: str, prefix: str) -> tuple[int | None, str]:
    """``i`` and the rest when ``key`` is ``prefix + "i." + rest`` (``i`` written plainly)."""
    if not key.startswith(prefix):
        return None, ""
    index, dot, rest = key[len(prefix):].partition(".")
    if not (dot and index.isascii() and index.isdigit() and len(index) < 8
            and str(int(index)) == index):
        return None, ""
    return int(index), rest


class Shapes:
    """The weights' shapes and, per counted prefix, the indices its keys hold (one pass)."""

    def __init__(self, weights: dict):
        self.weights = weights
        self.indices: dict[str, set[int]] = {}  # "prefix." -> the i of every "prefix.i." key
        for key in weights:
            for prefix in COUNTED:
                index, rest = index_after(key, prefix)
                if index is None:
                    continue
                self.indices.setdefault(prefix, set()).add(index)
                if prefix == "encoder.block.":  # encoder.block.i.block.5.layers.j.
                    layer, _ = index_after(rest, "block.5.layers.")
                    if layer is not None:
                        self.indices.setdefault(f"{prefix}{index}.block.5.layers.",
                                                set()).add(layer)

    def __call__(self, key: str, rank: int = 3) -> tuple | None:
        """The shape of ``key``; None when absent or not of the expected rank."""
        found = self.weights.get(key)
        return tuple(found.shape) if found is not None and found.ndim == rank else None

    def count(self, prefix: str) -> int:
        """How many consecutive indices i have some key starting ``prefix + "i."``."""
        found, i = self.indices.get(prefix, ()), 0
        while i in found:
            i += 1
            if i > MAX_COUNT:  # each would be built: 2000 layers take seconds and 120 MB
                raise CodecLoadError(f"codec checkpoint: more than {MAX_COUNT} "
                                     f"'{prefix}<i>.' blocks; a codec has far fewer")
        return i


def infer_config(weights: dict, base: CodecConfig) -> CodecConfig:
    """Channel counts, strides, layer counts and codebook sizes read from (folded) weight shapes."""
    shape = Shapes(weights)
    out = {**encoder_sizes(shape), **decoder_sizes(shape), **quantizer_sizes(shape)}
    q = base.quantizer_transformer
    prefix = "quantizer.pre_module.layers."
    wo = shape(prefix + "0.attention.wo.weight", 2)
    w1 = shape(prefix + "0.feed_forward.w1.weight", 2)
    if wo and w1:
        q = replace(q, n_layer=shape.count(prefix), n_head=wo[1] // q.head_dim,
                    intermediate_size=w1[0])
    return replace(base, quantizer_transformer=q, **out)


def encoder_sizes(shape: Shapes) -> dict:
    out = {}
    if shape("encoder.block.0.conv.weight"):
        out["encoder_dim"] = shape("encoder.block.0.conv.weight")[0]
    n_enc = shape.count("encoder.block.") - 3  # first conv, blocks, Snake, last conv
    if n_enc > 0:
        kernels = [shape(f"encoder.block.{i}.block.4.conv.weight") for i in range(1, n_enc + 1)]
        if all(kernels):
            out["encoder_rates"] = tuple(k[-1] // 2 for k in kernels)
            out["encoder_transformer_layers"] = tuple(
                shape.count(f"encoder.block.{i}.block.5.layers.") for i in range(1, n_enc + 1))
        if shape(f"encoder.block.{n_enc + 2}.conv.weight"):
            out["latent_dim"] = shape(f"encoder.block.{n_enc + 2}.conv.weight")[0]
    return out


def decoder_sizes(shape: Shapes) -> dict:
    out = {}
    if shape("decoder.model.0.conv.weight"):
        out["decoder_dim"] = shape("decoder.model.0.conv.weight")[0]
    kernels = [shape(f"decoder.model.{i}.block.1.conv.weight")
               for i in range(1, shape.count("decoder.model.") - 2)]
    if kernels and all(kernels):
        out["decoder_rates"] = tuple(k[-1] // 2 for k in kernels)
    return out


def quantizer_sizes(shape: Shapes) -> dict:
    out = {}
    kernels = [shape(f"quantizer.downsample.{i}.0.conv.weight")
               for i in range(shape.count("quantizer.downsample."))]
    if kernels and all(kernels):
        out["downsample_factors"] = tuple(k[-1] for k in kernels)
    n_res = shape.count("quantizer.quantizer.quantizers.")
    book = shape("quantizer.quantizer.quantizers.0.codebook.weight", 2)
    semantic = shape("quantizer.semantic_quantizer.quantizers.0.codebook.weight", 2)
    if n_res and book:
        out.update(n_codebooks=n_res, codebook_size=book[0], codebook_dim=book[1])
    if semantic:
        out["semantic_codebook_size"] = semantic[0]
    return out


def load_weights(codec: nn.Module, weights: dict, name: str, device, dtype: torch.dtype) -> None:
    """Place the folded ``weights`` into ``codec`` (built on meta), each cast to ``dtype`` on
    ``device``; one ``CodecLoadError`` lists every missing, unexpected or mis-shaped key."""
    load = StreamedLoad(codec, labels=LABELS)

    def place(_: str, tensor: Tensor) -> Tensor:
        return tensor.to(device=device, dtype=dtype)

    for key, tensor in weights.items():
        load.take(key, key, tensor, place)
    load.finish(f"{name} does not match the codec architecture (inferred: "
                f"{asdict(codec.config)}). Weight-normed `.weight` keys may be stored as "
                f"{WN_PARAMETRIZATIONS} or {WN_LEGACY} pairs.", CodecLoadError)
