"""``WS /v1/audio/speech/stream``: text streamed in, speech streamed out (the shape SGLang-Omni
and vLLM-Omni serve, for voice agents that feed an LLM's tokens straight to TTS).

Client → server (JSON text messages)::

    {"type": "session.config", "voice": "alice", "seed": 7, ...}   first, once
    {"type": "input.text", "text": "Hello the"}                     any number of pieces
    {"type": "input.done"}                                          the rest is spoken, then the end

Server → client::

    {"type": "session.configured", "session_id", "seed", "format", "response_format",
     "stream_audio", "split_granularity", "channels": 1, "sample_width": 2}
    for each sentence i, in order:
        {"type": "audio.start", "sentence_index": i, "utterance_index": 0, "sentence_text",
         "format", "sample_rate", "seed"}
        binary frames: the sentence's audio (s16le mono PCM at sample_rate, as it is decoded)
        {"type": "audio.done", "sentence_index": i, "utterance_index": 0, "samples",
         "total_bytes", "error": false}
    {"type": "session.done", "utterance_index": 0, "total_sentences"}
    or, on any error: {"type": "error", "error": {message, type, param, code}}, then the close

``session.config`` takes the fields of ``POST /v1/audio/speech`` (voice, references,
ref_audio/ref_text, seed, sampling, instructions, model, response_format, speed 0.5 … 2: each
sentence stretched) except the text, the HTTP streaming ones and ``loudness`` (a session has no
whole to measure), and the session fields of SGLang-Omni and vLLM-Omni:

* ``split_granularity``: ``sentence`` (default; ``text.plan``'s rule, see ``SentenceCutter``),
  ``clause`` (also at ``, ; :`` before white space and ``，、；：،``), or ``none`` (nothing is
  spoken before ``input.done``; then the whole text as one request, up to the text limit).
* ``stream_audio``: ``true`` (default) sends each sentence's PCM as it is decoded; ``false``
  one binary frame per sentence. With ``false``, ``response_format`` may also be ``wav``,
  ``flac``, ``mp3`` or ``opus`` (one encoded file per sentence).
* ``speaker`` (an alias of ``voice``); ``voice: "default"``: the server's default voice unless
  the library has a voice named ``default``.
* Accepted and checked, with no effect on S2: ``language`` (S2 reads it from the text),
  ``initial_codec_chunk_frames`` (the first chunk is ``params.FIRST_FRAMES`` frames),
  ``task_type`` ``Base`` with references or ``CustomVoice`` without, and ``false``/``null``
  for ``x_vector_only_mode``, ``non_streaming_mode`` and ``word_timestamps``. Refused, naming
  the field: what S2 cannot do (``VoiceDesign``, speaker embeddings, word timestamps, x-vector
  only cloning, Qwen3's prompt modes).

Differences left from the peers (docs/engines.md lists them with every field): ``input.done``
ends the session (vLLM-Omni keeps it open for another utterance and ends it with
``session.close``);
the default ``split_granularity`` is ``sentence`` (vLLM-Omni: ``none``), the default
``response_format`` ``pcm`` (vLLM-Omni: ``wav``) and the default ``stream_audio`` ``true``;
seeds are 0 … 2**63-1; reference audio is inline only (``data:`` URLs or base64).

Sentences are cut as the text arrives: only the new piece is read (``SentenceCutter``, linear
in the text however it is split), a sentence is complete when its end mark is followed by more
text (so ``"3."`` then ``"5 kg."`` is not cut in the middle), and ``input.done`` flushes the
rest. Each sentence is one speech request through the scheduler, spoken one after another,
sentence ``i`` with seed ``batch_seed(seed, i)``: its audio is exactly what
``POST /v1/audio/speech`` gives for that sentence with that seed and the session's voice; inline
references are encoded once per session.

Access is the HTTP routes': the Host and Origin checks (a cross-site WebSocket is refused: the
browser sends an ``Origin`` that is not ours), and the key in ``Authorization: Bearer KEY`` or,
for browsers (which cannot set headers on a WebSocket), as the subprotocol
``base64url.bearer.<base64url(KEY)>`` offered together with ``sailfish.speech.v1`` (the one the
server selects; the key is never echoed). A handshake that offers subprotocols without
``sailfish.speech.v1`` is refused (400) before the upgrade, so no offered value (a key) is ever
logged. A key in the URL is never read (URLs land in logs). These are refused before the
upgrade, with an HTTP status and the JSON error body, and so is a client (a peer address) with
``max_streams_per_client`` sessions open already (429), and any client while the server has
``max_streams`` sessions open in all (503, ``too_many_streams``, with ``Retry-After``).

Bounds: a sentence takes one of the server's ``--max-queue`` places while it is spoken (the
session holds none while it waits for text; a sentence waits for a place up to the request
timeout, then the error ``queue_full``); a session starts only while a place is free. A
``session.config`` without references is at most ``Limits.request_bytes``, with them at most
the body limit; any later message at most a text piece's worst JSON size (checked before it is
parsed; large messages are parsed on an executor thread). A piece and an unfinished sentence
are at most ``max_text_chars`` characters; text waiting to be spoken at most ``max_text_chars``
before the server stops reading (back-pressure, not an error). The idle clock restarts only
when a message completes a sentence (or configures, or ends, the session) and when a sentence
has been spoken: text that adds no sentence (white space, an endless unfinished one) does not
keep a session alive past ``stream_idle_seconds``. A client that goes away cancels its sentence
in the scheduler within a frame.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
import uuid
from dataclasses import dataclass, replace

import torch
from aiohttp import WSMsgType, web

from ...params import Rule, batch_seed
from ...text.plan import SentenceCutter
from ..http import formats
from ..http.bodies import check_size, off_loop, parse_json
from ..http.errors import ApiError, bad, detail
from ..http.fields import choice, integer, reject_unknown
from ..http.logs import log
from ..limits import Limits
from ..request import SpeechRequest
from ..service import Service
from .openai import default_voice, instructions_prefix, parse_openai
from .speak import reports

PROTOCOL = "sailfish.speech.v1"  # the subprotocol the server selects
KEY_PROTOCOL = "base64url.bearer."  # + the key in base64url: browsers' way to send the key
SPLITS = ("sentence", "clause", "none")
OPENAI_CONFIG = {"model", "voice", "references", "ref_audio", "ref_text", "response_format",
                 "seed", "temperature", "top_p", "top_k", "max_new_tokens",
                 "repetition_penalty", "instructions", "speed"}
PEER_CONFIG = {"speaker", "stream_audio", "split_granularity", "task_type", "language",
               "initial_codec_chunk_frames", "non_streaming_mode", "x_vector_only_mode",
               "speaker_embedding", "word_timestamps"}  # SGLang-Omni's / vLLM-Omni's
CONFIG_FIELDS = {"type"} | OPENAI_CONFIG | PEER_CONFIG
CODEC_CHUNK_FRAMES = Rule(0, 1 << 20, integer=True)  # accepted and checked; no effect on S2
INLINE_PARSE_BYTES = 16 * 1024  # larger messages are parsed on an executor thread
CLOSE_NORMAL, CLOSE_POLICY, CLOSE_ERROR, CLOSE_TRY_LATER = 1000, 1008, 1011, 1013
END = object()  # queued after the last sentence


# ---------------------------------------------------------------- the handshake
def offered_protocols(headers) -> list[str] | None:
    """The subprotocols the client offers, as aiohttp reads them (the first header)."""
    value = headers.get("Sec-WebSocket-Protocol")
    return None if value is None else [token.strip() for token in value.split(",")]


def check_protocols(headers) -> None:
    """A client that offers subprotocols must offer ours: otherwise aiohttp would log the
    offered values (a key among them) and select none. The values are never quoted."""
    offered = offered_protocols(headers)
    if offered is None or PROTOCOL in offered:
        return
    if any(token.startswith(KEY_PROTOCOL) for token in offered):
        message = (f"sec-websocket-protocol: a key offered as a subprotocol must be offered "
                   f"together with {PROTOCOL}")
    else:
        message = (f"sec-websocket-protocol: this route speaks {PROTOCOL}; offer it, or no "
                   "subprotocol")
    raise ApiError(400, message, "sec-websocket-protocol", "unsupported_subprotocol")


def socket_authorization(headers) -> str | None:
    """What ``Service.authorize`` checks: the ``Authorization`` header, else the key a browser
    offered as a ``base64url.bearer.<key>`` subprotocol (never a query parameter)."""
    header = headers.get("Authorization")
    if header is not None:
        return header
    for token in offered_protocols(headers) or ():
        if token.startswith(KEY_PROTOCOL):
            encoded = token[len(KEY_PROTOCOL):]
            try:
                key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
                return "Bearer " + key.decode("utf-8")
            except (binascii.Error, ValueError):
                return "Bearer "  # not a key of ours: the usual 401
    return None


async def speech_stream(service: Service, request: web.Request) -> web.StreamResponse:
    """The route's handler (Host and Origin already checked by ``routes.endpoint``)."""
    check_protocols(request.headers)  # a 400 before the upgrade
    service.authorize(socket_authorization(request.headers))  # a 401 before the upgrade
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), max_msg_size=message_limit(service.limits))
    if not ws.can_prepare(request).ok:
        raise ApiError(426, "this route is a WebSocket; connect with ws:// (see the protocol in "
                            "the README)", None, "upgrade_required", {"Upgrade": "websocket"})
    with service.stream_opened(request.remote):  # a 429 or 503 before the upgrade
        await ws.prepare(request)
        session = Session(service, ws)
        try:
            service.check_place()
            await session.run()
        except ApiError as e:
            if e.status in (403, 429):
                log.warning("Sailfish serve: stream from %s refused: %s", request.remote,
                            e.message)
            await session.fail(e)
        except ConnectionResetError:  # the client left while audio was being sent
            pass
        except Exception:  # noqa: BLE001 - logged here, never shown to the client
            log.exception("Sailfish serve: speech stream failed")
            await session.fail(ApiError(500, "internal server error; see the server log"))
        finally:
            if not ws.closed:
                await ws.close(code=CLOSE_NORMAL)
    return ws


