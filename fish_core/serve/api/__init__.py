"""The dialects, one module each with its request shape and its handlers: ``openai``
(``/v1/audio/speech``, ``/v1/models``), ``fish`` (``/v1/tts``, ``/v1/references/*``), ``voices``
(``/v1/audio/voices``), ``speech_stream`` (``WS /v1/audio/speech/stream``); what they share:
``protocol`` (``SpeechRequest``, field checks) and ``speak`` (answering one speech request:
whole, streamed or as SSE)."""
