"""The request and response shapes of the engines that serve S2-Pro and Drama 3, one class
per dialect. What each engine accepts and answers, the upstream version followed and its limits
are written down in docs/engines.md; each class's docstring names the version it follows.

Every answer is read within a byte budget the transport enforces (``http.Response``: for
speech, what the request's frames can produce), every event-stream line is capped, and a field an
engine cannot take is refused here, before
anything is sent (``Dialect.check``), with the engine's limit in the message: a value the user
set is never silently changed.
"""

from __future__ import annotations

import base64
import io
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..audio.wav import AudioFormatError, WavReader
from ..params import MAX_SEED
from .http import Response, Transport
from .models import MAX_MODELS, MODELS_BYTES, model_ids
from .pcm import S2_RATE, BodyReader, bounded_lines, chunk_audio
from .wire import sse_audio, sse_events

OnChunk = Callable[[torch.Tensor, int], None]  # (float32 samples [n], sample rate)
VOICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # SGLang-Omni's and vLLM-Omni's voice names


@dataclass
class Clip:
    """A reference as sent over the wire: float32 mono audio at ``sample_rate`` + transcript."""

    audio: torch.Tensor
    sample_rate: int
    text: str
    _wav: bytes = field(default=b"", repr=False, compare=False)  # made once per clip
    _base64: str = field(default="", repr=False, compare=False)

    def wav(self) -> bytes:
        """A float WAV (no 16-bit rounding: the engine encodes exactly our samples), written
        once per clip (a voice sends the same clip with every request)."""
        if not self._wav:
            from ..audio.files import import_soundfile

            out = io.BytesIO()
            import_soundfile().write(out, self.audio.numpy(), self.sample_rate, format="WAV",
                                     subtype="FLOAT")
            self._wav = out.getvalue()
        return self._wav

    def base64(self) -> str:
        if not self._base64:
            self._base64 = base64.b64encode(self.wav()).decode("ascii")
        return self._base64

    def data_url(self) -> str:
        """The clip as a ``data:`` URL, the form SGLang-Omni and vLLM-Omni take inline."""
        return "data:audio/wav;base64," + self.base64()


@dataclass
class Params:
    """One speech request's settings."""

    seed: int
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    max_bytes: int  # text bytes per batch (fish-speech's chunk_length)
    model: str | None = None  # the engine's model id, named in the request where it takes one
    sample_rate: int = S2_RATE  # of raw PCM answers, which carry no header


class Dialect:
    name = ""
    speech_path = "/v1/audio/speech"
    voices_path: str | None = None  # where saved voices are listed (None: no voice library)
    lists_models = True  # answers GET /v1/models
    max_seed = MAX_SEED  # seeds past this are not the engine's own (a fresh one is drawn below)
    needs_consent = False  # registering a voice needs the speaker's stated consent
    max_clips = 8

    def check(self, p: Params) -> None:
        """Refuse, before sending, a field this engine cannot take (naming its limit)."""
        if p.seed > self.max_seed:
            raise ValueError(f"seed: the {self.name} engine takes seeds 0 .. {self.max_seed} "
                             f"(a larger one is not its own seed), got {p.seed}; pick a seed "
                             f"of at most {self.max_seed}")

    def body(self, text: str, clips: list[Clip], voice_id: str | None, p: Params) -> dict:
        raise NotImplementedError

    def read(self, response: Response, on_chunk: OnChunk, p: Params) -> None:
        """Stream the response's audio to ``on_chunk`` as it arrives."""
        read_body(response, on_chunk, p)

    def models(self, transport: Transport) -> list[str]:
        """The engine's model ids, in its order ([] when it keeps no list)."""
        if not self.lists_models:
            return []
        return model_ids(models_answer(transport), f"{transport.name}/v1/models")

    def voice_names(self, transport: Transport) -> list[str]:
        raise ValueError(f"the {self.name} dialect has no voice library: send the voice's "
                         "reference audio instead (Voice Encode / encode_voice)")

    def add_voice(self, transport: Transport, name: str, clip: Clip,
                  consent: str | None = None) -> str:
        raise ValueError(f"the {self.name} dialect cannot register voices")


def sampling(p: Params) -> dict:
    return {"seed": p.seed, "temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k,
            "max_new_tokens": p.max_new_tokens}


def with_model(body: dict, p: Params) -> dict:
    if p.model:
        body["model"] = p.model
    return body


