"""Sailfish Model Loader: a checkpoint + how to run it → FISH_S2_MODEL."""

from __future__ import annotations

from ..fish_core.engine.device import PRECISIONS, available_devices
from . import paths
from .manager import MANAGER, ModelHandle
from .remote import KEY_ENV, RemoteHandle
from .schema import MODEL, Boolean, Combo, Int, Node, Output, String


def quantizations() -> list[str]:
    from .. import quant

    return list(quant.MODES)


def dialects() -> list[str]:
    from ..fish_core.remote.dialects import DIALECTS

    return ["auto", *DIALECTS]


def load_model(model, precision, quantization, device, compile, context_length,
               unload_after_minutes, remote_url="", dialect="auto", api_key_env=KEY_ENV,
               api_key_file=""):
    if isinstance(remote_url, str) and remote_url.strip():
        handle = RemoteHandle(remote_url.strip(), dialect, api_key_env or "", api_key_file or "")
        MANAGER.get(handle)  # reach the engine now, so that a wrong URL or key fails here
        return (handle,)
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
        String("remote_url", "Remote mode: speak through an S2 engine at this URL (SGLang-"
               "Omni, vLLM-Omni, fish-speech or a Sailfish serve; several separated by spaces "
               "are spread and failed over). Empty: run the model above locally; the options "
               "above are then ignored.", "", optional=True),
        Combo("dialect", dialects, "Remote mode: the engine's API. auto: asks /v1/models, "
              "/v1/health.", "auto", optional=True),
        String("api_key_env", "Remote mode: the environment variable holding the engine's API "
               "key (the key itself is never stored in the workflow).", KEY_ENV,
               optional=True, advanced=True),
        String("api_key_file", "Remote mode: or a file holding the API key (first line). "
               "Empty: use api_key_env.", "", optional=True, advanced=True),
    ],
    outputs=[Output(MODEL, "model", "The loaded model, for any Sailfish node.")],
    execute=load_model,
)
