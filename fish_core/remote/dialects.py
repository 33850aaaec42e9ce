"""The request and response shapes of the engines that serve S2-Pro, one class per dialect.

Followed (see /work/shared/docs/serving.md for the gathered facts):

* ``sailfish``: our own ``serve`` (fish_core/serve/routes.py, requests.py): OpenAI
  ``/v1/audio/speech`` + S2 fields, ``stream_format: "audio"`` → one streamed WAV (unknown
  length); voices at ``/v1/audio/voices`` (multipart ``name``, ``audio``, ``text``).
* ``sglang-omni``: sgl-project/sglang-omni ``docs/basic_usage/tts_s2pro.md`` at commit
  4f74d89: ``references: [{audio_path | audio, text}]``, ``stream: true`` → SSE events whose
  ``audio.data`` is one base64 WAV chunk, ending with ``data: [DONE]``; ``seed``, ``top_k``,
  ``max_new_tokens``, ``temperature``, ``top_p``. We send ``audio`` (base64), not a
  server-side ``audio_path``.
* ``vllm-omni``: vllm-project/vllm-omni speech API (as summarized in serving.md, not
  re-verified): ``ref_audio`` (a data URL) + ``ref_text``, one reference; whole WAV response.
  The seed and sampling fields are not documented there: not sent, so not seed-reproducible.
* ``fish-speech``: fishaudio/fish-speech ``tools/server`` at commit 3dd1f85:
  ``POST /v1/tts`` ``ServeTTSRequest`` (``references: [{audio: base64, text}]``,
  ``reference_id``, ``streaming: true`` with ``format: "wav"`` → a WAV header then int16 PCM
  per text segment); voices at ``/v1/references/add|list``.
"""

from __future__ import annotations

import base64
import io
import uuid
from dataclasses import dataclass
from typing import Callable

import torch

from .http import Response, Transport
from .wire import AudioFormatError, WavReader, sse_audio, sse_events, wav_file

OnChunk = Callable[[torch.Tensor, int], None]  # (float32 samples [n], sample rate)


@dataclass
class Clip:
    """A reference as sent over the wire: float32 mono audio at ``sample_rate`` + transcript."""

    audio: torch.Tensor
    sample_rate: int
    text: str

    def wav(self) -> bytes:
        """A float WAV (no 16-bit rounding: the engine encodes exactly our samples)."""
        from ..audio.files import import_soundfile

        out = io.BytesIO()
        import_soundfile().write(out, self.audio.numpy(), self.sample_rate, format="WAV",
                                 subtype="FLOAT")
        return out.getvalue()

    def base64(self) -> str:
        return base64.b64encode(self.wav()).decode("ascii")


@dataclass
class Params:
    """One speech request's sampling settings."""

    seed: int
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    max_bytes: int


class Dialect:
    name = ""
    speech_path = "/v1/audio/speech"
    voices_path: str | None = None  # where saved voices are listed (None: no voice library)
    carries_seed = True
    max_clips = 8

    def body(self, text: str, clips: list[Clip], voice_id: str | None, p: Params) -> dict:
        raise NotImplementedError

    def read(self, response: Response, on_chunk: OnChunk) -> None:
        """Stream the response's audio to ``on_chunk`` as it arrives."""
        read_wav_stream(response, on_chunk)

    def voice_names(self, transport: Transport) -> list[str]:
        raise ValueError(f"the {self.name} dialect has no voice library: send the voice's "
                         "reference audio instead (Voice Encode / encode_voice)")

    def add_voice(self, transport: Transport, name: str, clip: Clip) -> str:
        raise ValueError(f"the {self.name} dialect cannot register voices")


def sampling(p: Params) -> dict:
    return {"seed": p.seed, "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k,
            "max_new_tokens": p.max_new_tokens}