def multipart(fields: dict[str, str], audio: bytes, file_field: str = "audio"
              ) -> tuple[bytes, str]:
    """A multipart/form-data body of text ``fields`` and one WAV file named ``file_field``."""
    boundary = uuid.uuid4().hex
    parts = []
    for key, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n'
                     f"{value}\r\n".encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
                 f'filename="reference.wav"\r\nContent-Type: audio/wav\r\n\r\n'.encode()
                 + audio + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def read_body(response: Response, on_chunk: OnChunk, p: Params) -> None:
    """A streamed audio body: WAV (of unknown length, or whole) or raw s16le PCM at
    ``p.sample_rate``."""
    kind = response.headers.get("Content-Type", "").lower()
    if "json" in kind or kind.startswith("text/"):
        raise AudioFormatError(f"{response.where}: the answer is not audio ({kind})")
    reader = BodyReader(response.where, p.sample_rate, wav="wav" in kind)
    for piece in iter(response.read, b""):
        samples = reader.feed(piece)
        if samples.numel():
            on_chunk(samples, reader.sample_rate)


def read_wav_stream(response: Response, on_chunk: OnChunk, p: Params) -> None:
    reader = WavReader(response.where)
    for piece in iter(response.read, b""):
        samples = reader.feed(piece)
        if samples.numel():
            on_chunk(samples, reader.sample_rate)


def read_sse(response: Response, on_chunk: OnChunk, p: Params) -> None:
    """Server-sent events of audio chunks (SGLang-Omni's ``audio.speech.chunk`` with PCM or,
    from older versions, WAV; OpenAI's ``speech.audio.delta``), up to ``data: [DONE]``."""
    for payload in sse_events(bounded_lines(iter(response.read, b""), response.where)):
        _, audio = sse_audio(payload, response.where, response.quote)
        if audio:
            wave, rate = chunk_audio(audio, json.loads(payload), p.sample_rate, response.where,
                                     response.quote)
            if wave.numel():
                on_chunk(wave, rate)


def read_json(response: Response):
    """A JSON answer (its size bounded by the transport's ``limit``)."""
    try:
        return json.loads(response.body())
    except (ValueError, RecursionError):  # RecursionError: a nesting bomb
        raise AudioFormatError(f"{response.where}: the answer is not JSON") from None


def listed_names(answer, *keys: str) -> list[str]:
    """Voice names from a list answer: ``{"data"|"voices": [{"name"|"id"} | "name"]}``."""
    if not isinstance(answer, dict):
        return []
    entries = next((answer[k] for k in keys if isinstance(answer.get(k), list)), [])
    names = [e if isinstance(e, str) else (e.get("name") or e.get("id"))
             for e in entries if isinstance(e, (str, dict))]
    return [n for n in names if isinstance(n, str)]


def stated_consent(consent, dialect: str) -> str:
    """The consent the user stated for registering a voice; never made up here."""
    if consent is None or (isinstance(consent, str) and not consent.strip()):
        raise ValueError(f"voice_consent: the {dialect} engine registers a voice only with the "
                         "speaker's consent, and Sailfish never states it for you: give "
                         "voice_consent (--voice-consent), e.g. the consent id or statement "
                         "of the person whose voice this is")
    if not isinstance(consent, str) or len(consent) > 1000:
        raise ValueError("voice_consent must be a text of at most 1000 characters")
    return consent.strip()


class Sailfish(Dialect):
    """Our own ``serve`` (fish_core/serve/routes.py, serve/request.py): OpenAI
    ``/v1/audio/speech`` + S2 fields, ``stream_format: "audio"`` → one streamed WAV (unknown
    length); voices at ``/v1/audio/voices`` (multipart ``name``, ``audio``, ``text``)."""

    name = "sailfish"
    voices_path = "/v1/audio/voices"

    def models(self, transport):
        """The model list, which also tells whether a Sailfish ``serve`` answers (until it
        has, none of its text is quoted in errors: ``Transport.needs_identity``)."""
        answer = models_answer(transport)
        transport.identified = transport.identified or "sailfish" in owners(answer)
        return model_ids(answer, f"{transport.name}/v1/models")

    def body(self, text, clips, voice_id, p):
        body = {"input": text, "response_format": "wav", "stream_format": "audio",
                **sampling(p)}
        if clips:
            body["references"] = [{"audio": c.base64(), "text": c.text} for c in clips]
        if voice_id:
            body["voice"] = voice_id
        return with_model(body, p)

    def read(self, response, on_chunk, p):
        read_wav_stream(response, on_chunk, p)

    def voice_names(self, transport):
        return listed_names(transport.request("GET", self.voices_path, read_json), "data")

    def add_voice(self, transport, name, clip, consent=None):
        body, kind = multipart({"name": name, "text": clip.text}, clip.wav())
        transport.request("POST", self.voices_path, read_json, body=body, content_type=kind)
        return name


