"""What both synthesizers (local and remote) take and return, with no engine: ``results``
(``Speech``, ``Segment``, takes, tracks), ``timeline`` (placing audio), ``voices`` (``Voice``),
``arguments`` (the checks of the arguments both take) and ``interface`` (the
``SpeechSynthesizer`` Protocol both implement)."""
