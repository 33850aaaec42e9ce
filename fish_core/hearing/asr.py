"""Qwen3-ASR: speech → (language, text). The audio encoder's embeddings fill the prompt's
``<|audio_pad|>`` positions (``transcript.Prompt``), the Qwen3 text model runs the prompt once
into a static KV cache, then decodes greedily one token per step until every row has said
``<|im_end|>`` or ``<|endoftext|>`` (their ids read from the checkpoint's tokenizer) or
its budget is spent (``max_new_tokens``; by default ``token_budget`` of the piece: the
reference's 512, more for a long piece, so a 20-minute piece is not cut short; an answer that ran
out anyway is marked ``complete=False``, never passed off as whole). The answer is decoded
without special tokens and parsed by ``transcript.parse_answer``.

A batch is left-padded with the tokenizer's pad token (``<|endoftext|>``): padding is never
attended to and positions count only real tokens, so each row decodes as it would alone (the
reference's ``golden/batch/asr``). A clip longer than ``split.MAX_ASR_SECONDS`` is cut where the
reference cuts it, its pieces transcribed in batches (a piece over ``ALONE_SECONDS`` alone: its
prompt pass then needs no mask, so attention stays linear in memory) and their texts joined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from . import split
from .audio_encoder import encoded_length
from .checkpoint import load_thinker
from .config import ASR_KIND
from .features import FeatureConfig, batch_features
from .text_model import attention_mask, positions_from_mask
from .thinker import Thinker
from .tokenizer import ENDOFTEXT, IM_END, HearingTokenizer
from .transcript import LANGUAGES, Prompt, check_language, merge_languages, parse_answer

MIN_NEW_TOKENS = 512  # the reference's default budget, the least a piece gets
TOKENS_PER_SECOND = 16  # a piece's budget grows with its length (speech says ~3-8 a second)
MAX_CONTEXT_CHARS = 10_000  # a context string is a hint (names, terms), not a document
EOS_TOKENS = (IM_END, ENDOFTEXT)
MAX_CLIP_SECONDS = 4 * 3600.0  # one clip's cost is bounded by its length
ALONE_SECONDS = 60.0  # a longer piece is decoded in a batch of its own


class AsrInputError(ValueError):
    """A transcription request that cannot be run (the message names the field)."""


def token_budget(seconds: float) -> int:
    """How many tokens a piece of ``seconds`` may take to say."""
    return max(MIN_NEW_TOKENS, math.ceil(seconds * TOKENS_PER_SECOND))


def check_settings(language: str | None, context: str, max_new_tokens: int | None,
                   languages) -> str | None:
    """A request's settings checked before any work (no model needed): ``languages`` are the
    ones the checkpoint lists. Returns the language normalised, or None (detect it)."""
    if not isinstance(context, str):
        raise AsrInputError(f"context must be text, not {type(context).__name__}")
    if len(context) > MAX_CONTEXT_CHARS:
        raise AsrInputError(f"context is {len(context)} characters; at most {MAX_CONTEXT_CHARS}")
    if max_new_tokens is not None and (not isinstance(max_new_tokens, int)
                                       or isinstance(max_new_tokens, bool) or max_new_tokens < 1):
        raise AsrInputError(f"max_new_tokens must be a whole number ≥ 1, not {max_new_tokens!r}")
    try:
        return check_language(language, languages)
    except ValueError as e:
        raise AsrInputError(str(e)) from None


def prepare_clip(audio, sample_rate: int) -> np.ndarray:
    """Any clip (samples, mono or 2-D, at ``sample_rate``) → mono 16 kHz float32 in [-1, 1]
    as the reference prepares it (``split.prepare``), checked (no model needed)."""
    if isinstance(audio, Tensor):
        audio = audio.detach().cpu().float().numpy()
    if not isinstance(sample_rate, int) or isinstance(sample_rate, bool) or sample_rate <= 0:
        raise AsrInputError(f"sample_rate must be a positive whole number, not {sample_rate!r}")
    try:
        wave = np.asarray(audio, dtype=np.float32)
    except (TypeError, ValueError):
        raise AsrInputError("audio must be an array of samples") from None
    if wave.size == 0:
        raise AsrInputError("audio is empty")
    if wave.ndim == 2 and min(wave.shape) > 8:
        raise AsrInputError(f"audio is {wave.shape[0]} × {wave.shape[1]}: give samples, or "
                            "channels × samples with at most 8 channels")
    if max(wave.shape) / sample_rate > MAX_CLIP_SECONDS:
        raise AsrInputError(f"audio is {max(wave.shape) / sample_rate / 3600:.1f} hours long; "
                            f"the limit is {MAX_CLIP_SECONDS / 3600:g}")
    if not np.isfinite(wave).all():
        raise AsrInputError("audio holds NaN or infinite samples")
    try:
        return split.prepare(wave, sample_rate)
    except ValueError as e:
        raise AsrInputError(f"audio: {e}") from None


@dataclass(frozen=True)
class Transcript:
    """What was said: ``language`` (``"Chinese,English"`` for a clip that changes language;
    ``""`` when unknown or silent) and ``text``."""
    language: str
    text: str
    complete: bool = True  # False: a piece ran out of tokens before it ended


@dataclass(frozen=True)
class HeardPiece:
    """One piece of a clip (``split.Piece``: 16 kHz samples, offset in seconds) and what it
    says."""
    wave: np.ndarray
    offset: float
    language: str
    text: str
    complete: bool = True


@dataclass
class Decoded:
    """One batch as the model ran it (what the parity tests compare): the left-padded prompts
    and their mask ``[B, L]``, each row's generated ids (through its end token, when it said
    one), their text without special tokens, and, when asked, the float32 logits of every step
    ``[B, steps, vocab]`` (the prefill's last position first)."""
    prompt_ids: Tensor
    prompt_mask: Tensor
    tokens: list[list[int]]
    raw: list[str]
    step_logits: Tensor | None = None
    end_ids: tuple[int, ...] = ()  # the end tokens it stopped on

    @property
    def complete(self) -> list[bool]:
        """Whether each row ended with an end token (else it ran out of tokens)."""
        return [bool(t) and t[-1] in self.end_ids for t in self.tokens]


def batches(pieces: list, size: int) -> list[list]:
    """``pieces`` (``(clip index, split.Piece)``) in order, ``size`` at a time; a piece over
    ``ALONE_SECONDS`` in a batch of its own."""
    out: list[list] = []
    for item in pieces:
        alone = item[1].wave.shape[0] > ALONE_SECONDS * split.SAMPLE_RATE
        if alone or not out or len(out[-1]) >= size or out[-1][0][1].wave.shape[0] > (
                ALONE_SECONDS * split.SAMPLE_RATE):
            out.append([item])
        else:
            out[-1].append(item)
    return out


class Greedy:
    """Each row's greedy tokens, through its end token (``eos``: the end ids on the model's
    device), and with ``keep_logits`` every step's logits."""

    def __init__(self, rows: int, eos: Tensor, keep_logits: bool):
        self.eos, self.keep_logits = eos, keep_logits
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.done = [False] * rows
        self.logits: list[Tensor] = []

    @property
    def finished(self) -> bool:
        return all(self.done)

    def take(self, logits: Tensor) -> Tensor:
        """The step's tokens (``[B]``, argmax of ``logits [B, vocab]``), kept for the rows
        still speaking."""
        if self.keep_logits:
            self.logits.append(logits)
        token = logits.argmax(-1)
        ended = torch.isin(token, self.eos).tolist()
        for row, t in enumerate(token.tolist()):
            if not self.done[row]:
                self.tokens[row].append(t)
                self.done[row] = ended[row]
        return token


class SpeechRecognizer:
    """A loaded Qwen3-ASR: ``transcribe(audio, sample_rate, language=None, context="")``."""

    def __init__(self, model: Thinker, tokenizer: HearingTokenizer, features: FeatureConfig):
        if model.config.kind != ASR_KIND:
            raise ValueError(f"a SpeechRecognizer needs a {ASR_KIND} model, not "
                             f"{model.config.kind}")
        self.model, self.tokenizer, self.features = model, tokenizer, features
        self.eos_ids = tuple(tokenizer.id(t) for t in EOS_TOKENS)
        self.pad_id = tokenizer.id(ENDOFTEXT)
        if Prompt("", None, 1).ids(tokenizer).count(model.config.audio_token_id) != 1:
            raise ValueError("the tokenizer's <|audio_pad|> id differs from config.json's")

    @classmethod
    def from_pretrained(cls, folder: str | Path, device: str | torch.device = "cpu",
                        dtype: str | torch.dtype | None = None, regex: str = "auto"
                        ) -> SpeechRecognizer:
        """The checkpoint in ``folder`` (``loading.hub`` finds or downloads one) on ``device``
        (bf16 on a GPU, float32 on a CPU unless ``dtype`` says otherwise)."""
        folder = Path(folder)
        tokenizer = HearingTokenizer.from_dir(folder, regex)  # cheap checks before the weights
        features = FeatureConfig.from_dir(folder)
        model = load_thinker(folder, device, dtype, expect=ASR_KIND)
        return cls(model, tokenizer, features)

    @property
    def sample_rate(self) -> int:
        return self.features.sample_rate

    @property
    def languages(self) -> tuple[str, ...]:
        """The languages the checkpoint lists (``support_languages``; the model card's 30 when
        its config lists none)."""
        return self.model.config.languages or LANGUAGES

    # ---- requests -------------------------------------------------------------------------

    def check(self, language: str | None, context: str, max_new_tokens: int | None
              ) -> str | None:
        """The request's settings checked before any work; the language normalised."""
        return check_settings(language, context, max_new_tokens, self.languages)

    def clip(self, audio, sample_rate: int) -> np.ndarray:
        return prepare_clip(audio, sample_rate)

    def transcribe(self, audio, sample_rate: int = split.SAMPLE_RATE, language: str | None = None,
                   context: str = "", max_new_tokens: int | None = None) -> Transcript:
        """What ``audio`` (samples, mono or channels × samples, at ``sample_rate``) says.
        ``language`` forces one (``None``: detected); ``context`` is a hint (names, terms)."""
        return self.transcribe_many([audio], sample_rate, language, context, max_new_tokens)[0]

    def transcribe_many(self, clips: list, sample_rate: int = split.SAMPLE_RATE,
                        language: str | None = None, context: str = "",
                        max_new_tokens: int | None = None, batch_size: int = 8,
                        max_seconds: float = split.MAX_ASR_SECONDS) -> list[Transcript]:
        """Several clips, their pieces decoded ``batch_size`` at a time; a clip's pieces'
        texts joined (as the reference joins them: no separator) and languages merged."""
        return [Transcript(merge_languages(p.language for p in pieces),
                           "".join(p.text for p in pieces), all(p.complete for p in pieces))
                for pieces in self.hear(clips, sample_rate, language, context, max_new_tokens,
                                        batch_size, max_seconds)]

    def hear(self, clips: list, sample_rate: int = split.SAMPLE_RATE,
             language: str | None = None, context: str = "", max_new_tokens: int | None = None,
             batch_size: int = 8, max_seconds: float = split.MAX_ASR_SECONDS
             ) -> list[list[HeardPiece]]:
        """Each clip's pieces (``split.split`` at ``max_seconds``) with what each says
        (``max_new_tokens``: None gives each batch its longest piece's ``token_budget``)."""
        forced = self.check(language, context, max_new_tokens)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise AsrInputError(f"batch_size must be a whole number ≥ 1, not {batch_size!r}")
        if not max_seconds >= 2 * split.SEARCH_SECONDS:  # a cut must move forward
            raise AsrInputError(f"max_seconds must be at least {2 * split.SEARCH_SECONDS:g}")
        waves = [self.clip(a, sample_rate) for a in clips]
        pieces = [(i, p) for i, w in enumerate(waves)
                  for p in split.split(w, split.SAMPLE_RATE, max_seconds)]
        out: list[list[HeardPiece]] = [[] for _ in waves]
        for part in batches(pieces, batch_size):
            budget = max_new_tokens or max(token_budget(p.wave.shape[0] / split.SAMPLE_RATE)
                                           for _, p in part)
            decoded = self.decode([torch.from_numpy(p.wave) for _, p in part],
                                  [context] * len(part), [forced] * len(part), budget)
            for (i, piece), raw, whole in zip(part, decoded.raw, decoded.complete):
                said, text = parse_answer(raw, forced)
                out[i].append(HeardPiece(piece.wave, piece.offset, said, text, whole))
        return out

    # ---- the model ----------------------------------------------------------------------

    def prompts(self, frames: list[int], contexts: list[str], languages: list[str | None]
                ) -> tuple[Tensor, Tensor]:
        """Left-padded prompt ids ``[B, L]`` and mask for clips of ``frames`` feature frames."""
        chunk = self.model.config.audio.chunk_frames
        rows = [Prompt(c, lang, encoded_length(n, chunk)).ids(self.tokenizer)
                for n, c, lang in zip(frames, contexts, languages)]
        longest = max(len(r) for r in rows)
        ids = torch.full((len(rows), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), longest, dtype=torch.long)
        for row, r in enumerate(rows):
            ids[row, longest - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[row, longest - len(r):] = 1
        return ids, mask

    @torch.inference_mode()
    def decode(self, waves: list[Tensor], contexts: list[str], languages: list[str | None],
               max_new_tokens: int = MIN_NEW_TOKENS, keep_logits: bool = False) -> Decoded:
        """Greedy decoding of a batch of 16 kHz clips (already prepared: ``clip``), each with
        its context and forced language (normalised, or None)."""
        ids, mask, audio = self.inputs(waves, contexts, languages)
        rows, length = ids.shape
        slots = length + max_new_tokens
        seen = torch.zeros(rows, slots, dtype=torch.long, device=ids.device)  # keys a query sees
        seen[:, :length] = mask
        said = Greedy(rows, torch.tensor(self.eos_ids, device=ids.device), keep_logits)
        text = self.model.model
        text.setup_cache(rows, slots)
        try:
            self.generate(self.prefill(ids, mask, audio, seen), mask, seen, said, max_new_tokens)
        finally:
            text.drop_cache()
        raw = [self.tokenizer.decode(t) for t in said.tokens]
        kept = torch.stack(said.logits, dim=1).cpu() if keep_logits else None
        return Decoded(ids.cpu(), mask.cpu(), said.tokens, raw, kept, self.eos_ids)

    def inputs(self, waves: list[Tensor], contexts: list[str], languages: list[str | None]
               ) -> tuple[Tensor, Tensor, Tensor]:
        """The batch's prompt ids and mask ``[B, L]`` and its clips' audio embeddings, on the
        model's device."""
        model = self.model
        features, feature_mask = batch_features([w.reshape(-1).float() for w in waves],
                                                self.features)
        ids, mask = self.prompts(feature_mask.sum(-1).tolist(), contexts, languages)
        audio = model.encode_audio(features.to(model.device, model.dtype),
                                   feature_mask.to(model.device))
        return ids.to(model.device), mask.to(model.device), audio

    def prefill(self, ids: Tensor, mask: Tensor, audio: Tensor, seen: Tensor) -> Tensor:
        """The prompt pass into the cache: the hidden states of every prompt position."""
        model = self.model
        length, slots = ids.shape[1], seen.shape[1]
        where = torch.arange(length, device=ids.device)
        # Without padding the prompt pass is plain causal attention from slot 0 (the empty
        # slots lie after every query): no mask, so sdpa keeps its memory-light kernels.
        padded = bool((mask == 0).any())
        return model.model(model.embed(ids, audio), positions_from_mask(mask),
                           attention_mask(seen, length, slots, where) if padded else None, where)

    def generate(self, hidden: Tensor, mask: Tensor, seen: Tensor, said: Greedy,
                 max_new_tokens: int) -> None:
        """One token per step after the prompt pass until every row has ended or the budget
        is spent; ``seen`` gains each step's slot."""
        model, text = self.model, self.model.model
        (rows, length), slots = mask.shape, seen.shape[1]
        position = mask.sum(-1)  # the next token's position: the real tokens before it
        for step in range(max_new_tokens):
            token = said.take(model.lm_head(hidden[:, -1]).float())
            if said.finished or step == max_new_tokens - 1:
                break
            slot = length + step
            seen[:, slot] = 1
            where = torch.tensor([slot], device=seen.device)
            positions = position.float()[None, :, None].expand(3, rows, 1)
            hidden = text(text.embed_tokens(token[:, None]), positions,
                          attention_mask(seen, 1, slots, where), where)
            position = position + 1