class OmniVoices(Dialect):
    """The voice store SGLang-Omni and vLLM-Omni share: ``GET /v1/audio/voices``, and
    ``POST`` multipart ``audio_sample`` (a file), ``consent`` (required), ``name``
    (``[A-Za-z0-9_.-]+``), ``ref_text``."""

    voices_path = "/v1/audio/voices"
    needs_consent = True

    def voice_names(self, transport):
        return listed_names(transport.request("GET", self.voices_path, read_json),
                            "voices", "data")

    def add_voice(self, transport, name, clip, consent=None):
        if not isinstance(name, str) or not VOICE_NAME.fullmatch(name):
            raise ValueError(f"voice name: the {self.name} engine takes names of letters, "
                             f"digits, '_', '.' and '-' (at most 128), got {name!r}")
        fields = {"name": name, "consent": stated_consent(consent, self.name),
                  "ref_text": clip.text}
        body, kind = multipart(fields, clip.wav(), "audio_sample")
        transport.request("POST", self.voices_path, read_json, body=body, content_type=kind)
        return name


class SGLangOmni(OmniVoices):
    """sgl-project/sglang-omni ``docs/basic_usage/tts.md`` at commit 0545bc0 (main as read
    on 2026-12-01; serves S2-Pro and, since 2026-10-13, ``fishaudio/drama-3``): ``references:
    [{audio_path, text}]`` with
    the clip as a ``data:`` base64 URL; ``stream: true`` with ``response_format: "pcm"`` →
    SSE ``audio.speech.chunk`` objects whose ``audio.data`` is base64 s16le PCM (with
    ``audio.sample_rate``), ending with ``data: [DONE]``; ``seed``, ``temperature``,
    ``top_p``, ``top_k`` (−1 or 1..30: a CUDA-graph limit), ``max_new_tokens``. Still read:
    the older answer (chunks of base64 WAV, commit 4f74d89) and a whole WAV body."""

    name = "sglang-omni"
    max_top_k = 30

    def check(self, p):
        super().check(p)
        if not 1 <= p.top_k <= self.max_top_k:
            raise ValueError(f"top_k: the {self.name} engine takes -1 (off) or 1 .. "
                             f"{self.max_top_k} (its CUDA-graph sampler's limit), got "
                             f"{p.top_k}; set top_k to at most {self.max_top_k}")

    def body(self, text, clips, voice_id, p):
        body = {"input": text, "response_format": "pcm", "stream": True, **sampling(p)}
        if clips:
            body["references"] = [{"audio_path": c.data_url(), "text": c.text} for c in clips]
        if voice_id:
            body["voice"] = voice_id
        return with_model(body, p)

    def read(self, response, on_chunk, p):
        if "event-stream" not in response.headers.get("Content-Type", ""):
            return read_body(response, on_chunk, p)  # an engine that answered in one body
        read_sse(response, on_chunk, p)


class VLLMOmni(OmniVoices):
    """vllm-project/vllm-omni ``docs/serving/speech_api.md`` at commit 078de2d (as read on
    2026-12-01; one model per server, Fish output 44.1 kHz; Drama 3 since vllm-omni #8900), and
    vLLM-Omni 0.30.0 as run (``serving_speech.py``): ``ref_audio`` (a ``data:`` URL) +
    ``ref_text``, one reference; ``voice`` ``"default"`` for Fish; ``max_new_tokens``;
    ``seed`` (int64) and ``extra_params: {temperature, top_p, top_k}``, both applied to the
    first stage, the slow AR (the residual codebooks are sampled with the deploy file's
    settings); ``stream: true`` + ``stream_format: "audio"`` + ``response_format: "pcm"`` → a
    raw chunked body of s16le mono PCM at the engine's rate (no header). Versions before
    ``stream_format`` answer ``stream: true`` + ``pcm`` with that raw body too;
    ``stream_format: "sse"`` (or ``stream`` alone on newer versions) gives OpenAI
    ``speech.audio.delta`` events, also read, as is a whole WAV body (older versions)."""

    name = "vllm-omni"
    max_clips = 1

    def body(self, text, clips, voice_id, p):
        body = {"input": text, "response_format": "pcm", "stream": True,
                "stream_format": "audio", "voice": voice_id or "default",
                "max_new_tokens": p.max_new_tokens, "seed": p.seed,
                "extra_params": {"temperature": p.temperature, "top_p": p.top_p,
                                 "top_k": p.top_k}}
        if clips:
            body["ref_audio"] = clips[0].data_url()
            body["ref_text"] = clips[0].text
        return with_model(body, p)

    def read(self, response, on_chunk, p):
        if "event-stream" in response.headers.get("Content-Type", ""):
            return read_sse(response, on_chunk, p)
        read_body(response, on_chunk, p)


