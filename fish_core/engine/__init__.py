"""The Dual-AR language model and its one decode loop, gpt-fast shaped and flat: ``config``,
``model``, ``sampling``, ``generate`` (``Engine``: the model, its step and KV cache),
``continuous`` (``RowBatch``: the decode loop), ``prefix_cache``, ``cuda_graph``, ``device``."""
