"""Parameters, seeds, errors and the engine's result type: the leaf every layer may import.

Nothing here imports torch at module level or any other module of the pack, so the remote
client, the HTTP request parser and the ComfyUI nodes can name sampling parameters, seeds and
generation errors without loading the engine.

* ``SamplingParams`` and ``DEFAULTS``: the one place the sampling defaults and their checks live;
  ``Rule``: one allowed range, the only one every door (Python, CLI, nodes, HTTP) and the docs
  use; ``RequestError``: a setting outside its rule, naming the field (each door renames it).
* Seeds are ``0 .. MAX_SEED`` everywhere (engine, synthesizers, CLI, nodes, HTTP);
  ``batch_seed(seed, k)`` is the seed of text batch (or take) ``k``.
* ``FIRST_FRAMES``, ``CHUNK_FRAMES``: how a stream is cut into chunks
(``local.driver.ChunkDecoder``).
* ``GenerationError`` (a request cannot be served) and ``Cancelled`` (the caller stopped it).
* ``Generated``: one generated row (codes, columns, why it stopped).
"""

from __future__ import annotations

import operator
import secrets
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from torch import Tensor

MAX_SEED = 2**63 - 1  # seeds are 0 .. MAX_SEED everywhere (engine, Synthesizer, CLI, nodes)
MAX_TOP_K = 4096  # past the codebook's 4096 tokens a larger k changes nothing
MAX_NEW_TOKENS = 32768  # frames per text batch: the longest context of an S2 model
FIRST_FRAMES = 4  # a stream's first audio after this many frames (~0.19 s of speech)
CHUNK_FRAMES = 32  # later chunks double up to this many frames (~1.5 s)


class GenerationError(ValueError):
    """A generation request cannot be served (bad parameter, prompt too long …)."""


class Cancelled(RuntimeError):
    """Generation was cancelled by the caller's ``cancel`` callback."""


@dataclass(frozen=True)
class Rule:
    """One allowed range: ``low .. high`` (``high`` None: no upper bound), ends open or not, an
    integer or any finite number. The one rule of a setting, used by every door and the docs."""

    low: float
    high: float | None = None
    integer: bool = False
    low_open: bool = False
    high_open: bool = False

    @property
    def interval(self) -> str:
        if self.integer:
            return f"{self.low} .. {self.high}" if self.high is not None else f">= {self.low}"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"{left}{self.low:g}, {self.high:g}{right}"

    @property
    def expected(self) -> str:
        if self.integer:
            return (f"an integer in {self.interval}" if self.high is not None
                    else f"an integer {self.interval}")
        return f"a number in {self.interval}"

    def holds(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return False
        low_ok = value > self.low if self.low_open else value >= self.low
        if self.high is None:
            return low_ok
        return low_ok and (value < self.high if self.high_open else value <= self.high)

    def check(self, value, field: str):
        """``value`` if the rule holds for it, else a ``RequestError`` naming ``field``."""
        if not self.holds(value):
            raise RequestError(field, self, value)
        return value


class RequestError(GenerationError):
    """A setting outside its ``Rule``: ``field`` as the Python API names it; a door reports it
    in its own names (``renamed``) and, the HTTP service, its own words (``rule.interval``)."""

    def __init__(self, field: str, rule: Rule | None, value, message: str | None = None):
        self.field, self.rule, self.value = field, rule, value
        super().__init__(message or f"{field} must be {rule.expected}, got {value!r}")

    def renamed(self, names: Mapping[str, str]) -> "RequestError":
        """The same error with its field as a door names it (``names[field]``)."""
        name = names.get(self.field, self.field)
        text = str(self)
        if text.startswith(self.field):
            text = name + text[len(self.field):]
        return RequestError(name, self.rule, self.value, text)


class FieldError(RequestError):
    """A ``RequestError`` said in its own words (a pause tag, a script, a lexicon line): its
    ``FIELD`` unless the raiser names another; the message says what is wrong."""

    FIELD = "text"

    def __init__(self, message: str, field: str | None = None, value=None,
                 rule: Rule | None = None):
        super().__init__(field or self.FIELD, rule, value, message)


SAMPLING_RULES = {
    "temperature": Rule(0, 2, low_open=True, high_open=True),
    "top_p": Rule(0, 1, low_open=True),
    "top_k": Rule(1, MAX_TOP_K, integer=True),
    "max_new_tokens": Rule(1, MAX_NEW_TOKENS, integer=True),
}


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30
    max_new_tokens: int = 1024

    def validate(self) -> "SamplingParams":
        for name, rule in SAMPLING_RULES.items():
            rule.check(getattr(self, name), name)
        return self

    @classmethod
    def from_options(cls, options: Mapping[str, Any], where: str) -> "SamplingParams":
        """The checked parameters from keyword options (missing ones take the defaults). A
        keyword that is not a sampling parameter is a ``TypeError`` naming it and ``where``
        (the method it was given to), as Python says it for any unknown keyword."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r} "
                            f"(sampling options: {', '.join(sorted(names))})")
        return cls(**options).validate()


DEFAULTS = SamplingParams()  # the one source of the sampling defaults


@dataclass
class Generated:
    """One row's result. ``codes [K, frames]``: every generated frame; the ``<|im_end|>`` column
    is dropped, and unlike the reference the last frame is kept when the length limit stops us.
    ``columns [1 + K, n]``: every column the model produced (row 0 = main token id)."""

    codes: Tensor
    columns: Tensor
    stopped_on_eos: bool
    prompt_length: int
    seed: int | None = None


SEED_RULE = Rule(0, MAX_SEED, integer=True)


def random_seed() -> int:
    """A fresh seed in 0 .. MAX_SEED."""
    return secrets.randbits(63)


def batch_seed(seed: int, index: int) -> int:
    """Text batch (or take) ``index`` of a request seeded ``seed`` draws with ``seed + index``,
    wrapping within the seed range."""
    return (seed + index) % (MAX_SEED + 1)


def check_seed(seed, field: str = "seed") -> int:
    """``seed`` as an int in 0 .. MAX_SEED; any int-like (``operator.index``: int, numpy ints)
    is accepted. A bool, a float, a string or an out-of-range value raises GenerationError
    naming ``field``."""
    if isinstance(seed, bool):
        raise RequestError(field, SEED_RULE, seed)
    try:
        value = operator.index(seed)
    except TypeError:
        raise RequestError(field, SEED_RULE, seed) from None
    return SEED_RULE.check(value, field)


def pick_seed(seed: int | None) -> int:
    """A request's base seed: ``seed`` (checked), or a fresh random one."""
    return random_seed() if seed is None else check_seed(seed)
