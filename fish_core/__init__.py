"""fish_core: a pure-PyTorch engine for Fish Audio S2-Pro text-to-speech (no ComfyUI import).

Subpackages, in the order data flows (ARCHITECTURE.md draws them and the allowed imports):
``text`` (plan, scripts, tokenizer, prompt) → ``engine`` (model, sampling, generate) fed by
``loading`` (checkpoints, ``quant``) → ``codec`` → ``audio``; ``speech`` holds what every
synthesizer takes and returns (results, timeline, voices); ``local`` is the local
``Synthesizer``, ``remote`` the same API on remote engines, ``serve`` the HTTP service and
``cli`` the command line (``sailfish``, or ``python -m fish_core``).

The public API is what this module exports (the README uses only these names)::

    from fish_core import Synthesizer, Voice

Each name is imported when first used, so ``import fish_core`` loads neither torch's model code
nor the codec.
"""

__version__ = "0.1.0"

__all__ = ["Cancelled", "GenerationError", "SamplingParams", "Speech", "SubtitleSpeech",
           "Synthesizer", "Voice", "timeline_json"]


def __getattr__(name: str):
    if name == "Synthesizer":  # from_pretrained, remote, encode_voice, tts, dialogue, …
        from .local.synthesizer import Synthesizer as value
    elif name == "Voice":  # a saved voice: codes + transcript + name (.safetensors)
        from .speech.voices import Voice as value
    elif name in ("Speech", "SubtitleSpeech", "timeline_json"):  # results and their timeline
        from .speech import results

        value = getattr(results, name)
    elif name in ("SamplingParams", "GenerationError", "Cancelled"):  # options and errors
        from . import params

        value = getattr(params, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
