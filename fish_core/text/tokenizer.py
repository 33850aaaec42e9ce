"""The S2 tokenizer: a byte-level BPE (``tokenizer.json``) read with the ``tokenizers`` library.

Every special id is looked up by its string in the vocabulary, never hard-coded, so the same
code serves the real tokenizer (``<|im_end|>`` = 151645) and the tiny test one.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenizers import Tokenizer

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VOICE = "<|voice|>"
SEMANTIC = "<|semantic:{}|>"
SPEAKER = re.compile(r"<\|speaker:\d+\|>")


class TokenizerError(ValueError):
    """tokenizer.json is missing, unreadable, or lacks a token S2 needs."""


class FishTokenizer:
    """Two encoders over one BPE: ``encode`` for the markers the prompt builder writes (special
    tokens matched), ``encode_text`` for user text (special tokens never matched)."""

    def __init__(self, tokenizer: Tokenizer):
        self._tok = tokenizer
        self._plain = plain_tokenizer(tokenizer)
        self._added_ids = set(tokenizer.get_added_tokens_decoder())
        self.im_start_id = self._require(IM_START)
        self.im_end_id = self._require(IM_END)
        self.voice_id = self._require(VOICE)
        self.semantic_begin_id = self._require(SEMANTIC.format(0))
        # The semantic ids are contiguous: <|semantic:i|> = semantic_begin_id + i.
        n = 0
        while self._tok.token_to_id(SEMANTIC.format(n)) == self.semantic_begin_id + n:
            n += 1
        self.num_semantic_tokens = n
        self.semantic_end_id = self.semantic_begin_id + n - 1
        self._speaker_ids = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()
                             if SPEAKER.fullmatch(t.content)}
        self._speaker_split = re.compile(
            "(" + "|".join(map(re.escape, self._speaker_ids)) + ")") if self._speaker_ids else None

    @classmethod
    def from_dir(cls, path: str | Path) -> "FishTokenizer":
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise TokenizerError(f"tokenizer.json not found: {file}")
        try:
            return cls(Tokenizer.from_file(str(file)))
        except TokenizerError:
            raise
        except Exception as e:  # tokenizers raises a plain Exception on malformed files
            raise TokenizerError(f"cannot read {file}: {e}") from None

    def _require(self, token: str) -> int:
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise TokenizerError(f"tokenizer.json has no token {token!r}; is this an S2 tokenizer?")
        return token_id

    def encode(self, text: str) -> list[int]:
        """Token ids of a marker part we wrote (``<|im_start|>user\\n``): special tokens matched.
        Never for user text: see ``encode_text``."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_text(self, text: str) -> list[int]:
        """Token ids of user text: only text ids. ``<|im_end|>`` or ``<|semantic:5|>`` typed in
        the text become the byte tokens of those characters (and decode back to them), so text
        cannot close a turn or inject audio codes. A ``<|speaker:N|>`` tag keeps its own id where
        the tokenizer registers one (S2's does not: there it is plain text like the rest)."""
        pieces = self._speaker_split.split(text) if self._speaker_split else [text]
        ids = []
        for piece in pieces:  # registered speaker tags at odd positions
            if piece in self._speaker_ids:
                ids.append(self._speaker_ids[piece])
            elif piece:
                ids += self._plain.encode(piece, add_special_tokens=False).ids
        leaked = sorted({i for i in ids if i in self._added_ids} - set(self._speaker_ids.values()))
        if leaked:  # only a tokenizer whose BPE vocabulary holds its own special tokens
            raise TokenizerError(f"text {text[:40]!r} encodes to special token ids {leaked}")
        return ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def check_config(self, config) -> None:
        """Fail if config.json and tokenizer.json disagree on the ids the model relies on."""
        pairs = [("eos_token_id", config.eos_token_id, self.im_end_id),
                 ("semantic_start_token_id", config.semantic_start_token_id,
                  self.semantic_begin_id),
                 ("semantic_end_token_id", config.semantic_end_token_id, self.semantic_end_id)]
        bad = [f"{name}={cfg} but tokenizer.json says {tok}"
               for name, cfg, tok in pairs if cfg != tok]
        if bad:
            raise TokenizerError("config.json and tokenizer.json disagree: " + "; ".join(bad))


def plain_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """The same BPE, normalizer and pre-tokenizer without the added vocabulary: it matches no
    special token in its input, so every id it gives is a text id."""
    plain = Tokenizer(tokenizer.model)
    plain.normalizer = tokenizer.normalizer
    plain.pre_tokenizer = tokenizer.pre_tokenizer
    plain.decoder = tokenizer.decoder
    return plain
