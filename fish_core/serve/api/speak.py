"""Answering one speech request, whatever its dialect: queue it with the scheduler and send its
audio as it arrives: whole (any format), streamed (wav or pcm) or as OpenAI's server-sent
events; a client that goes away cancels its task."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Callable

from aiohttp import web

from ...speech.words import spoken_parts
from ..http import formats
from ..http.errors import ApiError, ClientGone
from ..http.logs import log
from ..service import Service
from ..request import SpeechRequest

POLL_SECONDS = 0.05  # how often a waiting handler looks whether its client is still there


async def speak(service: Service, request: web.Request, speech: SpeechRequest
                ) -> web.StreamResponse:
    """Queue the request and answer as its audio arrives: whole, streamed, or as SSE."""
    items, emit = reports()
    with service.admitted():
        task = service.scheduler.submit(speech, emit)
        try:
            kind, info = await next_item(items, request)
            if kind == "error":
                raise info
            info = {**info, "text_param": speech.text_param,
                    "max_samples": round(service.limits.max_answer_seconds
                                         * info["sample_rate"])}
            if speech.timed is not None:
                return await timed(items, request, task, speech, info)
            if speech.stream is None:
                return await whole(items, request, task, speech, info, service)
            return await streamed(items, request, speech, info)
        except ClientGone:  # nobody to answer; 499 is what the access log shows
            return web.Response(status=499)
        finally:
            task.cancel()  # a no-op once it is done; stops it when the client left


def reports() -> tuple[asyncio.Queue, Callable[[str, object], None]]:
    """A queue on the running event loop and the ``emit(kind, value)`` a scheduler task reports
    into it with, from the scheduler's thread (the one bridge from the worker to a handler)."""
    loop = asyncio.get_running_loop()
    items: asyncio.Queue = asyncio.Queue()

    def emit(kind: str, value) -> None:  # on the scheduler's thread
        try:
            loop.call_soon_threadsafe(items.put_nowait, (kind, value))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    return items, emit


async def next_item(items: asyncio.Queue, request: web.Request) -> tuple[str, object]:
    """The task's next report, watching for the client going away meanwhile."""
    while True:
        try:
            return await asyncio.wait_for(items.get(), POLL_SECONDS)
        except asyncio.TimeoutError:
            transport = request.transport
            if transport is None or transport.is_closing():
                raise ClientGone() from None


def audio_headers(info: dict) -> dict:
    return {"X-Sailfish-Seed": str(info["seed"]),
            "X-Sailfish-Sample-Rate": str(info["sample_rate"])}


async def whole(items, request, task, speech: SpeechRequest, info: dict,
                service: Service | None = None) -> web.Response:
    """The whole answer: its take finished by the front's one step (``Front.finish``: speed,
    pauses, loudness, as a local result) and encoded, in the handler's executor, never on the
    model's worker."""
    kind, value = await next_item(items, request)
    if kind == "error":
        raise value
    data, headers = await asyncio.get_running_loop().run_in_executor(
        None, answer, task, speech, info, service)
    return web.Response(body=data, content_type=formats.CONTENT_TYPES[speech.format],
                        headers={**audio_headers(info), **headers})


def answer(task, speech: SpeechRequest, info: dict, service: Service | None = None
           ) -> tuple[bytes, dict]:
    """``task``'s finished take, within the answer budget, encoded; with ``check``, heard by
    the model's speech recogniser and scored (header ``X-Sailfish-Check``: JSON, ASCII)."""
    finished = task.answer()
    if finished.waveform.shape[0] > info["max_samples"]:
        raise too_long(info)
    headers = {}
    if speech.speech is not None and speech.speech.settings.check and service is not None:
        headers["X-Sailfish-Check"] = json.dumps(heard(service, speech, finished))
    return formats.encode(finished.waveform, finished.sample_rate, speech.format), headers


def heard(service: Service, speech: SpeechRequest, finished) -> dict:
    """A whole answer heard and scored (``speech.results.check_dict``), the model taken as a
    speech request takes it."""
    from ...speech.results import check_dict

    with service.scheduler.loaded() as synth:
        if not getattr(synth.accepts, "hears", False):
            raise ApiError(422, "this server's engine cannot hear its answers", "check")
        [checked] = synth.check_takes(speech.speech, [finished])
    return check_dict(checked)


async def timed(items, request, task, speech: SpeechRequest, info: dict) -> web.StreamResponse:
    """Word timing (``speech.timed``): the take made whole and its words timed by the aligner
    (``Front.finish``), then sent as server-sent events, a text batch at a time
    (``timed_events``). Fish's shape: ``{"audio_base64", "content", "alignment": {"segments":
    [{"text", "start", "end"}], "audio_duration"}, "chunk_seq", "chunk_audio_offset_sec"}``
    per batch (times from the piece's start); OpenAI's: ``speech.audio.delta`` then
    ``speech.audio.alignment`` (the same alignment) per batch and ``speech.audio.done``."""
    kind, value = await next_item(items, request)
    if kind == "error":
        raise value
    loop = asyncio.get_running_loop()
    finished = await loop.run_in_executor(None, task.answer)
    if finished.waveform.shape[0] > info["max_samples"]:
        raise too_long(info)
    events = await loop.run_in_executor(None, timed_events, finished, speech)
    response = web.StreamResponse(headers={**audio_headers(info), "Cache-Control": "no-cache"})
    response.content_type = "text/event-stream"
    await response.prepare(request)
    try:
        for event in events:
            await response.write(sse_event(event))
    except (ClientGone, ConnectionResetError):
        return response
    await response.write_eof()
    return response