def message_limit(limits: Limits) -> int:
    """Bytes of the largest client message: a config with its inline references."""
    return max(limits.max_body_bytes, text_message_limit(limits))


def text_message_limit(limits: Limits) -> int:
    """Bytes of any message after ``session.config`` (a text piece at JSON's worst)."""
    return 12 * limits.max_text_chars + 1024


# ---------------------------------------------------------------- messages
def parse_message(data: bytes, limits: Limits) -> dict:
    """One client message (the JSON checks of request bodies: structure budget, depth, lone
    surrogates), errors naming ``message`` or the field."""
    message = parse_json(data, limits, "message")
    if not isinstance(message, dict):
        raise bad("message", f"must be a JSON object, got {type(message).__name__}")
    kind = message.get("type")
    if not isinstance(kind, str):
        raise bad("type", "every message needs a type: session.config, input.text or "
                          "input.done")
    check_size(message, len(data), limits, "message")
    return message


@dataclass
class StreamConfig:
    request: SpeechRequest  # every sentence's request but its text
    prefix: str = ""  # the instructions tag, before each sentence
    split: str = "sentence"
    stream_audio: bool = True
    format: str = "pcm"


def parse_config(message: dict, service: Service) -> StreamConfig:
    """``session.config`` → what every sentence is spoken with: the speech route's fields
    (checked by its parser, errors naming them) and the session fields (module docstring)."""
    reject_unknown(message, CONFIG_FIELDS)
    fields = {k: v for k, v in message.items() if k in OPENAI_CONFIG}
    if message.get("speaker") is not None:
        if fields.get("voice") not in (None, message["speaker"]):
            raise bad("speaker", "is another name for voice; send one of them")
        fields["voice"] = message["speaker"]
    stream_audio = message.get("stream_audio", True)
    if not isinstance(stream_audio, bool):
        raise bad("stream_audio", f"must be true or false, got {stream_audio!r}")
    split = choice(message, "split_granularity", "sentence", SPLITS)
    peer_fields(message)
    fmt = fields.get("response_format", "pcm")
    if stream_audio and fmt != "pcm":
        raise bad("response_format", f"stream_audio sends raw PCM (s16le, mono) as it is "
                                     f"decoded; send pcm, or stream_audio false for one "
                                     f"{fmt!r} file per sentence, got {fmt!r}")
    prefix = instructions_prefix(fields, service.limits)
    fields.pop("instructions", None)
    request = parse_openai({**fields, "response_format": fmt, "input": "-"}, service.limits,
                           service.model_names)
    if request.references and message.get("task_type") == "CustomVoice":
        raise bad("task_type", "CustomVoice names a saved voice; with references send Base "
                               "(or no task_type)")
    if not request.references and message.get("task_type") == "Base":
        raise bad("task_type", "Base clones the references (ref_audio or references); send "
                               "them, or CustomVoice with a voice")
    return StreamConfig(default_voice(request, service), prefix, split, stream_audio,
                        request.format)


