"""``WS /v1/audio/speech/stream``: text streamed in, speech streamed out (the shape SGLang-Omni
and vLLM-Omni serve, for voice agents that feed an LLM's tokens straight to TTS).

Client → server (JSON text messages)::

    {"type": "session.config", "voice": "alice", "seed": 7, ...}   first, once
    {"type": "input.text", "text": "Hello the"}                     any number of pieces
    {"type": "input.done"}                                          the rest is spoken, then the end

Server → client::

    {"type": "session.configured", "seed", "format": "pcm", "channels": 1, "sample_width": 2}
    for each sentence i, in order:
        {"type": "audio.start", "sentence_index": i, "sentence_text", "sample_rate", "seed", ...}
        binary frames: s16le mono PCM at sample_rate, as the frames are decoded
        {"type": "audio.done", "sentence_index": i, "samples"}
    {"type": "session.done", "total_sentences"}
    or, on any error: {"type": "error", "error": {message, type, param, code}}, then the close

Sentences are cut as the text arrives with the long-text splitter (``text.plan``): a sentence is
complete when its end mark is followed by more text (a space, a blank line …), so ``"3."`` then
``"5 kg."`` is not cut in the middle; ``input.done`` flushes whatever is left. Each sentence is
one speech request through the scheduler (``Scheduler.submit``, like the HTTP routes), spoken
one after another, sentence ``i`` with seed ``batch_seed(seed, i)``: its audio is exactly what
``POST /v1/audio/speech`` gives for that sentence with that seed and the session's voice. The
sentences do not share history, so a voice (saved or reference) keeps them one speaker.

Access is the HTTP routes': the Host and Origin checks (a cross-site WebSocket is refused: the
browser sends an ``Origin`` that is not ours), and the key in ``Authorization: Bearer KEY`` or,
for browsers (which cannot set headers on a WebSocket), as the subprotocol
``base64url.bearer.<base64url(KEY)>`` offered together with ``sailfish.speech.v1`` (the one the
server selects; the key is never echoed). A key in the URL is never read (URLs land in logs).
These are refused before the upgrade, with an HTTP status and the JSON error body.

Bounds: one session holds one of the server's ``--max-queue`` places for its lifetime (when none
is free: an error ``queue_full``, then the close); a message is at most a few times the text
limit; a piece and an unfinished sentence at most ``max_text_chars`` characters; text waiting to
be spoken at most ``max_text_chars`` before the server stops reading (back-pressure, not an
error); no message for ``stream_idle_seconds`` while nothing is being spoken ends the session;
a client that goes away cancels its sentence in the scheduler within a frame.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from aiohttp import WSMsgType, web

from ..params import batch_seed, pick_seed
from ..text.plan import SENTENCE, check_text
from . import formats
from .bodies import json_depth
from .logs import log
from .openai import parse_openai
from .requests import ApiError, Limits, SpeechRequest, bad, detail, reject_unknown
from .service import Service

PROTOCOL = "sailfish.speech.v1"  # the subprotocol the server selects
KEY_PROTOCOL = "base64url.bearer."  # + the key in base64url: browsers' way to send the key
CONFIG_FIELDS = {"type", "model", "voice", "references", "ref_audio", "ref_text",
                 "response_format", "seed", "temperature", "top_p", "top_k", "max_new_tokens",
                 "repetition_penalty"}
CLOSE_NORMAL, CLOSE_POLICY, CLOSE_ERROR, CLOSE_TRY_LATER = 1000, 1008, 1011, 1013
END = object()  # queued after the last sentence


# ---------------------------------------------------------------- the handshake
def socket_authorization(headers) -> str | None:
    """What ``Service.authorize`` checks: the ``Authorization`` header, else the key a browser
    offered as a ``base64url.bearer.<key>`` subprotocol (never a query parameter)."""
    header = headers.get("Authorization")
    if header is not None:
        return header
    for token in headers.get("Sec-WebSocket-Protocol", "").split(","):
        token = token.strip()
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
    service.authorize(socket_authorization(request.headers))  # a 401 before the upgrade
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), max_msg_size=message_limit(service.limits))
    if not ws.can_prepare(request).ok:
        raise ApiError(426, "this route is a WebSocket; connect with ws:// (see the protocol in "
                            "the README)", None, "upgrade_required", {"Upgrade": "websocket"})
    await ws.prepare(request)
    session = Session(service, ws)
    try:
        with service.admitted():  # held for the session's lifetime
            await session.run()
    except ApiError as e:
        if e.status in (403, 429):
            log.warning("Sailfish serve: stream from %s refused: %s", request.remote, e.message)
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
    """Bytes of one client message: a config with its inline references, or a text piece
    (JSON may escape a character as up to 12 bytes)."""
    return max(limits.max_body_bytes, 12 * limits.max_text_chars + 1024)


# ---------------------------------------------------------------- messages
def parse_message(data: str, limits: Limits) -> dict:
    if json_depth(data.encode("utf-8", "replace")) > limits.max_json_depth:
        raise bad("message", f"nests deeper than {limits.max_json_depth} levels")
    try:
        message = json.loads(data)
    except json.JSONDecodeError as e:
        raise bad("message", f"is not valid JSON ({e})") from None
    if not isinstance(message, dict):
        raise bad("message", f"must be a JSON object, got {type(message).__name__}")
    kind = message.get("type")
    if not isinstance(kind, str):
        raise bad("type", "every message needs a type: session.config, input.text or "
                          "input.done")
    return message


def parse_config(message: dict, service: Service) -> SpeechRequest:
    """``session.config`` → the request every sentence is spoken with: the speech route's
    fields (checked by its parser, errors naming them) except the text and the streaming ones,
    and PCM only."""
    reject_unknown(message, CONFIG_FIELDS)
    fields = {"response_format": "pcm", **message, "input": "-"}
    del fields["type"]
    config = parse_openai(fields, service.limits, service.model_names)
    if config.format != "pcm":
        raise bad("response_format", f"the stream sends raw PCM (s16le, mono); send pcm, got "
                                     f"{config.format!r}")
    return config


def sentence_request(config: SpeechRequest, text: str, seed: int) -> SpeechRequest:
    return SpeechRequest(text, config.voice, config.voice_param, config.references, "pcm",
                         "audio", seed, config.temperature, config.top_p, config.top_k,
                         config.max_new_tokens, config.max_bytes)


def cut_sentences(buffer: str) -> tuple[list[str], str]:
    """The complete sentences at the start of ``buffer`` and the text left (``text.plan``'s
    sentence rule; a sentence that reaches the end of the buffer may still grow)."""
    done, end = [], 0
    for match in SENTENCE.finditer(buffer):
        if match.end() >= len(buffer):
            break
        if match.group().strip():
            done.append(match.group().strip())
        end = match.end()
    return done, buffer[end:]


# ---------------------------------------------------------------- one session
class Session:
    """One connection: a reader (client messages → sentences) and a speaker (sentences →
    scheduler → audio), run together until the last sentence is spoken or either fails."""

    def __init__(self, service: Service, ws: web.WebSocketResponse):
        self.service = service
        self.limits = service.limits
        self.ws = ws
        self.config: SpeechRequest | None = None
        self.seed = 0
        self.pending = ""  # text of the sentence still being written
        self.sentences: asyncio.Queue = asyncio.Queue()  # complete sentences, then END
        self.queued_chars = 0  # of the sentences waiting to be spoken
        self.drained = asyncio.Event()  # set while queued_chars is under the limit
        self.drained.set()
        self.speaking = False
        self.spoken = 0
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
        error once nothing has come for the idle time while nothing is being spoken."""
        while True:
            try:
                timeout = self.limits.stream_idle_seconds if idle else None
                msg = await self.ws.receive(timeout=timeout)
            except asyncio.TimeoutError:
                if self.speaking or not self.sentences.empty():
                    continue  # the client is listening to what it sent
                raise ApiError(408, f"no message for {self.limits.stream_idle_seconds:g} s; "
                                    "the session is closed", None, "idle_timeout") from None
            if msg.type == WSMsgType.TEXT:
                return parse_message(msg.data, self.limits)
            if msg.type == WSMsgType.BINARY:
                raise bad("message", "binary messages are not accepted; send JSON text "
                                     "messages (session.config, input.text, input.done)")
            return None  # CLOSE, CLOSED, ERROR (a message over the size limit: closed 1009)

    async def handle(self, message: dict) -> bool:
        """One message; ``True`` for ``input.done``."""
        kind = message["type"]
        if kind == "session.config":
            if self.config is not None:
                raise bad("type", "session.config was already sent; send it once, first",
                          code="already_configured")
            self.config = parse_config(message, self.service)
            self.seed = pick_seed(self.config.seed)
            await self.send_json({"type": "session.configured", "seed": self.seed,
                                  "format": "pcm", "encoding": "s16le", "channels": 1,
                                  "sample_width": 2})
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
            self.queue(*cut_sentences(self.pending + "\n\n"))
            self.sentences.put_nowait(END)
            return True
        reject_unknown(message, {"type", "text"})
        piece = message.get("text")
        if not isinstance(piece, str):
            raise bad("text", f"must be a string, got {type(piece).__name__}")
        check_text(piece, "text")
        if len(piece) > self.limits.max_text_chars:
            raise bad("text", f"is {len(piece)} characters; the limit is "
                              f"{self.limits.max_text_chars}")
        sentences, rest = cut_sentences(self.pending + piece)
        if len(rest) > self.limits.max_text_chars:
            raise bad("text", f"makes an unfinished sentence of {len(rest)} characters; the "
                              f"limit is {self.limits.max_text_chars} (end sentences with . ! "
                              "or ?)")
        self.queue(sentences, rest)
        return False

    def queue(self, sentences: list[str], rest: str) -> None:
        self.pending = rest
        for sentence in sentences:
            if len(sentence) > self.limits.max_text_chars:
                raise bad("text", f"has a sentence of {len(sentence)} characters; the limit "
                                  f"is {self.limits.max_text_chars}")
            self.queued_chars += len(sentence)
            self.sentences.put_nowait(sentence)
        if self.queued_chars >= self.limits.max_text_chars:
            self.drained.clear()

    # ---------------------------------------------------------------- speaker
    async def speak(self) -> None:
        """Speak each sentence as it comes, in order; ``session.done`` after the last."""
        while True:
            sentence = await self.sentences.get()
            if sentence is END:
                await self.send_json({"type": "session.done", "total_sentences": self.spoken})
                return
            self.speaking = True
            try:
                await self.say(sentence, self.spoken)
            finally:
                self.speaking = False
                self.queued_chars -= len(sentence)
                if self.queued_chars < self.limits.max_text_chars:
                    self.drained.set()
            self.spoken += 1

    async def say(self, sentence: str, index: int) -> None:
        """One sentence through the scheduler, its audio sent as it is decoded."""
        loop = asyncio.get_running_loop()
        items: asyncio.Queue = asyncio.Queue()

        def emit(kind: str, value) -> None:  # on the scheduler's thread
            try:
                loop.call_soon_threadsafe(items.put_nowait, (kind, value))
            except RuntimeError:  # the loop is closed
                pass

        seed = batch_seed(self.seed, index)
        self.task = self.service.scheduler.submit(sentence_request(self.config, sentence, seed),
                                                  emit)
        try:
            samples = 0
            while True:
                kind, value = await items.get()
                if kind == "error":
                    raise value
                if kind == "start":
                    await self.send_json({"type": "audio.start", "sentence_index": index,
                                          "sentence_text": sentence, "format": "pcm",
                                          "sample_rate": value["sample_rate"],
                                          "seed": value["seed"]})
                elif kind == "chunk":
                    samples += value.shape[0]
                    data = formats.pcm16(value)
                    async with self._send:
                        await self.ws.send_bytes(data)
                else:  # done
                    await self.send_json({"type": "audio.done", "sentence_index": index,
                                          "samples": samples})
                    return
        finally:
            self.task.cancel()  # a no-op once it is done
            self.task = None
