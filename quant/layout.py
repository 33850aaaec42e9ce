"""The community FP8 checkpoint layout (``drbaph/s2-pro-fp8``, ``AEmotionStudio/…-fp8``), as
plain tensor names and tensors: no model, no files.

``<name>`` holds float8_e4m3fn codes ``[N, K]`` and ``<name>.scale`` its fp32 ``[N, 1]`` row
scales (``<name>`` = ``layers.3.attention.wqkv.weight`` or its HF form); everything else is
bf16; ``_buf.*`` entries (the reference's freqs_cis / causal_mask buffers) are ignored. A
checkpoint is FP8 when one of its tensors is float8_e4m3fn, whatever its folder is called.

Our extension: the embedding tables may be stored the same way, ``[V, D]`` codes and ``[V, 1]``
scales. The community loaders expect them in bf16, so that is not the default.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .fp8 import FP8, quantize_rows

BUFFER_PREFIX = "_buf."
SCALE_SUFFIX = ".scale"
STORED_DTYPE = "F8_E4M3"  # float8_e4m3fn as a safetensors header names it
INFO_FILE = "quantization_info.json"
METHOD = "per_row_symmetric_fp8"
# Files copied next to an exported checkpoint (tokenizer, codec, licence).
COPIED = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "chat_template*",
          "vocab*", "merges.txt", "generation_config.json", "codec.pth", "codec_config.json",
          "LICENSE*", "README*")


def weight_of_scale(name: str) -> str | None:
    """``"x.weight.scale"`` → ``"x.weight"``; None for a name that is not a scale."""
    return name[: -len(SCALE_SUFFIX)] if name.endswith(SCALE_SUFFIX) else None


def scale_problem(tensor: Tensor, rows: int) -> str | None:
    """Why ``tensor`` is not a valid row scale for a ``[rows, K]`` weight (None if it is)."""
    if (tuple(tensor.shape) not in ((rows, 1), (rows,)) or not tensor.is_floating_point()
            or tensor.dtype == FP8):
        return f"{tuple(tensor.shape)} {tensor.dtype}, expected ({rows}, 1) float32"
    if not bool(torch.isfinite(tensor).all()):
        return "holds inf or NaN"
    return None


def stored_rows(key: str, tensor: Tensor) -> list[tuple[str, Tensor]]:
    """A weight stored under ``key`` as e4m3 codes and its ``key + ".scale"``."""
    q, scale = quantize_rows(tensor)
    return [(key, q), (key + SCALE_SUFFIX, scale)]


def export_info(*, names: str, quantized: list[str], skipped: list[str], tables: list[str],
                fp8_params: int, bf16_params: int, total_bytes: int, files: list[str]) -> dict:
    """``quantization_info.json`` of an exported checkpoint (layer names without ``.weight``)."""
    return {
        "method": METHOD,
        "weight_dtype": "float8_e4m3fn",
        "scale": "float32 [out_features, 1] = max(abs(row)) / 448 (all-zero rows: 1)",
        "dequantize": "(weight.float() * scale).to(activation dtype)",
        "activation_dtype": "bfloat16",
        "other_tensors": "bfloat16",
        "fp8_embeddings": sorted(tables),
        "tensor_names": names,
        "num_quantized_layers": len(quantized),
        "skipped_layers": sorted(skipped),
        "fp8_params": fp8_params,
        "bf16_params": bf16_params,
        "total_bytes": total_bytes,
        "files": files,
        "torch_version": torch.__version__.split("+")[0],
        "tool": "sailfish quant export",
    }
