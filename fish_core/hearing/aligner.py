"""Qwen3-ForcedAligner: audio + its transcript → each word's start and end, in one pass.

The prompt is ``<|audio_start|>`` + one ``<|audio_pad|>`` per audio embedding +
``<|audio_end|>``, then every word followed by two ``<timestamp>`` tokens (its start and its
end). The head's argmax at a ``<timestamp>`` position is a time in units of
``timestamp_segment_time`` (80 ms); ``timestamps.fix_timestamps`` makes the times monotonic.
A batch is left-padded with ``<|endoftext|>`` (as the reference's tokenizer pads) and run in
one pass (a clip in a batch may keep
one more feature frame than alone: ``features.batch_features``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .audio_encoder import encoded_length
from .checkpoint import load_thinker
from .config import ALIGNER_KIND
from .features import FeatureConfig, batch_features
from .thinker import Thinker
from .timestamps import fix_timestamps
from .tokenizer import (AUDIO_END, AUDIO_PAD, AUDIO_START, ENDOFTEXT, TIMESTAMP,
                        HearingTokenizer)
from .words import check_language, split_words


@dataclass(frozen=True)
class Word:
    """One aligned word: its text and its start and end in seconds from the clip's start."""

    text: str
    start: float
    end: float


@dataclass
class Aligned:
    """One clip's alignment, with what produced it (for tests and debugging)."""

    words: list[Word]
    word_list: list[str]
    input_ids: Tensor  # [L] (no padding)
    ts_logits: Tensor  # [2 * n_words, classify_num] float32
    ts_ms_raw: list[float]
    ts_ms_fixed: list[int]


class ForcedAligner:
    """A loaded aligner: ``align(waves, texts, languages)`` or, with words already split,
    ``align_words(waves, word_lists)``. ``waves`` are 1-D float tensors at ``sample_rate``."""

    def __init__(self, model: Thinker, tokenizer: HearingTokenizer, features: FeatureConfig,
                 korean_dict: str | Path | None = None):
        if not model.config.is_aligner:
            raise ValueError(f"a ForcedAligner needs a {ALIGNER_KIND} model, not "
                             f"{model.config.kind}")
        self.model, self.tokenizer, self.features = model, tokenizer, features
        self.korean_dict = korean_dict
        self.ids = {t: tokenizer.id(t) for t in (AUDIO_START, AUDIO_PAD, AUDIO_END, TIMESTAMP,
                                                 ENDOFTEXT)}
        config = model.config
        if (self.ids[TIMESTAMP] != config.timestamp_token_id
                or self.ids[AUDIO_PAD] != config.audio_token_id):
            raise ValueError("the tokenizer's <timestamp> / <|audio_pad|> ids differ from "
                             "config.json's")

    @classmethod
    def from_pretrained(cls, folder: str | Path, device: str | torch.device = "cpu",
                        dtype: str | torch.dtype | None = None, regex: str = "auto"
                        ) -> ForcedAligner:
        folder = Path(folder)
        tokenizer = HearingTokenizer.from_dir(folder, regex)  # cheap checks before the weights
        features = FeatureConfig.from_dir(folder)
        model = load_thinker(folder, device, dtype, expect=ALIGNER_KIND)
        korean = folder / "korean_dict_jieba.dict"
        return cls(model, tokenizer, features, korean if korean.is_file() else None)

    @classmethod
    def load(cls, aligner: str | Path | None = None, models_dir: str | Path | None = None,
             device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None,
             download: bool = True) -> ForcedAligner:
        """The aligner from ``aligner`` (a folder: ``--aligner FOLDER``) or the official
        checkpoint in ``models_dir``, downloaded on first use (``hub.resolve_aligner``)."""
        from .hub import resolve_aligner

        return cls.from_pretrained(resolve_aligner(aligner, models_dir, download), device, dtype)

    @property
    def sample_rate(self) -> int:
        return self.features.sample_rate

    @property
    def segment_seconds(self) -> float:
        return self.model.config.timestamp_segment_ms / 1000.0

    def words(self, text: str, language: str) -> list[str]:
        return split_words(text, check_language(language), self.korean_dict)

    def prompt(self, words: list[str], audio_tokens: int) -> list[int]:
        """The aligner's input ids for ``words`` and a clip of ``audio_tokens`` embeddings."""
        ids = self.ids
        out = [ids[AUDIO_START]] + [ids[AUDIO_PAD]] * audio_tokens + [ids[AUDIO_END]]
        for word in words:
            out += self.tokenizer.encode_text(word) + [ids[TIMESTAMP]] * 2
        if not words:
            out += [ids[TIMESTAMP]] * 2
        return out

    def align(self, waves: list[Tensor], texts: list[str], languages: list[str]) -> list[Aligned]:
        if not (len(waves) == len(texts) == len(languages)):
            raise ValueError(f"align: {len(waves)} clips, {len(texts)} texts and "
                             f"{len(languages)} languages")
        return self.align_words(waves, [self.words(t, lang) for t, lang in zip(texts, languages)])

    @torch.inference_mode()
    def align_words(self, waves: list[Tensor], word_lists: list[list[str]]) -> list[Aligned]:
        if len(waves) != len(word_lists):
            raise ValueError(f"align: {len(waves)} clips and {len(word_lists)} word lists")
        model = self.model
        features, feature_mask = batch_features([w.reshape(-1).float() for w in waves],
                                                self.features)
        features = features.to(model.device, model.dtype)
        chunk = model.config.audio.chunk_frames
        prompts = [self.prompt(words, encoded_length(int(n), chunk))
                   for words, n in zip(word_lists, feature_mask.sum(-1).tolist())]
        input_ids, mask = self.pad(prompts)
        input_ids, mask = input_ids.to(model.device), mask.to(model.device)
        audio = model.encode_audio(features, feature_mask.to(model.device))
        hidden = model(input_ids, mask, audio)
        return [self.timed(words, input_ids[row], mask[row], hidden[row])
                for row, words in enumerate(word_lists)]

    def timed(self, words: list[str], ids: Tensor, mask: Tensor, hidden: Tensor) -> Aligned:
        """One row's ``words`` timed: the head's argmax at each timestamp slot of its prompt
        ``ids`` (``hidden``: the model's states there), in ms, made monotonic."""
        slots = (ids == self.ids[TIMESTAMP]) & (mask != 0)
        logits = self.model.lm_head(hidden[slots]).float()
        raw = (logits.argmax(-1).float() * self.model.config.timestamp_segment_ms).tolist()
        fixed = fix_timestamps(raw)
        items = [Word(word, round(fixed[2 * i] / 1000.0, 3), round(fixed[2 * i + 1] / 1000.0, 3))
                 for i, word in enumerate(words)]
        return Aligned(items, list(words), ids[mask != 0].cpu(), logits.cpu(), raw, fixed)

    def pad(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor]:
        """Left-padded ``input_ids [B, L]`` (``<|endoftext|>``) and their mask."""
        longest = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), longest), self.ids[ENDOFTEXT], dtype=torch.long)
        mask = torch.zeros(len(prompts), longest, dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, longest - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[row, longest - len(p):] = 1
        return ids, mask
