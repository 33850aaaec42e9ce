"""Speech as a service: one set of aiohttp routes (OpenAI ``/v1/audio/speech``, fish-speech
``/v1/tts``, a voice library, a speech stream WebSocket) over a fair, batching queue in front of
one model.

The public API (what ``nodes/`` and users' scripts import; nothing else of this package is
stable): ``mount(router, service, prefix)`` adds every route to an aiohttp route table (ComfyUI's
``PromptServer.instance.routes``), ``create_app(service)`` makes a standalone app, ``Service``
(model + queue + voices + limits + key + guard), ``Guard`` (Host and Origin rules), ``Limits``,
``ApiError`` (a status and OpenAI's error shape) and ``detail`` (an exception's text without
paths or reprs). Each name loads its module when first used: importing this package needs no
aiohttp.

Inside (rooms):

    http/         the plumbing every dialect shares: errors, guard, bodies, formats, logs,
                  fields (the field parsers)
    api/          one module per dialect, its fields and its handlers: openai, fish, voices,
                  speech_stream (with stream_config, stream_session); speak (answers)
    request.py    the wire request (SpeechRequest, Reference) and the checked speech Request
                  it carries (``to_request``: once, at parse time)
    jobs.py       the one place a request becomes a job (voice resolved once, references
                  encoded once per request or session)
    scheduler.py  the queue: fair, batching, cancellable, with timeouts
    service.py    model + queue (bounded) + voices + limits + API key + guard
    voicelib.py   voice files by name (speech.library's rule), listing and loaded-voice memos
    limits.py     the bounds every request is held to
    routes.py     the route table (one for both hosts), the checks before a handler
    main.py       ``python -m fish_core serve``; background.py runs a server on a thread

Nothing here is imported by the CLI's other commands, so aiohttp is needed only to serve.
"""

from __future__ import annotations

from importlib import import_module

__all__ = ["ApiError", "Guard", "Limits", "Service", "create_app", "detail", "mount"]

_WHERE = {"ApiError": ".http.errors", "detail": ".http.errors", "Guard": ".http.guard",
          "Limits": ".limits", "Service": ".service", "create_app": ".routes"}


def mount(router, service, prefix: str = "") -> int:
    """Add every route of ``service`` under ``prefix`` to ``router`` (anything with aiohttp's
    ``route(method, path)`` decorator, e.g. a ``web.RouteTableDef``); returns how many."""
    from .routes import routes

    table = routes(service, prefix)
    for route in table:
        router.route(route.method, route.path)(route.handler)
    return len(table)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
