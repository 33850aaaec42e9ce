"""Typed view of an S2-Pro ``config.json`` (``model_type: fish_qwen3_omni``).

Every field the model needs must be present; unknown fields are rejected so that a checkpoint
of a different architecture fails loudly instead of loading into the wrong shapes. Generic
Hugging Face bookkeeping keys (``architectures``, ``transformers_version`` …) are tolerated.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_TYPE = "fish_qwen3_omni"

# Keys that transformers' PretrainedConfig writes into every config.json. They carry no
# architecture information, so a config may contain them at any level.
HF_BOOKKEEPING_KEYS = frozenset({
    "_name_or_path", "_commit_hash", "architectures", "auto_map", "transformers_version",
    "torch_dtype", "dtype", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "use_cache", "is_encoder_decoder", "is_decoder",
    "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward", "pruned_heads",
    "id2label", "label2id", "problem_type", "tokenizer_class", "prefix", "bos_token_id",
    "sep_token_id", "decoder_start_token_id", "task_specific_params", "finetuning_task",
    "cross_attention_hidden_size", "tf_legacy_loss", "use_return_dict", "model_type",
})

# Upper bounds on the size fields of both sub-configs: far above S2-Pro (36 layers, dim 2560,
# 32768 positions), low enough that a typo fails at load, not in an allocation of terabytes
# (the RoPE table alone is 4 * head_dim bytes per position).
SIZE_LIMITS = {
    "vocab_size": 1 << 21, "num_codebooks": 64, "n_layer": 512, "n_head": 1024,
    "n_local_heads": 1024, "head_dim": 1024, "dim": 1 << 16, "intermediate_size": 1 << 18,
    "max_seq_len": 1 << 18, "audio_hidden_dim": 1 << 18, "text_dim": 1 << 16,
}


class ConfigError(ValueError):
    """config.json is missing fields, has unknown fields, or holds inconsistent values."""


@dataclass(frozen=True)
class TextConfig:
    """``text_config``: the slow AR (Qwen3 shape with an extended vocabulary)."""

    vocab_size: int
    n_layer: int
    n_head: int
    n_local_heads: int
    head_dim: int
    dim: int
    intermediate_size: int
    max_seq_len: int
    rope_base: float
    norm_eps: float
    tie_word_embeddings: bool = True
    attention_qk_norm: bool = True
    attention_qkv_bias: bool = False
    attention_o_bias: bool = False
    dropout: float = 0.0
    use_moe: bool = False
    audio_hidden_dim: int | None = None
    initializer_range: float | None = None


@dataclass(frozen=True)
class FastConfig:
    """``audio_decoder_config``: the fast AR over the codebooks of one frame."""

    vocab_size: int  # = codebook size (4096 real)
    num_codebooks: int
    n_layer: int
    n_head: int
    n_local_heads: int
    head_dim: int
    dim: int
    intermediate_size: int
    text_dim: int | None = None
    max_seq_len: int | None = None
    rope_base: float = 1e6
    norm_eps: float = 1e-6
    attention_qk_norm: bool = False
    attention_qkv_bias: bool = False
    attention_o_bias: bool = False


@dataclass(frozen=True)
class ModelConfig:
    text: TextConfig
    fast: FastConfig
    eos_token_id: int
    pad_token_id: int
    audio_pad_token_id: int
    semantic_start_token_id: int
    semantic_end_token_id: int
    dtype: str = "bfloat16"
    ignored_keys: tuple[str, ...] = field(default=(), compare=False)

    # ---- derived quantities used throughout the engine ----
    @property
    def codebook_size(self) -> int:
        return self.fast.vocab_size

    @property
    def num_codebooks(self) -> int:
        return self.fast.num_codebooks

    @property
    def num_semantic_tokens(self) -> int:
        return self.semantic_end_token_id - self.semantic_start_token_id + 1

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        if not isinstance(data, dict):
            raise ConfigError(f"config.json must hold a JSON object, got {type(data).__name__}")
        if data.get("model_type") != MODEL_TYPE:
            raise ConfigError(
                f"config.json: model_type must be {MODEL_TYPE!r} (Fish Audio S2-Pro), "
                f"got {data.get('model_type')!r}")
        ignored: list[str] = []
        top = _fields_of(cls, data, "config.json", ignored, skip={"text", "fast", "ignored_keys"},
                         nested={"text_config", "audio_decoder_config"})
        for name in ("text_config", "audio_decoder_config"):
            if not isinstance(data.get(name), dict):
                raise ConfigError(f"config.json: missing object field {name!r}")
        text = TextConfig(**_fields_of(TextConfig, data["text_config"], "text_config", ignored))
        fast = FastConfig(**_fields_of(FastConfig, data["audio_decoder_config"],
                                       "audio_decoder_config", ignored))
        config = cls(text=text, fast=fast, ignored_keys=tuple(ignored), **top)
        config.validate()
        return config

    @classmethod
    def from_file(cls, path: str | Path) -> "ModelConfig":
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config.json not found: {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path} is not valid JSON: {e}") from None
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        out = {"model_type": MODEL_TYPE}
        for f in dataclasses.fields(self):
            if f.name not in ("text", "fast", "ignored_keys"):
                out[f.name] = getattr(self, f.name)
        out["text_config"] = {"model_type": "fish_qwen3", **dataclasses.asdict(self.text)}
        out["audio_decoder_config"] = {"model_type": "fish_qwen3_audio_decoder",
                                       **dataclasses.asdict(self.fast)}
        return out

    def validate(self) -> None:
        t, f = self.text, self.fast
        problems = [*size_problems("text_config", t), *size_problems("audio_decoder_config", f),
                    *number_problems(t, f)]
        if problems:  # the checks below divide by these sizes
            raise ConfigError("config.json is out of range:\n  - " + "\n  - ".join(problems))
        problems = layout_problems(t, f)
        if not (0 <= self.semantic_start_token_id <= self.semantic_end_token_id < t.vocab_size):
            problems.append("semantic_start_token_id..semantic_end_token_id must lie inside "
                            f"the vocabulary (0..{t.vocab_size - 1})")
        if self.num_semantic_tokens != f.vocab_size:
            problems.append(f"the semantic token range holds {self.num_semantic_tokens} ids but "
                            f"audio_decoder_config.vocab_size is {f.vocab_size}")
        for name in ("eos_token_id", "pad_token_id", "audio_pad_token_id"):
            if not 0 <= getattr(self, name) < t.vocab_size:
                problems.append(f"{name} {getattr(self, name)} outside the vocabulary")
        if problems:
            raise ConfigError("config.json is inconsistent:\n  - " + "\n  - ".join(problems))


def layout_problems(t, f) -> list[str]:
    """What of the two ARs' layout (``t`` text, ``f`` fast) S2-Pro's model cannot run."""
    problems = []
    for where, c in (("text_config", t), ("audio_decoder_config", f)):
        if c.n_head % c.n_local_heads:
            problems.append(f"{where}.n_head ({c.n_head}) must be a multiple of "
                            f"n_local_heads ({c.n_local_heads})")
        if c.head_dim % 2:
            problems.append(f"{where}.head_dim ({c.head_dim}) must be even for RoPE")
    if not t.tie_word_embeddings:
        problems.append("text_config.tie_word_embeddings must be true (S2 ties the head)")
    if t.use_moe:
        problems.append("text_config.use_moe=true is not an S2-Pro model")
    if f.dim != t.dim:
        problems.append(f"audio_decoder_config.dim ({f.dim}) != text_config.dim ({t.dim}): "
                        "a projection between the two ARs is not supported")
    return problems


def size_problems(where: str, c) -> list[str]:
    """Every size field of ``c`` present in SIZE_LIMITS must lie in ``[1, limit]``."""
    problems = []
    for name, limit in SIZE_LIMITS.items():
        value = getattr(c, name, None)
        if value is not None and not 1 <= value <= limit:
            problems.append(f"{where}.{name} must be between 1 and {limit}, got {value}")
    return problems


def number_problems(t: TextConfig, f: FastConfig) -> list[str]:
    """The float fields: finite, RoPE base above 1, norm epsilon in (0, 1), dropout in [0, 1)."""
    problems = []
    for where, c in (("text_config", t), ("audio_decoder_config", f)):
        if not (math.isfinite(c.rope_base) and c.rope_base > 1):
            problems.append(f"{where}.rope_base must be a finite number > 1, got {c.rope_base}")
        if not (math.isfinite(c.norm_eps) and 0 < c.norm_eps < 1):
            problems.append(f"{where}.norm_eps must lie in (0, 1), got {c.norm_eps}")
    if not (math.isfinite(t.dropout) and 0 <= t.dropout < 1):
        problems.append(f"text_config.dropout must lie in [0, 1), got {t.dropout}")
    return problems


def _fields_of(cls, data: dict, where: str, ignored: list[str], skip=frozenset(),
               nested=frozenset()) -> dict[str, Any]:
    """Pick the dataclass fields of ``cls`` out of ``data``; fail on missing or unknown keys."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    required = {n for n, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing = sorted(required - data.keys())
    unknown = sorted(k for k in data if k not in fields and k not in nested
                     and k not in HF_BOOKKEEPING_KEYS)
    if missing or unknown:
        msg = [f"{where}:"]
        if missing:
            msg.append(f"missing required field(s) {missing}")
        if unknown:
            msg.append(f"unknown field(s) {unknown} (not an S2-Pro config?)")
        raise ConfigError(" ".join(msg))
    ignored.extend(f"{where}.{k}" for k in data
                   if k in HF_BOOKKEEPING_KEYS and k not in fields and k != "model_type")
    out = {}
    for name in fields:
        if name in data:
            out[name] = _coerce(data[name], fields[name], f"{where}.{name}")
    return out


def _coerce(value, f: dataclasses.Field, where: str):
    kind = str(f.type)
    if value is None and "None" in kind:
        return None
    if kind.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where} must be a non-negative integer, got {value!r}")
        return value
    if kind.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
    return value
