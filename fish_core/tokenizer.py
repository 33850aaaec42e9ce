"""The S2 tokenizer: a byte-level BPE (``tokenizer.json``) read with the ``tokenizers`` library.

Every special id is looked up by its string in the vocabulary, never hard-coded, so the same
code serves the real tokenizer (``<|im_end|>`` = 151645) and the tiny test one.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VOICE = "<|voice|>"
SEMANTIC = "<|semantic:{}|>"


class TokenizerError(ValueError):
    """tokenizer.json is missing, unreadable, or lacks a token S2 needs."""


class FishTokenizer:
    def __init__(self, tokenizer: Tokenizer):
        self._tok = tokenizer
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
        """Token ids of one prompt part. Special tokens written in the text are matched."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def check_config(self, config) -> None:
        """Fail if config.json and tokenizer.json disagree on the ids the model relies on."""
        pairs = [("eos_token_id", config.eos_token_id, self.im_end_id),
                 ("semantic_start_token_id", config.semantic_start_token_id, self.semantic_begin_id),
                 ("semantic_end_token_id", config.semantic_end_token_id, self.semantic_end_id)]
        bad = [f"{name}={cfg} but tokenizer.json says {tok}" for name, cfg, tok in pairs if cfg != tok]
        if bad:
            raise TokenizerError("config.json and tokenizer.json disagree: " + "; ".join(bad))
