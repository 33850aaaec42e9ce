"""One connection of ``WS /v1/audio/speech/stream`` (``speech_stream``: the protocol): a reader
(client messages → sentences, ``stream_config``) and a speaker (sentences → scheduler → audio)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import torch
from aiohttp import WSMsgType, web

from ...speech.words import place_words
from ...text.plan import SentenceCutter
from ..http import formats
from ..http.bodies import off_loop
from ..http.errors import ApiError, bad, detail
from ..http.fields import reject_unknown
from ..service import Service
from .speak import reports
from .stream_config import (StreamConfig, parse_config, parse_message, sentence_request,
                            text_message_limit)

INLINE_PARSE_BYTES = 16 * 1024  # larger messages are parsed on an executor thread
CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_POLICY, CLOSE_ERROR, CLOSE_TRY_LATER = (
    1000, 1001, 1008, 1011, 1013)
END = object()  # queued after the last sentence


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
        self.failed = False  # the error was said (once: the session's own or the shutdown's)
        self.timer = None  # the word aligner, with word_timestamps
        self.audio_seconds = 0.0  # audio sent before the current sentence's

    # ---------------------------------------------------------------- run
    async def run(self) -> None:
        """Until the speaker has said everything after ``input.done``, the client leaves, or
        either side fails (its error raised here)."""
        speaker = asyncio.ensure_future(self.speak())
        reader = asyncio.ensure_future(self.read())
        self.service.sessions.add(self)  # told when the server stops (Service.shutdown)
        try:
            done, _ = await asyncio.wait({speaker, reader}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises a failure; the reader returns when the client left
        finally:
            for task in (speaker, reader):
                task.cancel()
            await asyncio.gather(speaker, reader, return_exceptions=True)
            self.service.sessions.discard(self)
            self.stop()

    def stop(self) -> None:
        """Cancel the sentence in the scheduler (the client left, or the session ended)."""
        if self.task is not None:
            self.task.cancel()

    async def fail(self, error: ApiError) -> None:
        """The error message, then the close (when the client can still hear it)."""
        if self.ws.closed or self.failed:
            return
        self.failed = True
        code = {429: CLOSE_TRY_LATER, 500: CLOSE_ERROR, 503: CLOSE_GOING_AWAY}.get(
            error.status, CLOSE_POLICY)
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
            await self.configure(message)
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
        self.take_text(message)
        return False

    async def configure(self, message: dict) -> None:
        """``session.config``: once, first; answered with ``session.configured``."""
        if self.config is not None:
            raise bad("type", "session.config was already sent; send it once, first",
                      code="already_configured")
        config = await off_loop(parse_config, message, self.service)
        if config.word_timestamps:
            self.timer = await off_loop(self.service.word_timer)  # none: said now
        self.config = config
        self.cutter = SentenceCutter(clauses=config.split == "clause")
        self.idle_since = time.monotonic()
        configured = {"type": "session.configured", "session_id": self.id,
                      "seed": config.request.speech.seed, "format": config.format,
                      "response_format": config.format, "stream_audio": config.stream_audio,
                      "split_granularity": config.split, "channels": 1,
                      "word_timestamps": config.word_timestamps}
        if config.format == "pcm":
            configured.update(encoding="s16le", sample_width=2)
        await self.send_json(configured)

    def take_text(self, message: dict) -> None:
        """``input.text``: a piece, its complete sentences queued."""
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
        self.task = self.service.scheduler.submit(sentence_request(self.config, sentence, index),
                                                  emit)
        try:
            await self.relay(items, sentence, {"sentence_index": index, "utterance_index": 0})
        finally:
            self.task.cancel()  # a no-op once it is done
            self.task = None

    async def relay(self, items, sentence: str, head: dict) -> None:
        """The sentence's reports as messages: ``audio.start``, its audio, ``audio.done``."""
        config = self.config
        samples, sent, held, rate = 0, 0, [], 0
        while True:
            kind, value = await items.get()
            if kind == "error":
                raise value
            if kind == "start":
                rate = value["sample_rate"]
                await self.send_json({"type": "audio.start", **head, "sentence_text": sentence,
                                      "format": config.format, "sample_rate": rate,
                                      "seed": value["seed"]})
            elif kind == "chunk":
                samples += value.shape[0]
                if config.stream_audio:
                    sent += await self.send_audio(formats.pcm16(value))
                if not config.stream_audio or config.word_timestamps:
                    held.append(value)
            else:  # done
                await self.sentence_done(sentence, head, held, rate, samples, sent)
                return

    async def sentence_done(self, sentence: str, head: dict, held: list, rate: int,
                            samples: int, sent: int) -> None:
        """The sentence's end: its file (without ``stream_audio``: the ``held`` chunks),
        ``audio.done``, then its words' times (``word_timestamps``)."""
        config = self.config
        whole = torch.cat(held) if held else torch.zeros(0)
        if held and not config.stream_audio:
            sent += await self.send_audio(await off_loop(
                formats.encode, whole, rate, config.format))
        await self.send_json({"type": "audio.done", **head, "samples": samples,
                              "total_bytes": sent, "error": False})
        if config.word_timestamps:  # the sentence's audio is out: its words' times
            words = await off_loop(self.time_words, sentence, whole, rate)
            await self.send_json({"type": "word_timestamps", **head,
                                  "audio_offset": round(self.audio_seconds, 3),
                                  "words": words})
        self.audio_seconds += samples / rate if rate else 0.0

    def time_words(self, sentence: str, wave, rate: int) -> list[dict]:
        """The sentence's words with their start and end in seconds from its audio's start
        (``audio_offset``: where that audio starts in the session's), by the aligner."""
        if wave.numel() == 0:
            return []
        placed = place_words(self.timer, "auto", [self.config.prefix + sentence], [None],
                             [wave], [(0, wave.shape[0])], rate)
        return [{"word": w.text, "start": round(w.start, 3), "end": round(w.end, 3)}
                for w in placed]

    async def send_audio(self, data: bytes) -> int:
        if data:
            async with self._send:
                await self.ws.send_bytes(data)
        return len(data)
