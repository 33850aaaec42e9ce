"""Tensor names of S2-Pro checkpoints: the HF layout (``text_model.model.*``,
``audio_decoder.*``) and fish-speech's internal names (our module paths)."""

HF_TEXT = "text_model.model."
HF_AUDIO = "audio_decoder."


def to_internal(name: str) -> str:
    """HF tensor name → fish-speech internal name (internal names pass through)."""
    if name.startswith(HF_TEXT):
        return name[len(HF_TEXT):]
    if name.startswith(HF_AUDIO):
        rest = name[len(HF_AUDIO):]
        return rest if rest.startswith("codebook_embeddings.") else "fast_" + rest
    return name


def to_hf(name: str) -> str:
    """Internal name → HF tensor name."""
    if name.startswith("codebook_embeddings."):
        return HF_AUDIO + name
    if name.startswith("fast_"):
        return HF_AUDIO + name[len("fast_"):]
    return HF_TEXT + name