class FishSpeech(Dialect):
    """fishaudio/fish-speech ``tools/server`` at commit 3dd1f85: ``POST /v1/tts``
    ``ServeTTSRequest`` (``references: [{audio: base64, text}]``, ``reference_id``,
    ``streaming: true`` with ``format: "wav"`` → a WAV header then int16 PCM per text
    segment); voices at ``/v1/references/add|list``; no model list."""

    name = "fish-speech"
    speech_path = "/v1/tts"
    voices_path = "/v1/references/list"
    lists_models = False
    max_seed = 1 << 31  # set_seed clamps larger seeds to this one: they would all sound alike
    fixed_top_k = 30  # its sampler's top_k: no request field

    def check(self, p):
        """``ServeTTSRequest`` takes ``seed``, ``temperature`` and ``top_p`` (each 0.1 .. 1.0)
        and ``max_new_tokens``; ``top_k`` is fixed in its sampler (30, ours by default)."""
        super().check(p)
        for name in ("temperature", "top_p"):
            value = getattr(p, name)
            if not 0.1 <= value <= 1.0:
                raise ValueError(f"{name}: the {self.name} engine takes {name} 0.1 .. 1.0, "
                                 f"got {value}")
        if p.top_k != self.fixed_top_k:
            raise ValueError(f"top_k: the {self.name} engine takes no top_k (its sampler keeps "
                             f"{self.fixed_top_k}), so {p.top_k} cannot be honoured there; leave "
                             f"top_k at {self.fixed_top_k}")

    def body(self, text, clips, voice_id, p):
        body = {"text": text, "format": "wav", "streaming": True, "chunk_length": p.max_bytes,
                "seed": p.seed, "temperature": p.temperature, "top_p": p.top_p,
                "max_new_tokens": p.max_new_tokens}
        if clips:
            body["references"] = [{"audio": c.base64(), "text": c.text} for c in clips]
        if voice_id:
            body["reference_id"] = voice_id
        return body

    def read(self, response, on_chunk, p):
        read_wav_stream(response, on_chunk, p)

    def voice_names(self, transport):
        answer = transport.request("GET", self.voices_path, read_json)
        ids = answer.get("reference_ids", []) if isinstance(answer, dict) else []
        return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []

    def add_voice(self, transport, name, clip, consent=None):
        body, kind = multipart({"id": name, "text": clip.text}, clip.wav())
        transport.request("POST", "/v1/references/add", read_json, body=body,
                          content_type=kind)
        return name


DIALECTS = {d.name: d for d in (Sailfish(), SGLangOmni(), VLLMOmni(), FishSpeech())}


def models_answer(transport: Transport):
    """The engine's ``GET /v1/models`` answer, asked once per transport: detecting the dialect,
    identifying a Sailfish serve and listing the models share it. A failure is not kept."""
    if transport.models_answer is None:
        transport.models_answer = transport.request("GET", "/v1/models", read_json,
                                                    limit=MODELS_BYTES)
    return transport.models_answer


def owners(models) -> set[str]:
    """Who owns the models of a ``/v1/models`` answer (lower case): how engines say who they
    are."""
    data = models.get("data", []) if isinstance(models, dict) else []
    return {str(m.get("owned_by", "")).lower()[:64] for m in data[:MAX_MODELS]
            if isinstance(m, dict)}


def detect(transport: Transport) -> Dialect:
    """Guess the dialect from ``/v1/models`` (who owns the model) or, failing that, from
    ``/v1/health`` (fish-speech has no model list)."""
    from .http import RemoteError

    try:
        found = owners(models_answer(transport))
        if "sailfish" in found:
            transport.identified = True
            return DIALECTS["sailfish"]
        if any("vllm" in o for o in found):
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
