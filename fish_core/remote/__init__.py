"""The Synthesizer API on remote S2 engines (SGLang-Omni, vLLM-Omni, fish-speech, our serve)."""

from .client import RemoteStream, RemoteSynthesizer, RemoteVoice
from .dialects import DIALECTS
from .http import RemoteError, RemoteUserError

__all__ = ["RemoteSynthesizer", "RemoteStream", "RemoteVoice", "RemoteError", "RemoteUserError",
           "DIALECTS"]
