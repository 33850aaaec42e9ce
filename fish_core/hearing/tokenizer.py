"""The Qwen3-ASR / ForcedAligner tokenizer: Qwen2's byte-level BPE (``vocab.json`` +
``merges.txt``, added tokens from ``tokenizer_config.json``), built with ``tokenizers``.

Two pre-tokenizer patterns exist in the wild. The checkpoint declares Qwen2's; the reference
loads it with ``fix_mistral_regex=True``, and transformers then swaps in the Mistral pattern for
vocabularies above 100 000 entries (the real checkpoints), not for small ones. ``regex="auto"``
follows that rule; ``"qwen2"`` / ``"mistral"`` force one (``golden/units/text_prep.json`` holds the
ids of both on the tiny vocabulary).

Special ids are looked up by their strings, never hard-coded: the same code reads the real
vocabulary (``<timestamp>`` = 151705) and the tiny test one.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
MISTRAL_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                   r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                   r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
MISTRAL_ABOVE = 100_000  # vocabulary entries past which the reference uses the Mistral pattern
REGEXES = ("auto", "qwen2", "mistral")

AUDIO_START = "<|audio_start|>"
AUDIO_END = "<|audio_end|>"
AUDIO_PAD = "<|audio_pad|>"
TIMESTAMP = "<timestamp>"
ASR_TEXT = "<asr_text>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"


class TokenizerError(ValueError):
    """The tokenizer files are missing, unreadable, or lack a token the model needs."""


class HearingTokenizer:
    """``encode_text``: plain text → ids, added tokens never matched (a word cannot smuggle in
    ``<timestamp>``); ``encode``: the same with added tokens matched (prompt templates);
    ``id``: one token's id; ``decode``."""

    def __init__(self, tokenizer: Tokenizer, plain: Tokenizer, regex: str):
        self._tok = tokenizer
        self._plain = plain
        self.regex = regex
        self.special_ids = {i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special}

    @classmethod
    def from_dir(cls, folder: str | Path, regex: str = "auto") -> HearingTokenizer:
        folder = Path(folder)
        if regex not in REGEXES:
            raise ValueError(f"regex must be one of {', '.join(REGEXES)}, not {regex!r}")
        files = [folder / "vocab.json", folder / "merges.txt", folder / "tokenizer_config.json"]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise TokenizerError(f"{folder.name}: tokenizer files missing: {', '.join(missing)}")
        try:
            vocab = json.loads(files[0].read_text(encoding="utf-8"))
            config = json.loads(files[2].read_text(encoding="utf-8"))
            added = config.get("added_tokens_decoder", {})
            size = max([len(vocab)] + [int(i) + 1 for i in added])
            if regex == "auto":
                regex = "mistral" if size > MISTRAL_ABOVE else "qwen2"
            built = [_build(str(files[0]), str(files[1]), added, regex, with_added)
                     for with_added in (True, False)]
        except TokenizerError:
            raise
        except Exception as e:  # tokenizers raises plain Exceptions on malformed files
            raise TokenizerError(f"{folder.name}: cannot read the tokenizer "
                                 f"({type(e).__name__})") from None
        return cls(built[0], built[1], regex)

    def id(self, token: str) -> int:
        found = self._tok.token_to_id(token)
        if found is None:
            raise TokenizerError(f"the tokenizer has no {token!r} token")
        return found

    def encode_text(self, text: str) -> list[int]:
        return self._plain.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)


def _build(vocab: str, merges: str, added: dict, regex: str, with_added: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE.from_file(vocab, merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    pattern = MISTRAL_PATTERN if regex == "mistral" else QWEN2_PATTERN
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    if with_added:
        for index in sorted(added, key=int):
            entry = added[index]
            token = AddedToken(entry["content"], single_word=entry.get("single_word", False),
                               lstrip=entry.get("lstrip", False),
                               rstrip=entry.get("rstrip", False),
                               normalized=entry.get("normalized", False),
                               special=entry.get("special", False))
            if entry.get("special", False):
                tok.add_special_tokens([token])
            else:
                tok.add_tokens([token])
            if tok.token_to_id(entry["content"]) != int(index):
                raise TokenizerError(f"added token {entry['content']!r} is not id {index}")
    return tok
