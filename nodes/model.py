"""Sailfish Model Loader: a checkpoint + how to run it → FISH_S2_MODEL."""

from __future__ import annotations

from ..fish_core.device import PRECISIONS, available_devices
from . import paths
from .manager import MANAGER, ModelHandle
from .schema import MODEL, Boolean, Combo, Int, Node, Output


def quantizations() -> list[str]:
    from .. import quant

    return list(quant.MODES)


def load_model(model, precision, quantization, device, compile, context_length,
               unload_after_minutes):
    handle = ModelHandle(str(paths.resolve_model(model)), precision, quantization, device,
                         bool(compile), int(context_length), unload_after_minutes)
    MANAGER.get(handle)  # load now, so that a broken checkpoint fails on this node
    return (handle,)


MODEL_LOADER = Node(
    "SailfishModelLoader", "Sailfish Model Loader",
    "Loads Fish Audio S2-Pro once for every Sailfish node. Local checkpoint folders (models/"
    "fish_speech, models/tts) come first; '(download)' entries fetch only that variant from "
    "Hugging Face when the node runs. ComfyUI's 'Unload models' and 'Free memory' free it.",
    inputs=[
        Combo("model", paths.model_choices,
              "Checkpoint folder from models/fish_speech (or models/tts), or a variant to "
              "download on first run into models/fish_speech."),
        Combo("precision", PRECISIONS,
              "Weight precision. auto: bf16 (fp16 on GPUs without bf16).", "auto"),
        Combo("quantization", quantizations,
              "Smaller weights: fp8 (pure torch), int8/int4/fp8-dynamic/nvfp4 (torchao). A "
              "mode this device cannot run fails with the reason.", "none"),
        Combo("device", available_devices,
              "Where the model runs. auto: ComfyUI's device (honours --cpu).", "auto"),
        Boolean("compile", False,
                "torch.compile the per-frame decode step: faster generation after a slow "
                "first run.", advanced=True),
        Int("context_length", 0, 0, 32768,
            "Most tokens (prompt + generated) per batch; caps the KV cache. 0: the model's "
            "own (32768).", step=256, advanced=True),
        Int("unload_after_minutes", 0, 0, 1440,
            "Free the model after this many idle minutes. 0: keep it until ComfyUI frees "
            "memory."),
    ],
    outputs=[Output(MODEL, "model", "The loaded model, for any Sailfish node.")],
    execute=load_model,
)
