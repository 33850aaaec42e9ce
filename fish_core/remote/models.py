"""Which model a remote engine speaks with, and what that model can do.

An engine lists its models at ``GET /v1/models`` (OpenAI's ``{"data": [{"id": …}]}``); the
client picks one by name (``RemoteSynthesizer(model=…)``, ``--remote-model``) or takes the
engine's first, and names it in every request. fish-speech's server has no model list: it
speaks the one model it was started with, and a ``model`` given for it is taken on trust.

What depends on the model (see docs/engines.md):

* S2-Pro (``s2-pro``, and any model not known to be another): scripts keep the local rule
  (a voice for every speaker when voices are given; speaker indices unbounded).
* Fish Audio Drama 3 (``drama-3``, ``fishaudio/drama-3``): up to 16 speakers
  (``<|speaker:0|>`` … ``<|speaker:15|>``); voices for as many speakers as are given, the
  model inventing the rest; bracketed directions (``[whispering]``) pass through untouched.

Engines send audio only: codes (``Speech.codes``, saving a voice as codes) are never
available from a remote model, whichever it is."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .http import quote, quote_names

MODELS_BYTES = 1 << 20  # a model list longer than this is not a model list
MAX_MODELS = 256


class UnknownModel(ValueError):
    """A model name the engine does not list (the message lists the ones it does)."""


@dataclass(frozen=True)
class ModelSpec:
    """What the client needs to know about the model a remote engine speaks with."""

    name: str  # as the engine lists it ("" when the engine names none)
    family: str  # "s2" or "drama-3"
    max_speakers: int | None  # speaker indices 0 … max_speakers-1 (None: not bounded here)
    invents_voices: bool  # speakers without a voice get one from the model

    @property
    def label(self) -> str:
        return self.name or "the engine's model"


DRAMA_3 = re.compile(r"(^|[/_\-])drama[-_ ]?3([-_.]|$)", re.IGNORECASE)


def spec(name: str | None) -> ModelSpec:
    """The rules for model ``name`` (S2-Pro's unless the name says Drama 3)."""
    name = name or ""
    if DRAMA_3.search(name):
        return ModelSpec(name, "drama-3", 16, True)
    return ModelSpec(name, "s2", None, False)


def model_ids(answer, where: str) -> list[str]:
    """The model ids of a ``/v1/models`` answer, in the engine's order."""
    from ..audio.wav import AudioFormatError

    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise AudioFormatError(f"{where}: the model list has no 'data' list")
    ids = [m.get("id") for m in data[:MAX_MODELS] if isinstance(m, dict)]
    return [i for i in ids if isinstance(i, str) and i]


def choose(requested: str | None, available: list[str], where: str,
           names: Callable[[list[str]], str] = quote_names) -> str | None:
    """``requested`` if the engine lists it, else the engine's first model; None when the
    engine lists none and none was asked for. ``names``: how the engine's list is quoted
    (its first few names and a count)."""
    if requested is not None and not isinstance(requested, str):
        raise ValueError(f"model must be a model name (a string), got {type(requested).__name__}")
    requested = (requested or "").strip()
    if not requested:
        return available[0] if available else None
    if available and requested not in available:
        served = served_as(requested, available)
        if served is None:
            raise UnknownModel(f"model {quote(requested)!r} is not served by {where}; it "
                               f"serves {names(available)}")
        return served
    return requested


S2_NAME = re.compile(r"(^|[/_\-])(s2|fish|openaudio)", re.IGNORECASE)


def base_name(name: str) -> str:
    """The last part of a model path or repo id, lower case (``fishaudio/s2-pro`` → ``s2-pro``)."""
    return name.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1].lower()


def served_as(requested: str, available: list[str]) -> str | None:
    """The one model of ``available`` that ``requested`` names although the engine lists it by
    another name (engines list the path or repo id they were started with: ``fishaudio/s2-pro``,
    ``/models/s2-pro``): the one whose last part is ``requested``'s, else the one model of its
    family (S2 or Drama 3; among several S2-family names, the one that says S2); None when no
    single model fits."""
    same = [m for m in available if base_name(m) == base_name(requested)]
    if len(same) == 1:
        return same[0]
    family = spec(requested).family
    if family == "s2" and not S2_NAME.search(base_name(requested)):
        return None  # a name that does not say which model it means is never guessed
    kin = [m for m in available if spec(m).family == family]
    if family == "s2" and len(kin) > 1:
        kin = [m for m in kin if S2_NAME.search(base_name(m))]
    return kin[0] if len(kin) == 1 else None
