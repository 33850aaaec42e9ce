"""The whole listening model (the reference's "thinker"): audio encoder + Qwen3 text model + a
linear head — ``classify_num`` timestamp classes for the aligner, the vocabulary for the ASR.

``embed`` puts each clip's audio embeddings into its ``<|audio_pad|>`` positions, in order;
``forward`` runs the text model on them and the head on the positions asked for.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .audio_encoder import AudioEncoder
from .config import HearingConfig
from .text_model import TextModel, attention_mask, positions_from_mask


class Thinker(nn.Module):
    def __init__(self, config: HearingConfig):
        super().__init__()
        self.config = config
        self.audio_tower = AudioEncoder(config.audio)
        self.model = TextModel(config.text)
        self.lm_head = nn.Linear(config.text.hidden_size, config.head_size, bias=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def encode_audio(self, features: Tensor, feature_mask: Tensor) -> list[Tensor]:
        """Each clip's embeddings ``[n_tokens_i, hidden]`` from ``features [B, n_mels, T]``
        and ``feature_mask [B, T]`` (each clip encoded alone, on its valid frames)."""
        lengths = feature_mask.sum(-1).tolist()
        return [self.audio_tower(features[i, :, :int(n)]) for i, n in enumerate(lengths)]

    def embed(self, input_ids: Tensor, audio: list[Tensor]) -> Tensor:
        """Token embeddings ``[B, L, hidden]`` with ``audio`` (all clips, in order) in the
        ``<|audio_pad|>`` positions; their count must match."""
        embeds = self.model.embed_tokens(input_ids)
        slots = input_ids == self.config.audio_token_id
        filled = (torch.cat(audio).to(embeds.dtype) if audio
                  else embeds.new_zeros(0, embeds.shape[-1]))
        if int(slots.sum()) != filled.shape[0]:
            raise ValueError(f"the prompt has {int(slots.sum())} audio positions for "
                             f"{filled.shape[0]} audio embeddings")
        embeds = embeds.clone()
        embeds[slots] = filled
        return embeds

    def forward(self, input_ids: Tensor, mask: Tensor, audio: list[Tensor],
                layers_out: list | None = None) -> Tensor:
        """Hidden states ``[B, L, hidden]`` (after the final norm) of one full pass over
        prompts ``input_ids [B, L]`` with padding ``mask [B, L]``."""
        embeds = self.embed(input_ids, audio)
        positions = positions_from_mask(mask)
        padded = bool((mask == 0).any())
        attn = attention_mask(mask).to(embeds.device) if padded else None
        return self.model(embeds, positions, attn, layers_out=layers_out)
