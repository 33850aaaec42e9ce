"""fish_core: a pure-PyTorch engine for Fish Audio S2-Pro text-to-speech (no ComfyUI import).

Subpackages, in the order data flows (ARCHITECTURE.md draws them and the allowed imports):
``text`` (plan, scripts, tokenizer, prompt) → ``engine`` (model, sampling, generate) fed by
``loading`` (checkpoints, ``quant``) → ``codec`` → ``audio``; ``speech`` holds what every
synthesizer takes and returns (results, timeline, voices); ``synthesis`` is the local
``Synthesizer``, ``remote`` the same API on remote engines, ``serve`` the HTTP service and
``cli`` the command line (``python -m fish_core``).

``from fish_core import Synthesizer`` is the stable public import; it loads the engine only
when first used.
"""

__version__ = "0.1.0"

__all__ = ["Synthesizer"]


def __getattr__(name: str):
    if name == "Synthesizer":
        from .synthesis.synthesizer import Synthesizer

        return Synthesizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