def peer_fields(message: dict) -> None:
    """SGLang-Omni's / vLLM-Omni's session fields that S2 has no use for: accepted where they
    ask for nothing S2 cannot do, refused (naming the field) where they do."""
    language = message.get("language")
    if language is not None and (not isinstance(language, str) or len(language) > 64):
        raise bad("language", "must be a language name (S2 reads the language from the text)")
    integer(message, "initial_codec_chunk_frames", None, CODEC_CHUNK_FRAMES)
    task = choice(message, "task_type", None, ("Base", "CustomVoice", "VoiceDesign"))
    if task == "VoiceDesign":
        raise bad("task_type", "S2 does not design voices from a description; send a voice or "
                               "references (instructions take a style cue)")
    refused = {
        "x_vector_only_mode": "S2 clones a voice from the reference audio and its transcript, "
                              "never from a speaker vector alone",
        "non_streaming_mode": "is a Qwen3-TTS prompt setting; S2 has one prompt form",
        "word_timestamps": "this server has no forced aligner (no word timestamps)",
    }
    for name, why in refused.items():
        value = message.get(name)
        if value is not None and not isinstance(value, bool):
            raise bad(name, f"must be true or false, got {value!r}")
        if value:
            raise bad(name, f"{why}; send false or leave it out")
    if message.get("speaker_embedding") is not None:
        raise bad("speaker_embedding", "S2 takes reference audio (ref_audio, references) or a "
                                       "saved voice, not speaker embeddings")


