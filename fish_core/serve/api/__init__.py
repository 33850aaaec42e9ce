"""The dialects, one module each with its fields and its handlers: ``openai``
(``/v1/audio/speech``, ``/v1/models``), ``fish`` (``/v1/tts``, ``/v1/references/*``), ``voices``
(``/v1/audio/voices``), ``speech_stream`` (``WS /v1/audio/speech/stream``; its messages in
``stream_config``, a connection in ``stream_session``); what they share: ``speak`` (answering one
speech request: whole, streamed or as SSE). The request shape is ``..request``'s, the field
parsers ``..http.fields``'."""
