"""The models that listen: Qwen3-ForcedAligner for word times, Qwen3-ASR for transcripts.

One concept per file: ``features`` (log-mel), ``audio_encoder``, ``text_model`` (Qwen3 with
float M-RoPE positions, optional static KV cache), ``thinker`` (encoder + text model + head),
``config``, ``checkpoint`` (loading the real tensor names), ``tokenizer``, ``words`` (per-language
word splitting), ``timestamps`` (``fix_timestamps``), ``aligner`` (one pass → word times).
Nothing here is imported at ComfyUI start-up; each module loads when first used.
"""