def sentence_request(config: StreamConfig, text: str, index: int) -> SpeechRequest:
    """Sentence ``index`` of the session: its checked settings (seed ``batch_seed(seed,
    index)``: nothing checked again), voice and references (the same objects: encoded once per
    session), PCM streamed, stretched on its own (docs/finished-audio.md); no loudness (refused
    in ``session.config``: a session's sentences are not one mix)."""
    request, text = config.request, config.prefix + text
    speech = replace(request.speech, text=text, seed=batch_seed(request.speech.seed, index))
    return replace(request, text=text, format="pcm", stream="audio", speech=speech)


def cut_sentences(buffer: str) -> tuple[list[str], str]:
    """The complete sentences at the start of ``buffer`` and the text left (``text.plan``'s
    sentence rule; a sentence that reaches the end of the buffer may still grow)."""
    cutter = SentenceCutter()
    done = cutter.feed(buffer)
    return done, cutter.pending


# ---------------------------------------------------------------- one session
class Session:
    """One connection: a reader (client messages → sentences) and a speaker (sentences →
    scheduler → audio), run together until the last sentence is spoken or either fails."""

    def __init__(self, service: Service, ws: web.WebSocketResponse):
        self.service = service
        self.limits = service.limits
        self.ws = ws
        self.id = uuid.uuid4().hex
        self.config: StreamConfig | None = None
        self.cutter = SentenceCutter()
        self.utterance: list[str] = []  # split "none": the sentences held until input.done
        self.sentences: asyncio.Queue = asyncio.Queue()  # complete sentences, then END
        self.queued_chars = 0  # of the sentences waiting to be spoken
        self.drained = asyncio.Event()  # set while queued_chars is under the limit
        self.drained.set()
        self.speaking = False
        self.spoken = 0
        self.idle_since = time.monotonic()  # the last progress: a sentence added or spoken
        self.task = None  # the scheduler task of the sentence being spoken
        self._send = asyncio.Lock()

    # ---------------------------------------------------------------- run
    async def run(self) -> None:
        """Until the speaker has said everything after ``input.done``, the client leaves, or
        either side fails (its error raised here)."""
        speaker = asyncio.ensure_future(self.speak())
        reader = asyncio.ensure_future(self.read())
        try:
            done, _ = await asyncio.wait({speaker, reader}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises a failure; the reader returns when the client left
        finally:
            for task in (speaker, reader):
                task.cancel()
            await asyncio.gather(speaker, reader, return_exceptions=True)
            self.stop()

    def stop(self) -> None:
        """Cancel the sentence in the scheduler (the client left, or the session ended)."""
        if self.task is not None:
            self.task.cancel()

    async def fail(self, error: ApiError) -> None:
        """The error message, then the close (when the client can still hear it)."""
        if self.ws.closed:
            return
        code = {429: CLOSE_TRY_LATER, 500: CLOSE_ERROR}.get(error.status, CLOSE_POLICY)
        try:
            await self.send_json({"type": "error", "error": error.body()["error"]})
            await self.ws.close(code=code, message=error.message[:120].encode("utf-8", "ignore"))
        except (ConnectionResetError, RuntimeError):
            pass

    async def send_json(self, payload: dict) -> None:
        async with self._send:
            await self.ws.send_str(json.dumps(payload))

    # ---------------------------------------------------------------- reader
    async def read(self) -> None:
        """Client messages until the client leaves (then it returns). After ``input.done``
        it only watches: any further message is an error."""
        finished = False
        while True:
            if not finished:
                await self.drained.wait()  # back-pressure: the sentences wait to be spoken
            message = await self.receive(idle=not finished)
            if message is None:  # the client closed or left
                return
            if finished:
                raise bad("type", f"{detail(message['type'])[:60]!r} after input.done; the "
                                  "session is ending", code="session_ending")
            finished = await self.handle(message)

    async def receive(self, idle: bool = True) -> dict | None:
        """The next JSON message; ``None`` when the client closed or left. With ``idle``: an
        error once nothing has made progress for the idle time while nothing is being
        spoken."""
        while True:
            timeout = None
            if idle:
                left = self.idle_since + self.limits.stream_idle_seconds - time.monotonic()
                timeout = max(left, 0.001)  # 0 would mean no timeout to aiohttp
            try:
                msg = await self.ws.receive(timeout=timeout)
            except asyncio.TimeoutError:
                if self.speaking or not self.sentences.empty():
                    self.idle_since = time.monotonic()  # the client listens to what it sent
                    continue
                raise ApiError(408, f"no sentence for {self.limits.stream_idle_seconds:g} s; "
                                    "the session is closed", None, "idle_timeout") from None
            if msg.type == WSMsgType.TEXT:
                return await self.parse(msg.data)
            if msg.type == WSMsgType.BINARY:
                raise bad("message", "binary messages are not accepted; send JSON text "
                                     "messages (session.config, input.text, input.done)")
            return None  # CLOSE, CLOSED, ERROR (a message over the size limit: closed 1009)

    async def parse(self, text: str) -> dict:
        """A message within its kind's size (after the config: a text piece's), parsed on an
        executor thread when it is large."""
        data = text.encode("utf-8")
        if self.config is not None and len(data) > text_message_limit(self.limits):
            raise bad("message", f"is {len(data)} bytes; after session.config a message is at "
                                 f"most {text_message_limit(self.limits)} bytes (input.text "
                                 f"pieces of at most {self.limits.max_text_chars} characters)",
                      413)
        if len(data) > INLINE_PARSE_BYTES:
            return await off_loop(parse_message, data, self.limits)
        return parse_message(data, self.limits)

    async def handle(self, message: dict) -> bool:
        """One message; ``True`` for ``input.done``."""
        kind = message["type"]
        if kind == "session.config":
            if self.config is not None:
                raise bad("type", "session.config was already sent; send it once, first",
                          code="already_configured")
            self.config = await off_loop(parse_config, message, self.service)
            self.cutter = SentenceCutter(clauses=self.config.split == "clause")
            self.idle_since = time.monotonic()
            configured = {"type": "session.configured", "session_id": self.id,
                          "seed": self.config.request.speech.seed,
                          "format": self.config.format,
                          "response_format": self.config.format,
                          "stream_audio": self.config.stream_audio,
                          "split_granularity": self.config.split, "channels": 1}
            if self.config.format == "pcm":
                configured.update(encoding="s16le", sample_width=2)
            await self.send_json(configured)
            return False
        if kind not in ("input.text", "input.done"):
            raise bad("type", f"unknown message type {detail(kind)[:60]!r}; send "
                              "session.config, input.text or input.done",
                      code="unknown_message_type")
        if self.config is None:
            raise bad("type", f"{kind} before session.config; send session.config first",
                      code="not_configured")
        if kind == "input.done":
            reject_unknown(message, {"type"})
            self.add(self.cutter.finish(), last=True)
            self.sentences.put_nowait(END)
            self.idle_since = time.monotonic()
            return True
        reject_unknown(message, {"type", "text"})
        piece = message.get("text")
        if not isinstance(piece, str):
            raise bad("text", f"must be a string, got {type(piece).__name__}")
        if len(piece) > self.limits.max_text_chars:
            raise bad("text", f"is {len(piece)} characters; the limit is "
                              f"{self.limits.max_text_chars}")
        sentences = self.cutter.feed(piece)  # reads only the new piece
        if self.cutter.pending_chars > self.limits.max_text_chars:
            raise bad("text", f"makes an unfinished sentence of {self.cutter.pending_chars} "
                              f"characters; the limit is {self.limits.max_text_chars} (end "
                              "sentences with . ! or ?)")
        if sentences:
            self.idle_since = time.monotonic()  # only text that completes a sentence counts
            self.add(sentences)
        return False

    def add(self, sentences: list[str], last: bool = False) -> None:
        """Queue complete sentences (split "none": hold them, then queue all as one text)."""
        for sentence in sentences:
            if len(sentence) > self.limits.max_text_chars:
                raise bad("text", f"has a sentence of {len(sentence)} characters; the limit "
                                  f"is {self.limits.max_text_chars}")
        if self.config.split == "none":
            self.utterance += sentences
            size = sum(len(s) + 1 for s in self.utterance) + self.cutter.pending_chars
            if size > self.limits.max_text_chars:
                raise bad("text", f"makes an utterance of {size} characters; with "
                                  f"split_granularity none the limit is "
                                  f"{self.limits.max_text_chars} (use sentence)")
            if not last or not self.utterance:
                return
            sentences, self.utterance = [" ".join(self.utterance)], []
        for sentence in sentences:
            self.queued_chars += len(sentence)
            self.sentences.put_nowait(sentence)
        if self.queued_chars >= self.limits.max_text_chars:
            self.drained.clear()

    # ---------------------------------------------------------------- speaker
    async def speak(self) -> None:
        """Speak each sentence as it comes, in order; ``session.done`` after the last. A
        sentence takes a queue place while it is spoken (waiting for one if none is free)."""
        while True:
            sentence = await self.sentences.get()
            if sentence is END:
                await self.send_json({"type": "session.done", "utterance_index": 0,
                                      "total_sentences": self.spoken})
                return
            self.speaking = True
            try:
                async with self.service.admitted_soon(self.limits.timeout_seconds):
                    await self.say(sentence, self.spoken)
            finally:
                self.speaking = False
                self.idle_since = time.monotonic()
                self.queued_chars -= len(sentence)
                if self.queued_chars < self.limits.max_text_chars:
                    self.drained.set()
            self.spoken += 1

    async def say(self, sentence: str, index: int) -> None:
        """One sentence through the scheduler, its audio sent as it is decoded (or in one
        frame at its end, without ``stream_audio``)."""
        items, emit = reports()
        config = self.config
        self.task = self.service.scheduler.submit(sentence_request(config, sentence, index),
                                                  emit)
        head = {"sentence_index": index, "utterance_index": 0}
        try:
            samples, sent, held, rate = 0, 0, [], 0
            while True:
                kind, value = await items.get()
                if kind == "error":
                    raise value
                if kind == "start":
                    rate = value["sample_rate"]
                    await self.send_json({"type": "audio.start", **head,
                                          "sentence_text": sentence, "format": config.format,
                                          "sample_rate": rate, "seed": value["seed"]})
                elif kind == "chunk":
                    samples += value.shape[0]
                    if config.stream_audio:
                        sent += await self.send_audio(formats.pcm16(value))
                    else:
                        held.append(value)
                else:  # done
                    if held:
                        sent += await self.send_audio(await off_loop(
                            formats.encode, torch.cat(held), rate, config.format))
                    await self.send_json({"type": "audio.done", **head, "samples": samples,
                                          "total_bytes": sent, "error": False})
                    return
        finally:
            self.task.cancel()  # a no-op once it is done
            self.task = None

    async def send_audio(self, data: bytes) -> int:
        if data:
            async with self._send:
                await self.ws.send_bytes(data)
        return len(data)