def multipart(fields: dict[str, str], audio: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body of text ``fields`` and one ``audio`` file."""
    boundary = uuid.uuid4().hex
    parts = []
    for key, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n'
                     f"{value}\r\n".encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="audio"; '
                 f'filename="reference.wav"\r\nContent-Type: audio/wav\r\n\r\n'.encode()
                 + audio + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def read_wav_stream(response: Response, on_chunk: OnChunk) -> None:
    reader = WavReader(response.where)
    while piece := response.read():
        samples = reader.feed(piece)
        if samples.numel():
            on_chunk(samples, reader.sample_rate)


def read_json(response: Response):
    import json

    try:
        return json.loads(response.body())
    except ValueError:
        raise AudioFormatError(f"{response.where}: the answer is not JSON") from None


class Sailfish(Dialect):
    name = "sailfish"
    voices_path = "/v1/audio/voices"

    def body(self, text, clips, voice_id, p):
        body = {"input": text, "response_format": "wav", "stream_format": "audio",
                **sampling(p)}
        if clips:
            body["references"] = [{"audio": c.base64(), "text": c.text} for c in clips]
        if voice_id:
            body["voice"] = voice_id
        return body

    def voice_names(self, transport):
        answer = transport.request("GET", self.voices_path, read_json)
        return [v.get("name") or v.get("id") for v in answer.get("data", [])]

    def add_voice(self, transport, name, clip):
        body, kind = multipart({"name": name, "text": clip.text}, clip.wav())
        transport.request("POST", self.voices_path, read_json, body=body, content_type=kind)
        return name


class SGLangOmni(Dialect):
    name = "sglang-omni"

    def body(self, text, clips, voice_id, p):
        body = {"input": text, "response_format": "wav", "stream": True, **sampling(p)}
        if clips:
            body["references"] = [{"audio": c.base64(), "text": c.text} for c in clips]
        if voice_id:
            body["voice"] = voice_id
        return body

    def read(self, response, on_chunk):
        if "event-stream" not in response.headers.get("Content-Type", ""):
            return read_wav_stream(response, on_chunk)  # an engine that answered in one WAV
        for payload in sse_events(response.lines()):
            _, audio = sse_audio(payload, response.where)
            if audio:
                wave, rate = wav_file(audio, response.where)
                if wave.numel():
                    on_chunk(wave, rate)


class VLLMOmni(Dialect):
    name = "vllm-omni"
    carries_seed = False
    max_clips = 1

    def body(self, text, clips, voice_id, p):
        body = {"input": text, "response_format": "wav"}
        if clips:
            body["ref_audio"] = "data:audio/wav;base64," + clips[0].base64()
            body["ref_text"] = clips[0].text
        if voice_id:
            body["voice"] = voice_id
        return body


class FishSpeech(Dialect):
    name = "fish-speech"
    speech_path = "/v1/tts"
    voices_path = "/v1/references/list"

    def body(self, text, clips, voice_id, p):
        body = {"text": text, "format": "wav", "streaming": True, "chunk_length": p.max_bytes,
                **sampling(p)}
        if clips:
            body["references"] = [{"audio": c.base64(), "text": c.text} for c in clips]
        if voice_id:
            body["reference_id"] = voice_id
        return body

    def voice_names(self, transport):
        return list(transport.request("GET", self.voices_path, read_json)
                    .get("reference_ids", []))

    def add_voice(self, transport, name, clip):
        body, kind = multipart({"id": name, "text": clip.text}, clip.wav())
        transport.request("POST", "/v1/references/add", read_json, body=body,
                          content_type=kind)
        return name


DIALECTS = {d.name: d for d in (Sailfish(), SGLangOmni(), VLLMOmni(), FishSpeech())}


def detect(transport: Transport) -> Dialect:
    """Guess the dialect from ``/v1/models`` (who owns the model) or, failing that, from
    ``/v1/health`` (fish-speech has no model list)."""
    from .http import RemoteError

    try:
        models = transport.request("GET", "/v1/models", read_json)
        owners = {str(m.get("owned_by", "")).lower() for m in models.get("data", [])}
        if "sailfish" in owners:
            return DIALECTS["sailfish"]
        if any("vllm" in o for o in owners):
            return DIALECTS["vllm-omni"]
        return DIALECTS["sglang-omni"]
    except RemoteError as e:
        if e.status in (401, 403):
            raise
        transport.request("GET", "/v1/health", read_json)  # raises if nothing answers
        return DIALECTS["fish-speech"]


def dialect(name: str, transport: Transport) -> Dialect:
    if name in (None, "", "auto"):
        return detect(transport)
    if name not in DIALECTS:
        raise ValueError(f"dialect must be auto or one of {', '.join(DIALECTS)}, got {name!r}")
    return DIALECTS[name]
