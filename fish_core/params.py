"""Parameters, seeds, errors and the engine's result type: the leaf every layer may import.

Nothing here imports torch at module level or any other module of the pack, so the remote
client, the HTTP request parser and the ComfyUI nodes can name sampling parameters, seeds and
generation errors without loading the engine.

* ``SamplingParams`` and ``DEFAULTS``: the one place the sampling defaults and their checks live.
* Seeds are ``0 .. MAX_SEED`` everywhere (engine, synthesizers, CLI, nodes, HTTP);
  ``batch_seed(seed, k)`` is the seed of text batch (or take) ``k``.
* ``FIRST_FRAMES``, ``CHUNK_FRAMES``: how a stream is cut into chunks (``local.stream``).
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
FIRST_FRAMES = 4  # a stream's first audio after this many frames (~0.19 s of speech)
CHUNK_FRAMES = 32  # later chunks double up to this many frames (~1.5 s)


class GenerationError(ValueError):
    """A generation request cannot be served (bad parameter, prompt too long …)."""


class Cancelled(RuntimeError):
    """Generation was cancelled by the caller's ``cancel`` callback."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int = 30
    max_new_tokens: int = 1024

    def validate(self) -> "SamplingParams":
        def bad(field, expected, value):
            raise GenerationError(f"{field} must be {expected}, got {value!r}")

        if not isinstance(self.temperature, (int, float)) or not 0 < self.temperature < 2:
            bad("temperature", "a number in (0, 2)", self.temperature)
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            bad("top_p", "a number in (0, 1]", self.top_p)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            bad("top_k", "an integer >= 1", self.top_k)
        if (isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int)
                or self.max_new_tokens < 1):
            bad("max_new_tokens", "an integer >= 1", self.max_new_tokens)
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
    allowed = f"an integer in 0 .. {MAX_SEED}"
    if isinstance(seed, bool):
        raise GenerationError(f"{field} must be {allowed}, got {seed!r}")
    try:
        value = operator.index(seed)
    except TypeError:
        raise GenerationError(f"{field} must be {allowed}, got {seed!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise GenerationError(f"{field} must be {allowed}, got {value}")
    return value


def pick_seed(seed: int | None) -> int:
    """A request's base seed: ``seed`` (checked), or a fresh random one."""
    return random_seed() if seed is None else check_seed(seed)
