"""The Synthesizer API on remote engines (SGLang-Omni, vLLM-Omni, fish-speech, our serve)
speaking S2-Pro or Fish Audio Drama 3 (docs/engines.md)."""

from .client import RemoteSynthesizer, RemoteVoice, engine_models
from .dialects import DIALECTS
from .http import RemoteError, RemoteUserError

__all__ = ["RemoteSynthesizer", "RemoteVoice", "RemoteError", "RemoteUserError",
           "DIALECTS", "engine_models"]
