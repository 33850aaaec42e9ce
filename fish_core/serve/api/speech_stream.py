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

import base64
import binascii

from aiohttp import web

from ..http.errors import ApiError
from ..http.logs import log
from ..service import Service
from .stream_config import message_limit
from .stream_session import CLOSE_NORMAL, Session

PROTOCOL = "sailfish.speech.v1"  # the subprotocol the server selects
KEY_PROTOCOL = "base64url.bearer."  # + the key in base64url: browsers' way to send the key


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
        try:
            await converse(service, Session(service, ws), request.remote)
        finally:
            if not ws.closed:
                await ws.close(code=CLOSE_NORMAL)
    return ws


async def converse(service: Service, session: Session, peer: str | None) -> None:
    """The session until its end; an error is said to the client before the close (a
    refusal logged, the server's own failure logged and never shown)."""
    try:
        service.check_place()
        await session.run()
    except ApiError as e:
        if e.status in (403, 429):
            log.warning("Sailfish serve: stream from %s refused: %s", peer, e.message)
        await session.fail(e)
    except ConnectionResetError:  # the client left while audio was being sent
        pass
    except Exception:  # noqa: BLE001 - logged here, never shown to the client
        log.exception("Sailfish serve: speech stream failed")
        await session.fail(ApiError(500, "internal server error; see the server log"))
