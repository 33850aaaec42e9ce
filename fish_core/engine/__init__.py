"""The Dual-AR language model and its generation loop, gpt-fast shaped and flat: ``config``,
``model``, ``sampling``, ``generate`` (``Engine``), ``cuda_graph``, ``device``."""
