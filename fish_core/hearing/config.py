"""``config.json`` of a Qwen3-ASR-family checkpoint (the ForcedAligner and the ASR share it) →
dataclasses; every size and id is checked when read, naming its field."""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

ALIGNER_KIND = "qwen3_forced_aligner"
ASR_KIND = "qwen3_asr"


class ConfigError(ValueError):
    """config.json is missing, unreadable or holds a bad value (the message names the field)."""


@dataclass(frozen=True)
class AudioConfig:
    """``thinker_config.audio_config``: the conv + transformer audio encoder."""

    num_mel_bins: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    d_model: int
    output_dim: int
    downsample_hidden_size: int
    max_source_positions: int
    n_window: int  # a chunk is 2 * n_window mel frames
    n_window_infer: int
    conv_chunksize: int = 500
    activation_function: str = "gelu"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.encoder_attention_heads

    @property
    def chunk_frames(self) -> int:
        return 2 * self.n_window

    @property
    def conv_bins(self) -> int:
        """Mel bins left after the three stride-2 convolutions."""
        bins = self.num_mel_bins
        for _ in range(3):
            bins = (bins + 1) // 2
        return bins


@dataclass(frozen=True)
class TextConfig:
    """``thinker_config.text_config``: the Qwen3 text model."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int = 65536
    mrope_section: tuple[int, ...] = ()
    tie_word_embeddings: bool = False  # lm_head shares embed_tokens (may be absent on disk)


@dataclass(frozen=True)
class HearingConfig:
    """One checkpoint's config: ``kind`` is ``qwen3_forced_aligner`` (a head of
    ``classify_num`` timestamp classes) or ``qwen3_asr`` (a vocabulary head)."""

    kind: str
    audio: AudioConfig
    text: TextConfig
    audio_token_id: int
    audio_start_token_id: int
    audio_end_token_id: int
    head_size: int  # rows of lm_head: classify_num (aligner) or vocab_size (ASR)
    timestamp_token_id: int | None = None
    timestamp_segment_ms: float | None = None
    languages: tuple[str, ...] = ()

    @property
    def is_aligner(self) -> bool:
        return self.kind == ALIGNER_KIND

    @classmethod
    def from_dir(cls, folder: str | Path) -> HearingConfig:
        path = Path(folder) / "config.json"
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{Path(folder).name}: config.json not found") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{Path(folder).name}: config.json is unreadable "
                              f"({type(e).__name__})") from None
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> HearingConfig:
        thinker = _section(raw, "thinker_config")
        kind = thinker.get("model_type")
        if kind not in (ALIGNER_KIND, ASR_KIND):
            raise ConfigError(f"thinker_config.model_type: {kind!r} is neither {ALIGNER_KIND} "
                              f"nor {ASR_KIND}")
        audio = _read(AudioConfig, _section(thinker, "audio_config"), "thinker_config.audio_config")
        text = _text_config(raw, thinker)
        ids = {}
        for name in ("audio_token_id", "audio_start_token_id", "audio_end_token_id"):
            ids[name] = _int(thinker, name, "thinker_config", text.vocab_size)
        if kind == ALIGNER_KIND:
            head, extra = _aligner_head(raw, thinker, text.vocab_size)
        else:
            head, extra = text.vocab_size, {}
        languages = raw.get("support_languages") or []
        config = cls(kind=kind, audio=audio, text=text, head_size=head,
                     languages=tuple(str(x) for x in languages), **ids, **extra)
        _check(config)
        return config


def _text_config(raw: dict, thinker: dict) -> TextConfig:
    """``thinker_config.text_config`` read (its M-RoPE sections and the tie, which may sit at
    the top level)."""
    text_raw = _section(thinker, "text_config")
    rope = text_raw.get("rope_scaling") or {}
    tied = text_raw.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))
    return _read(TextConfig, {**text_raw, "mrope_section": tuple(rope.get("mrope_section", ())),
                              "tie_word_embeddings": bool(tied)},
                 "thinker_config.text_config")


def _aligner_head(raw: dict, thinker: dict, vocab_size: int) -> tuple[int, dict]:
    """The aligner's head size (``classify_num``) and its timestamp fields, read at the top
    level or in ``thinker_config``."""
    head = _int(thinker, "classify_num", "thinker_config", None)
    ts = raw.get("timestamp_token_id", thinker.get("timestamp_token_id"))
    ts = _int({"timestamp_token_id": ts}, "timestamp_token_id", "config", vocab_size)
    seg = raw.get("timestamp_segment_time", thinker.get("timestamp_segment_time"))
    if not isinstance(seg, (int, float)) or isinstance(seg, bool) or seg <= 0:
        raise ConfigError("config.timestamp_segment_time must be a positive number")
    return head, dict(timestamp_token_id=ts, timestamp_segment_ms=float(seg))


def _section(raw: dict, name: str) -> dict:
    value = raw.get(name)
    if not isinstance(value, dict):
        raise ConfigError(f"config.json: {name} is missing or not an object")
    return value


def _int(raw: dict, name: str, where: str, below: int | None) -> int:
    value = raw.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or (
            below is not None and value >= below):
        limit = f" below {below}" if below is not None else ""
        raise ConfigError(f"{where}.{name} must be a whole number ≥ 0{limit}, not {value!r}")
    return value


def _read(kind, raw: dict, where: str):
    values = {}
    for f in fields(kind):
        if f.name not in raw:
            if f.default is not MISSING:  # has a default
                continue
            raise ConfigError(f"{where}.{f.name} is missing")
        value = raw[f.name]
        if f.type in ("int",) and (not isinstance(value, int) or isinstance(value, bool)
                                   or value <= 0):
            raise ConfigError(f"{where}.{f.name} must be a positive whole number, not {value!r}")
        if f.type == "float" and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or value <= 0):
            raise ConfigError(f"{where}.{f.name} must be a positive number, not {value!r}")
        values[f.name] = float(value) if f.type == "float" else value
    return kind(**values)


def _check(config: HearingConfig) -> None:
    a, t = config.audio, config.text
    if a.d_model % a.encoder_attention_heads:
        raise ConfigError("thinker_config.audio_config.d_model must be a multiple of "
                          "encoder_attention_heads")
    if a.output_dim != t.hidden_size:
        raise ConfigError("thinker_config.audio_config.output_dim must equal "
                          "text_config.hidden_size")
    if t.num_attention_heads % t.num_key_value_heads:
        raise ConfigError("thinker_config.text_config.num_attention_heads must be a multiple of "
                          "num_key_value_heads")
    if t.head_dim % 2:
        raise ConfigError("thinker_config.text_config.head_dim must be even")
    if a.n_window_infer % a.chunk_frames:
        raise ConfigError("thinker_config.audio_config.n_window_infer must be a multiple of "
                          "2 * n_window")
