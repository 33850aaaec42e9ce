"""``Settings``: how a request is spoken, apart from what is said and in which voice.

Sampling, seed, takes, history, batching and finishing, frozen and checked when made, so every
door (the Python API, the CLI, the ComfyUI nodes, the HTTP service) checks them before any model
loads, and hands them on as one object (as vLLM's ``SamplingParams`` travel beside a prompt).
``Settings.of`` takes them as flat keywords (``temperature=0.7, speed=1.2, seed=3``): each
keyword is a field of ``SamplingParams``, of ``Finishing`` or of ``Settings`` itself, so a new
option is one field (and its rule) plus the doors' declarations. A keyword that is none of them
is a ``TypeError`` naming it, as Python says it for any unknown keyword.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..params import (CHUNK_FRAMES, DEFAULTS, FIRST_FRAMES, MAX_SEED, SAMPLING_RULES,
                      SEED_RULE, RequestError, Rule, SamplingParams, check_seed, random_seed)
from ..text.plan import DEFAULT_MAX_BYTES
from .finishing import Finishing
from .results import MAX_TAKES
from .words import check_words

TAKES = Rule(1, MAX_TAKES, integer=True)
HISTORY_TURNS = Rule(0, None, integer=True)
MAX_BYTES = Rule(16, None, integer=True)  # text bytes per batch
FRAMES = Rule(1, 1024, integer=True)  # a stream's first chunk and later chunks, in frames
RULES = {"history_turns": HISTORY_TURNS, "max_bytes": MAX_BYTES, "first_frames": FRAMES,
         "chunk_frames": FRAMES}

SAMPLING = tuple(f.name for f in fields(SamplingParams))
FINISHING = tuple(f.name for f in fields(Finishing))


@dataclass(frozen=True)
class Settings:
    sampling: SamplingParams = DEFAULTS
    seed: int | None = None  # None: a fresh one, picked once per request (``seeded``)
    takes: int | None = None  # None: one result; N: a list of N, take k seeded seed + k
    history_turns: int = 3  # generated turns a text batch sees
    max_bytes: int = DEFAULT_MAX_BYTES  # text bytes per batch
    first_frames: int = FIRST_FRAMES  # a stream's chunking
    chunk_frames: int = CHUNK_FRAMES
    finishing: Finishing = Finishing()
    # Timed words on each result (``speech.words``): None, "auto" or one of the aligner's
    # languages (True is "auto").
    words: str | None = None
    # Every take heard by the speech recogniser and scored against its text (``Speech.check``)
    check: bool = False

    def __post_init__(self):
        self.sampling.validate()
        if self.seed is not None:
            object.__setattr__(self, "seed", check_seed(self.seed))
        if self.takes is not None:
            TAKES.check(self.takes, "takes")
        for name, rule in RULES.items():
            rule.check(getattr(self, name), name)
        object.__setattr__(self, "words", check_words(self.words))
        if not isinstance(self.check, bool):
            raise RequestError("check", None, self.check,
                               f"check must be true or false, got {self.check!r}")
        if not isinstance(self.finishing, Finishing):
            raise TypeError(f"finishing must be a Finishing, got {type(self.finishing).__name__}")

    @property
    def count(self) -> int:
        """How many takes are generated."""
        return self.takes or 1

    @classmethod
    def of(cls, settings: "Settings | None" = None, where: str = "tts", **options) -> "Settings":
        """``settings`` (default: the defaults) with ``options``, flat keywords of its fields,
        of ``SamplingParams`` and of ``Finishing``, checked. ``where`` names the method the
        keywords were given to (a kind that does not take one: ``NOT_TAKEN``)."""
        base = settings if settings is not None else DEFAULT
        if not isinstance(base, Settings):
            raise TypeError(f"{where}() settings must be a Settings, got {type(base).__name__}")
        taken = set(KEYWORDS) - set(NOT_TAKEN.get(where, ()))
        unknown = sorted(set(options) - taken)
        if unknown:
            raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r} "
                            f"(settings: {', '.join(sorted(taken))})")
        if not options:
            return base
        sampling = {k: options.pop(k) for k in SAMPLING if k in options}
        finishing = {k: options.pop(k) for k in FINISHING if k in options}
        if sampling:
            options["sampling"] = SamplingParams(**{**base.sampling.__dict__, **sampling})
        if finishing:
            options["finishing"] = Finishing.of(**{**base.finishing.keywords(), **finishing})
        return replace(base, **options)

    def seeded(self, max_seed: int = MAX_SEED) -> "Settings":
        """These settings with their seed picked (a request's: ``speech.request``)."""
        return replace(self, seed=pick_seed(self.seed, max_seed))

    def as_dict(self) -> dict:
        """What a result or a book's digest records of them (the lexicon as its digest)."""
        found = {"sampling": self.sampling.__dict__, "seed": self.seed, "takes": self.takes,
                 "history_turns": self.history_turns, "max_bytes": self.max_bytes,
                 "finishing": self.finishing.as_dict(), "check": self.check}
        if self.words:
            found["words"] = self.words
        return found


DEFAULT = Settings()
OWN = tuple(f.name for f in fields(Settings) if f.name not in ("sampling", "finishing"))
KEYWORDS = (*SAMPLING, *OWN, *FINISHING)  # every flat keyword ``Settings.of`` takes
# What a kind of call does not take (a stream is one take; a subtitle cue is one batch).
NOT_TAKEN = {"tts": ("first_frames", "chunk_frames"),
             "dialogue": ("first_frames", "chunk_frames"),
             "stream": ("takes", "words", "check"),
             "subtitles": ("takes", "max_bytes", "first_frames", "chunk_frames", "check")}


def rules() -> dict[str, Rule]:
    """The one rule of every number a request takes, by its keyword: what the doors offer
    (the nodes' widget ranges) and the docs print."""
    return {**SAMPLING_RULES, "seed": SEED_RULE, "takes": TAKES, **RULES, **Finishing.RULES}


def pick_seed(seed: int | None, max_seed: int = MAX_SEED) -> int:
    """A request's base seed: ``seed`` (checked), or a fresh one below half of ``max_seed``
    when that is not the whole range (so the seeds of takes and pieces stay in it)."""
    if seed is not None:
        return check_seed(seed)
    fresh = random_seed()
    return fresh if max_seed == MAX_SEED else fresh % (max_seed // 2 + 1)
