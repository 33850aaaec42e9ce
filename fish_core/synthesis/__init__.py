"""The local synthesizer: ``synthesizer`` (``Synthesizer``, the public API) and ``stream``
(chunked decoding, jobs, ``AudioStream``)."""
