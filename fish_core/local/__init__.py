"""The local synthesizer: ``synthesizer`` (``Synthesizer``, the public API), ``runtime``
(``Runtime``: the loaded model's engine, codec and prompts, under it), ``driver`` (the one
generation driver: ``SpeechJob``, ``JobRows``, ``run_round``, ``ChunkDecoder``), ``stream``
(``AudioStream``) and ``layout``
(``TakeLayout``: chunks laid out while they are generated)."""
