"""Sailfish Model Loader: a checkpoint + how to run it → FISH_S2_MODEL."""

from __future__ import annotations

from ..fish_core.engine.device import PRECISIONS, available_devices
from ..fish_core.engine.prefix_cache import DEFAULT_PREFIX_CACHE_MB
from . import paths
from .manager import MANAGER, ModelHandle
from .remote import RemoteHandle
from .schema import MODEL, Boolean, Combo, Int, Node, Output, String


def quantizations() -> list[str]:
    from .. import quant

    return list(quant.MODES)


# Inputs the loader had before endpoints were the operator's (older workflows may carry them).
REMOVED = ("remote_url", "dialect", "api_key_env", "api_key_file")
MAX_MODEL_NAME = 256


def remote_choices() -> list[str]:
    from ..fish_core.remote import endpoints

    return endpoints.choices()


def remote_mode(remote) -> str | None:
    """The endpoint name ``remote`` picks, or None for the local model. An empty value is what
    an older local-mode workflow stores in this place (its empty remote_url)."""
    from ..fish_core.remote.endpoints import OFF

    if remote is None or (isinstance(remote, str) and remote.strip() in ("", OFF)):
        return None
    if not isinstance(remote, str):
        raise ValueError(f"remote: expected an endpoint name, got {type(remote).__name__}")
    return remote


def remote_model_name(remote_model) -> str | None:
    """The engine model a workflow chose (``remote_model``), or None for the endpoint's own
    (its ``model`` in the endpoints file, else the engine's first). Only a name: it is sent to
    the operator's endpoint, which must list it."""
    if remote_model is None:
        return None
    if not isinstance(remote_model, str):
        raise ValueError(f"remote_model: expected a model name, got {type(remote_model).__name__}")
    name = remote_model.strip()
    if len(name) > MAX_MODEL_NAME or not name.isprintable():
        raise ValueError(f"remote_model: expected a model name of at most {MAX_MODEL_NAME} "
                         "printable characters, as the engine's /v1/models lists it")
    return name or None


def validate_remote(remote="off"):
    """ComfyUI's check of ``remote`` before the prompt runs: a configured name (the list may
    have changed since the workflow was saved), or a message saying which names there are."""
    from ..fish_core.remote import endpoints

    try:
        name = remote_mode(remote)
        if name is not None:
            endpoints.find(name)
    except ValueError as e:
        return str(e)
    return True


def cpu_threads(threads, device: str) -> None:
    """The loader's ``threads``: torch's CPU threads, for the whole ComfyUI process (ComfyUI sets
    none of its own). N: N. 0 (auto): for a model on the CPU, the free physical cores
    (``fish_core.engine.threads``); a GPU model leaves them as they are."""
    import torch

    from ..fish_core.engine import threads as policy

    try:
        n = policy.parse_threads(threads)
    except ValueError as e:
        raise ValueError(f"threads: {e}") from None
    if n or torch.device(device).type == "cpu":
        policy.apply(n)


def load_model(model, precision, quantization, device, compile, context_length,
               unload_after_minutes, remote="off", remote_model="",
               prefix_cache_mb=DEFAULT_PREFIX_CACHE_MB, threads=0, **removed):
    if removed:
        raise ValueError(
            f"{', '.join(sorted(removed))}: the Model Loader no longer takes engine URLs, "
            "dialects or API key sources from a workflow (a shared workflow could send your "
            "keys anywhere). The operator configures engines in the endpoints file; pick one "
            "by name in remote.")
    name = remote_mode(remote)
    if name is not None:
        from ..fish_core.remote.models import UnknownModel

        handle = RemoteHandle(name, remote_model_name(remote_model))
        try:  # find the endpoint, read its key and check the model now: a mistake fails here
            MANAGER.get(handle)
        except UnknownModel as e:
            raise ValueError(f"remote_model: {e}" if handle.model else str(e)) from None
        return (handle,)
    handle = ModelHandle(str(paths.resolve_model(model)), precision, quantization, device,
                         bool(compile), int(context_length), unload_after_minutes,
                         prefix_cache_mb)
    cpu_threads(threads, MANAGER.key(handle).device)
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
              "Smaller weights: fp8 (pure torch), int8/int4 (on a CPU: faster than none, int4 "
              "the fastest; on a GPU through torchao), fp8-dynamic/nvfp4 (torchao). A mode this "
              "device cannot run fails with the reason.", "none"),
        Combo("device", available_devices,
              "Where the model runs. auto: ComfyUI's device (honours --cpu).", "auto"),
        Boolean("compile", False,
                "torch.compile the per-frame decode step: faster generation after a slow "
                "first run on a GPU. On a CPU it can be slower than without (it warns); the "
                "CLI's --compile auto measures both.", advanced=True),
        Int("context_length", 0, 0, 32768,
            "Most tokens (prompt + generated) per batch; caps the KV cache. 0: the model's "
            "own (32768).", step=256, advanced=True),
        Int("unload_after_minutes", 0, 0, 1440,
            "Free the model after this many idle minutes. 0: keep it until ComfyUI frees "
            "memory."),
        Combo("remote", remote_choices,
              "Remote mode: speak through an S2 engine (SGLang-Omni, vLLM-Omni, fish-speech or "
              "a Sailfish serve) the operator configured by name in the endpoints file; the "
              "options above are then ignored. local: a Sailfish serve on this machine "
              "(python -m fish_core serve, http://127.0.0.1:8080, no key). off: run the model "
              "above here.", "off", optional=True),
        String("remote_model", "Remote mode: the engine's model to speak with, by the name its "
               "/v1/models lists (e.g. s2-pro, drama-3). Empty: the endpoint's model if the "
               "operator set one, else the engine's first. An unknown name is an error listing "
               "the engine's models. Ignored when remote is off.", optional=True),
        Int("prefix_cache_mb", DEFAULT_PREFIX_CACHE_MB, 0, 65536,
            "Memory for reusing voices: the KV of recent voice prefixes (reference clips and "
            "their transcripts) is kept, so the next text in the same voice starts sooner, "
            "with exactly the same result. Counted as this model's memory. 0: off.",
            step=64, optional=True, advanced=True),
        Int("threads", 0, 0, 1024,
            "CPU threads for the whole ComfyUI process (torch's). 0: auto, the free physical "
            "cores for a model on the CPU (more threads than free cores decode far slower); "
            "a GPU model leaves them as they are.", optional=True, advanced=True),
    ],
    outputs=[Output(MODEL, "model", "The loaded model, for any Sailfish node.")],
    execute=load_model,
    validate=validate_remote,
)
