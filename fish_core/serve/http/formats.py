"""Audio response formats: wav and pcm (16-bit, streamable as they are made), flac, mp3 and opus
(whole responses, where the installed libsndfile can write them). The encoders live in
``fish_core.audio.formats`` (the CLI writes the same files); this names what the routes use."""

from __future__ import annotations

from ...audio.formats import CONTENT_TYPES, OPUS_RATE, encode, writable
from ...audio.wav import STREAMABLE, StreamEncoder, pcm16

__all__ = ["CONTENT_TYPES", "STREAMABLE", "OPUS_RATE", "StreamEncoder", "encode", "pcm16",
           "writable"]
