"""The front both synthesizers (local and remote) share and what they take and return, with no
engine: ``request`` (one checked ``Request``), ``front`` (``Front``: plan, the backend's render,
lay out, finish; the public API), ``layout`` and ``stream`` (audio handed out as it is made),
``results`` (``Speech``, ``Segment``, takes, tracks), ``timeline`` (placing audio), ``voices``
(``Voice``), ``finishing``."""
