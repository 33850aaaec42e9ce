"""Speech as a service: one set of aiohttp routes (OpenAI ``/v1/audio/speech``, fish-speech
``/v1/tts``, a voice library) over a fair, batching queue in front of one model.

    openai.py     the OpenAI dialect: /v1/audio/speech (request shape + handler), /v1/models
    fish.py       the fish-speech dialect: /v1/tts, /v1/references/*
    voices_api.py the OpenAI-style voice routes /v1/audio/voices
    speak.py      answering one speech request: whole, streamed or as SSE
    requests.py   what the dialects share: SpeechRequest, Limits, field checks (errors name fields)
    bodies.py     reading bodies within bounds (size, time, content type, JSON depth, parts)
    guard.py      who may call: Host and Origin checks, loopback peers for voice changes
    logs.py       log lines with a client's control characters escaped
    scheduler.py  the queue: fair, batching, cancellable, with timeouts
    routes.py     the route table (one for both hosts), errors, the checks before a handler
    service.py    model + queue (bounded) + voices + limits + API key + guard
    voicelib.py   voice files by name (speech.library's rule), HTTP errors, one change at a time
    formats.py    wav / pcm / flac / mp3 / opus bytes (WAV and PCM from fish_core.audio.wav)
    main.py       ``python -m fish_core serve``; background.py runs a server on a thread

Inside ComfyUI the same routes are mounted under ``/sailfish`` (``nodes/routes.py``). Nothing
here is imported by the CLI's other commands, so aiohttp is needed only to serve.
"""
