"""Finding and loading checkpoints: ``hub`` (folder, variant or repo id), ``shards``,
``tensor_names``, ``weights`` (``StreamedLoad``), ``checkpoint`` (the one model loader),
``fp8_checkpoint``, ``export``, ``siblings`` (how ``quant`` is reached)."""
