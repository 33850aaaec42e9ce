"""fish_core: a pure-PyTorch engine for Fish Audio S2-Pro text-to-speech (no ComfyUI import).

Subpackages, in the order data flows (ARCHITECTURE.md draws them and the allowed imports):
``text`` (plan, scripts, tokenizer, prompt) → ``engine`` (model, sampling, generate) fed by
``loading`` (checkpoints, ``quant``) → ``codec`` → ``audio``; ``speech`` holds what every
synthesizer takes and returns (results, timeline, voices); ``local`` is the local
``Synthesizer``, ``remote`` its sibling ``RemoteSynthesizer``, the same API on remote engines,
``serve`` the HTTP service and
``cli`` the command line (``sailfish``, or ``python -m fish_core``).

The public API is what this module exports (the README uses only these names)::

    from fish_core import Synthesizer, Voice

Each name is imported when first used, so ``import fish_core`` loads neither torch's model code
nor the codec.
"""

__version__ = "0.1.0"

__all__ = ["Cancelled", "GenerationError", "RemoteSynthesizer", "SamplingParams", "Settings",
           "Speech", "SubtitleSpeech", "Synthesizer", "Voice", "timeline_json"]


def __getattr__(name: str):
    if name == "Synthesizer":  # the local backend: from_pretrained, encode_voice, tts, …
        from .local.synthesizer import Synthesizer as value
    elif name == "RemoteSynthesizer":  # its sibling, the same API on remote engines: url,
        # dialect (auto, sailfish, sglang-omni, vllm-omni, fish-speech), api_key, model, …
        from .remote import RemoteSynthesizer as value
    elif name == "Settings":  # how a request is spoken (sampling, seed, takes, finishing …)
        from .speech.settings import Settings as value
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
