"""Conversation → the ``[1 + num_codebooks, T]`` prompt tensor the Dual-AR model reads.

Row 0 holds token ids; rows 1..num_codebooks hold the codebook values at audio (VQ) positions
and 0 elsewhere. Each text part is tokenized on its own, so BPE never merges across parts.
Layout (spec §4)::

    <|im_start|>system\\n  convert the provided text to speech[ reference …]  <|im_end|>\\n
    (<|im_start|>user\\n {turn text} <|im_end|>\\n
     <|im_start|>assistant\\n<|voice|> {turn codes} <|im_end|>\\n)*       # history
    <|im_start|>user\\n {text} <|im_end|>\\n
    <|im_start|>assistant\\n<|voice|>                                       # generation starts here
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence, Union

import torch

from .tokenizer import IM_END, IM_START, VOICE, FishTokenizer

SYSTEM_PLAIN = "convert the provided text to speech"
SYSTEM_REFERENCE = "convert the provided text to speech reference to the following:\n\nText:\n"
SPEECH_HEADER = "\n\nSpeech:\n"
SPEAKER_TAG = re.compile(r"<\|speaker:(\d+)\|>")
MODALITY_TOKENS = {"voice": VOICE, None: ""}

Part = Union[str, torch.Tensor]  # text, or codes [num_codebooks, T]


class Marker(str):
    """A prompt part the encoder writes itself (role line, end of turn): the only text whose
    special tokens are matched. Every other text part is user text (``encode_text``)."""


class PromptError(ValueError):
    """A prompt part (text or reference codes) is not usable."""


@dataclass
class Reference:
    """A voice reference: what was said (``text``) and its codec codes ``[num_codebooks, T]``."""

    text: str
    codes: torch.Tensor


@dataclass
class Message:
    role: str  # "system" | "user" | "assistant"
    parts: list[Part] = field(default_factory=list)
    modality: str | None = None  # "voice" puts <|voice|> right after the role line
    add_im_end: bool = True


def system_message(references: Sequence[Reference] = ()) -> Message:
    if not references:
        return Message("system", [SYSTEM_PLAIN])
    texts = [ref.text if SPEAKER_TAG.search(ref.text) else f"<|speaker:{i}|>{ref.text}"
             for i, ref in enumerate(references)]
    codes = torch.cat([ref.codes for ref in references], dim=1)
    return Message("system", [SYSTEM_REFERENCE, "\n".join(texts), SPEECH_HEADER, codes])


def user_message(text: str) -> Message:
    return Message("user", [text])


def assistant_message(codes: torch.Tensor | None = None) -> Message:
    """The assistant's voice turn: finished (with ``codes``) or open for generation."""
    if codes is None:
        return Message("assistant", [], modality="voice", add_im_end=False)
    return Message("assistant", [codes], modality="voice")


def conversation(text: str, references: Sequence[Reference] = (),
                 history: Sequence[tuple[str, torch.Tensor]] = ()) -> list[Message]:
    """System turn, then earlier (text, codes) turns, then ``text`` with an open voice turn."""
    messages = [system_message(references)]
    for turn_text, turn_codes in history:
        messages += [user_message(turn_text), assistant_message(turn_codes)]
    messages += [user_message(text), assistant_message()]
    return messages


class PromptEncoder:
    def __init__(self, tokenizer: FishTokenizer, num_codebooks: int, codebook_size: int):
        self.tokenizer = tokenizer
        self.num_codebooks = num_codebooks
        self.codebook_size = codebook_size

    def parts(self, messages: Sequence[Message]) -> list[Part]:
        """Flatten messages into their parts, adding the role and end markers."""
        out: list[Part] = []
        for m in messages:
            out.append(Marker(f"{IM_START}{m.role}\n{MODALITY_TOKENS[m.modality]}"))
            out.extend(m.parts)
            if m.add_im_end:
                out.append(Marker(IM_END + "\n"))
        return out

    def encode(self, messages: Sequence[Message]) -> torch.Tensor:
        """``[1 + num_codebooks, T]`` int64 prompt."""
        columns = []
        for part in self.parts(messages):
            if isinstance(part, str):
                encode = (self.tokenizer.encode if isinstance(part, Marker)
                          else self.tokenizer.encode_text)
                ids = torch.tensor(encode(part), dtype=torch.long)
                block = torch.zeros(1 + self.num_codebooks, len(ids), dtype=torch.long)
                block[0] = ids
            else:
                codes = self.check_codes(part)
                block = torch.cat([codes[:1] + self.tokenizer.semantic_begin_id, codes])
            columns.append(block)
        return torch.cat(columns, dim=1)

    def check_codes(self, codes: torch.Tensor, name: str = "codes") -> torch.Tensor:
        if (not isinstance(codes, torch.Tensor) or codes.dim() != 2
                or codes.shape[0] != self.num_codebooks):
            shape = tuple(codes.shape) if isinstance(codes, torch.Tensor) else type(codes).__name__
            raise PromptError(f"{name} must be an integer tensor [{self.num_codebooks}, frames], "
                              f"got {shape}")
        if codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise PromptError(f"{name} must hold integers, got {codes.dtype}")
        codes = codes.detach().to("cpu", torch.long)
        if codes.numel() and (codes.min() < 0 or codes.max() >= self.codebook_size):
            raise PromptError(f"{name} values must lie in [0, {self.codebook_size}), got "
                              f"[{int(codes.min())}, {int(codes.max())}]")
        return codes
