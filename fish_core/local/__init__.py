"""The local synthesizer: ``synthesizer`` (``Synthesizer``, the local backend of
``speech.front.Front``), ``runtime`` (``Runtime``: the loaded model's engine, codec and prompts,
under it) and ``driver`` (the one generation driver: ``SpeechJob``, ``JobRows``, ``run_round``,
``ChunkDecoder``)."""
