"""The HTTP plumbing every dialect shares: ``errors`` (``ApiError``, ``detail``), ``guard`` (Host,
Origin, loopback peers), ``bodies`` (bounded bodies), ``formats`` (response audio), ``logs``
(escaped log lines)."""
