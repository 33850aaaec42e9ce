"""``Runtime``: what generates speech for one loaded model, under the public ``Synthesizer``.

It owns the model's ``Engine`` (the decode step, the KV cache and the prefix cache of voice
prefixes), the codec, the tokenizer with its prompt encoder and the context limit. It turns
voices into prompt references, encodes prompts (a voice's system turn once per job, then each
text batch after it) and opens the row batches every generation decodes in
(``engine.rows.RowBatch``). The driver (``SpeechJob``, ``run_round``, ``JobRows``),
the local ``Synthesizer`` (the front's backend: loading, voices, render, streams) and the HTTP
scheduler take a runtime.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..codec.model import CHECKPOINT_NAME, Codec
from ..engine.config import ModelConfig
from ..engine.rows import RowBatch
from ..engine.runner import Engine
from ..engine.model import DualAR
from ..engine.prefix_cache import megabytes
from ..loading.checkpoint import CheckpointError
from ..params import GenerationError
from ..speech.voices import Voice, encode_voice
from ..text.prompt import PromptEncoder, Reference, conversation, system_message
from ..text.tokenizer import FishTokenizer


class Runtime:
    def __init__(self, model: DualAR, tokenizer: FishTokenizer, codec: Codec | None,
                 compile: bool | str = False, context_length: int | None = None,
                 compile_cache: str | None = None, prefix_cache_mb: float | None = None):
        self.model = model
        self.config: ModelConfig = model.config
        self.tokenizer = tokenizer
        tokenizer.check_config(self.config)
        self.codec = codec
        self.encoder = PromptEncoder(tokenizer, self.config.num_codebooks,
                                     self.config.codebook_size)
        # prefix_cache_mb: the budget for reused voice prefixes (engine/prefix_cache.py);
        # None = the default, 0 = off.
        self.engine = Engine(model, compile=compile, max_context=context_length,
                             compile_cache=compile_cache, prefix_cache_mb=prefix_cache_mb)

    @property
    def max_context(self) -> int:
        """Prompt + generated tokens the engine holds at most."""
        return self.engine.max_context

    @property
    def sample_rate(self) -> int:
        return self.require_codec().sample_rate

    def require_codec(self) -> Codec:
        if self.codec is None:
            raise CheckpointError(f"this model folder has no {CHECKPOINT_NAME}, so audio cannot "
                                  "be made")
        return self.codec

    def encode_voice(self, audio, text: str, name: str = "voice",
                     sample_rate: int | None = None) -> Voice:
        return encode_voice(self.require_codec(), audio, text, name, sample_rate)

    def release(self) -> None:
        """Free the KV caches, the CUDA graph and the kept voice prefixes."""
        self.engine.release()

    def resize_prefix_cache(self, prefix_cache_mb: float | None) -> None:
        """A new budget for the kept voice prefixes (None: the default, 0: off); the least
        recently used go until the rest fits."""
        self.engine.prefixes.resize(megabytes(prefix_cache_mb))

    # ------------------------------------------------------------------ prompts
    def references(self, voices: Sequence[Voice]) -> list[Reference]:
        """The voices' clips as prompt references (voice i speaks as ``<|speaker:i|>``)."""
        for v in voices:
            for clip in v.clips:
                self.encoder.check_codes(clip.codes, f"voice {v.name!r}")
        return [ref for i, v in enumerate(voices) for ref in v.tagged(i)]

    def system_turn(self, references: Sequence[Reference]) -> torch.Tensor:
        """The voice prefix ``[1 + K, P]`` every prompt with ``references`` starts with (the
        system turn). Each prompt part is tokenized on its own, so a whole prompt's first
        columns are exactly these: it is encoded once per job, and its KV reused."""
        return self.encoder.encode([system_message(references)])

    def prompt(self, text: str, system: torch.Tensor, history, max_new_tokens: int
               ) -> torch.Tensor:
        """The prompt ``[1 + K, T]``: ``system`` (``system_turn``), the ``history`` turns and
        ``text``, dropping the oldest history turns until generation fits."""
        limit = self.engine.max_context
        history = list(history)
        while True:
            rest = self.encoder.encode(conversation(text, (), history)[1:])  # after the system
            prompt = torch.cat([system, rest], dim=1)
            if prompt.shape[1] + min(max_new_tokens, limit // 2) <= limit or not history:
                break
            history.pop(0)
        if prompt.shape[1] >= limit:
            raise GenerationError(
                f"the prompt is {prompt.shape[1]} tokens but the model's context is {limit}: "
                "use shorter or fewer reference clips, or a smaller text batch")
        return prompt

    # ------------------------------------------------------------------ decoding
    def row_batch(self, rows: int) -> RowBatch:
        """``rows`` decode rows on this model's engine (the one decode loop)."""
        return RowBatch(self.engine, rows)