def timed_events(finished, speech: SpeechRequest) -> list[dict]:
    """The events of a timed answer: piece i is the audio from the start of text batch i
    (the first from 0, the silence before a batch with it, the last to the end), its text and
    its words' times from the piece's start."""
    rate, wave, segments = finished.sample_rate, finished.waveform, finished.segments
    cuts = [0] + [s.start_sample for s in segments[1:]] + [wave.shape[0]]
    encode = formats.StreamEncoder(speech.format, rate)
    events, frames = [], 0
    for i, segment in enumerate(segments):
        offset = cuts[i] / rate
        piece = wave[cuts[i]:cuts[i + 1]]
        alignment = piece_alignment(finished.words, i, offset, piece.shape[0] / rate)
        content = " ".join(said for _, said in spoken_parts(segment.text))
        audio = base64.b64encode(encode(piece)).decode("ascii")
        frames += segment.frames
        events += piece_events(speech.timed, audio, content, alignment, i, offset)
    if speech.timed != "fish":
        events.append({"type": "speech.audio.done", "usage": {"output_tokens": frames}})
    return events


def piece_alignment(words, segment: int, offset: float, seconds: float) -> dict:
    """The alignment of text batch ``segment``'s piece (``offset`` s into the answer,
    ``seconds`` long): its words' times from the piece's start."""
    return {"segments": [{"text": w.text, "start": round(w.start - offset, 3),
                          "end": round(w.end - offset, 3)}
                         for w in words or () if w.segment == segment],
            "audio_duration": round(seconds, 3)}


def piece_events(timed: str, audio: str, content: str, alignment: dict, seq: int,
                 offset: float) -> list[dict]:
    """A piece's events: Fish's one (audio, text, alignment), OpenAI's audio delta then its
    alignment."""
    where = {"chunk_seq": seq, "chunk_audio_offset_sec": round(offset, 3)}
    if timed == "fish":
        return [{"audio_base64": audio, "content": content, "alignment": alignment, **where}]
    return [{"type": "speech.audio.delta", "audio": audio},
            {"type": "speech.audio.alignment", "content": content, "alignment": alignment,
             **where}]


async def streamed(items, request, speech: SpeechRequest, info: dict) -> web.StreamResponse:
    kind, value = await next_item(items, request)
    if kind == "error":  # before any audio: still time for a proper status
        raise value
    encode = formats.StreamEncoder(speech.format, info["sample_rate"])
    sse = speech.stream == "sse"
    response = web.StreamResponse(headers=audio_headers(info))
    response.content_type = "text/event-stream" if sse else formats.CONTENT_TYPES[speech.format]
    if sse:
        response.headers["Cache-Control"] = "no-cache"
    await response.prepare(request)
    try:
        whole = await stream_body(items, request, response, encode, sse, kind, value, info)
    except (ClientGone, ConnectionResetError):  # the client left mid-stream
        return response
    if not whole:  # never end a cut answer as if it were whole: no final chunk
        cut(request)
        return response
    await response.write_eof()
    return response


def cut(request: web.Request) -> None:
    """End a streamed answer that failed after its first byte as an incomplete transfer: the
    connection is closed (what was sent is delivered) without HTTP's final chunk, so every
    client sees a cut answer (curl: exit 18, aiohttp: ``ClientPayloadError``, http.client:
    ``IncompleteRead``), never a whole one."""
    if request.transport is not None:
        request.transport.close()


async def stream_body(items, request, response, encode, sse: bool, kind: str, value,
                      info: dict) -> bool:
    """Write the chunks as they come (``kind, value``: the first report, already read).
    Returns whether the answer is whole (False: it failed after its first byte)."""
    samples = 0
    while True:
        if kind in ("error", "done"):
            return await stream_end(response, sse, kind, value, samples // info["frame_length"])
        samples += value.shape[0]
        if samples > info["max_samples"]:  # said in the stream (SSE), and the stream is cut
            kind, value = "error", too_long(info)
            continue
        data = encode(value)
        if sse:
            data = sse_event({"type": "speech.audio.delta",
                              "audio": base64.b64encode(data).decode("ascii")})
        await response.write(data)
        kind, value = await next_item(items, request)


async def stream_end(response, sse: bool, kind: str, value, frames: int) -> bool:
    """The stream's last report: ``done`` (SSE: its ``speech.audio.done`` event) or an
    ``error``, too late for a status: said in the stream (SSE), and the stream is to be cut.
    Returns whether the answer is whole."""
    if kind == "error":
        log.warning("Sailfish serve: stream ended early: %s", value.message)
        if sse:
            await response.write(sse_event({"type": "error", "error": value.body()["error"]}))
        return False
    if sse:
        await response.write(sse_event({"type": "speech.audio.done",
                                        "usage": {"output_tokens": frames}}))
    return True


def too_long(info: dict) -> ApiError:
    """The answer budget of one request (``Limits.max_answer_seconds``, speech and silence)."""
    seconds, param = info["max_samples"] / info["sample_rate"], info["text_param"]
    return ApiError(422, f"{param}: the answer grew past {seconds:g} s of audio, this server's "
                         "budget for one request (speech and pauses together); send less text "
                         "or shorter pauses", param)


def sse_event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()
