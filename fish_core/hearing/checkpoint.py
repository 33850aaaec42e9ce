"""Loading a Qwen3-ForcedAligner / Qwen3-ASR checkpoint folder: ``config.json`` and the single
``model.safetensors`` with the real tensor names (``thinker.audio_tower.*``,
``thinker.model.*``, ``thinker.lm_head.weight``), every name and shape checked, mismatches
reported together. Weights are bf16 on disk; they are cast to the dtype asked for
(float32 on a CPU by default, bf16 or fp16 on a GPU)."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors import safe_open

from ..loading.weights import StreamedLoad
from .config import HearingConfig
from .thinker import Thinker

WEIGHTS = "model.safetensors"
PREFIX = "thinker."
# Stored (after "thinker.") → ours: the text MLP is engine.layers.FeedForward (w1, w3, w2).
RENAMES = ((re.compile(r"\.mlp\.gate_proj\."), ".mlp.w1."),
           (re.compile(r"\.mlp\.up_proj\."), ".mlp.w3."),
           (re.compile(r"\.mlp\.down_proj\."), ".mlp.w2."))
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


class HearingCheckpointError(ValueError):
    """The folder is not a loadable Qwen3-ASR-family checkpoint (the message says why)."""


def internal_name(stored: str) -> str | None:
    """``thinker.model.layers.0.mlp.gate_proj.weight`` → ``model.layers.0.mlp.w1.weight``;
    None for a name outside the thinker."""
    if not stored.startswith(PREFIX):
        return None
    name = stored[len(PREFIX):]
    for pattern, repl in RENAMES:
        name = pattern.sub(repl, name)
    return name


def stored_name(name: str) -> str:
    for old, new in (("mlp.w1.", "mlp.gate_proj."), ("mlp.w3.", "mlp.up_proj."),
                     ("mlp.w2.", "mlp.down_proj.")):
        name = name.replace(old, new)
    return PREFIX + name


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return DTYPES[dtype]


def load_thinker(folder: str | Path, device: str | torch.device = "cpu",
                 dtype: str | torch.dtype | None = None,
                 expect: str | None = None) -> Thinker:
    """The model of checkpoint ``folder`` on ``device`` in ``dtype`` (default: bf16 on CUDA,
    float32 elsewhere), eval mode. ``expect`` (``qwen3_forced_aligner`` / ``qwen3_asr``)
    refuses the other kind with a clear error."""
    folder = Path(folder)
    device = torch.device(device)
    dtype = resolve_dtype(dtype, device)
    config = HearingConfig.from_dir(folder)
    if expect is not None and config.kind != expect:
        raise HearingCheckpointError(f"{folder.name} holds a {config.kind} model, not a {expect}")
    weights = folder / WEIGHTS
    if not weights.is_file():
        raise HearingCheckpointError(f"{folder.name}: {WEIGHTS} not found")
    with torch.device("meta"):
        model = Thinker(config)
    load = StreamedLoad(model, display=stored_name)
    _place_stored(load, weights, device, dtype)
    _tie_head(load, model, config)
    load.finish(f"{folder.name}: the weights do not match its config.json",
                HearingCheckpointError)
    _rebuild_buffers(model, device)
    return model.eval()


def _place_stored(load: StreamedLoad, weights: Path, device: torch.device,
                  dtype: torch.dtype) -> None:
    """Each tensor of ``weights`` read and placed on ``device`` in ``dtype``, one at a time; a
    name the model does not have is listed as unexpected."""
    with safe_open(str(weights), framework="pt", device="cpu") as f:
        for stored in f.keys():
            name = internal_name(stored)
            if name is None:
                load.problems.unexpected.append(stored)
                continue
            shape = tuple(f.get_slice(stored).get_shape())
            if load.expects(stored, name, shape):
                load.place(name, f.get_tensor(stored).to(device=device, dtype=dtype))


def _tie_head(load: StreamedLoad, model: Thinker, config: HearingConfig) -> None:
    """A tied head is stored once, as the embedding: placed from it when not stored."""
    tied = (config.text.tie_word_embeddings and "lm_head.weight" not in load.seen
            and "model.embed_tokens.weight" in load.seen
            and config.head_size == config.text.vocab_size)
    if tied:
        load.place("lm_head.weight", model.model.embed_tokens.weight)


def _rebuild_buffers(model: Thinker, device: torch.device) -> None:
    """Buffers made on meta (the audio positions) rebuilt for real."""
    from .audio_encoder import sinusoids

    audio = model.config.audio
    model.audio_tower.positions = sinusoids(audio.max_source_positions,
                                            audio.d_model).to(device)
