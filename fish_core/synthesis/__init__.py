"""The local synthesizer: ``synthesizer`` (``Synthesizer``, the public API), ``driver`` (the one
generation driver: ``SpeechJob``, ``run_round``, ``ChunkDecoder``) and ``stream``
(``AudioStream``)."""
