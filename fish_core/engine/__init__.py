"""The Dual-AR language model and its one decode loop, gpt-fast shaped and flat, in floors:
``config``, ``model``, ``sampling``, ``runner`` (``Engine``: the model, its step and KV cache),
above it ``rows`` (``RowBatch``: the decode loop; ``generate`` runs prompts to their ends),
``prefix_cache``, ``cuda_graph``, ``device``."""
