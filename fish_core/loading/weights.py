"""Stream tensors into a model built on the ``meta`` device: check each name and shape, place
it, and report every mismatch together at the end.

The LLM checkpoint (``checkpoint``), FP8 checkpoints (``fp8_checkpoint``) and the codec
(``codec_checkpoint``) all load through ``StreamedLoad``; ``Problems`` is the one "weights do
not match" report.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

LISTED = 20  # names shown per kind of problem
LABELS = {"missing": "missing", "unexpected": "unexpected", "misshaped": "wrong shape"}


class Problems:
    """Missing / unexpected / mis-shaped tensors, raised together as one error.

    ``labels`` names the three kinds in the message (``LABELS`` by default)."""

    def __init__(self, labels: dict[str, str] = LABELS):
        self.labels = labels
        self.missing: list[str] = []
        self.unexpected: list[str] = []
        self.misshaped: list[str] = []

    def raise_if_any(self, header: str, error: type[Exception]) -> None:
        """Raise ``error("header\\n  missing (n): a, b …\\n  …")`` if anything was recorded."""
        kinds = {"missing": sorted(self.missing), "unexpected": sorted(self.unexpected),
                 "misshaped": self.misshaped}
        if not any(kinds.values()):
            return
        lines = [header]
        for kind, items in kinds.items():
            if items:
                more = " …" if len(items) > LISTED else ""
                lines.append(f"  {self.labels[kind]} ({len(items)}): "
                             + ", ".join(items[:LISTED]) + more)
        raise error("\n".join(lines))


def assign(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    """Set parameter ``name`` (``"layers.0.attention.wqkv.weight"``) of ``model`` to ``tensor``."""
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    module._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)


class StreamedLoad:
    """One load of ``model`` (built on ``meta``): ``take`` each stored tensor, then ``finish``.

    ``display(name)`` is how a missing parameter is named in the report (the stored style)."""

    def __init__(self, model: nn.Module, display: Callable[[str], str] = str,
                 labels: dict[str, str] = LABELS):
        self.model, self.display = model, display
        self.shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
        self.seen: set[str] = set()
        self.problems = Problems(labels)

    def expects(self, stored: str, name: str, shape: tuple[int, ...]) -> bool:
        """Whether a tensor of ``shape`` stored as ``stored`` fits parameter ``name``; records
        why not. A known name counts as seen even when its shape is wrong (reported once)."""
        if name not in self.shapes or name in self.seen:
            self.problems.unexpected.append(stored)
            return False
        if tuple(shape) != self.shapes[name]:
            self.problems.misshaped.append(
                f"{stored}: {tuple(shape)}, expected {self.shapes[name]}")
            self.seen.add(name)
            return False
        return True

    def place(self, name: str, tensor: torch.Tensor) -> None:
        assign(self.model, name, tensor)
        self.seen.add(name)

    def take(self, stored: str, name: str, tensor: torch.Tensor,
             convert: Callable[[str, torch.Tensor], torch.Tensor]) -> None:
        """Check ``tensor`` and place ``convert(name, tensor)``."""
        if self.expects(stored, name, tensor.shape):
            self.place(name, convert(name, tensor))

    def finish(self, header: str, error: type[Exception]) -> nn.Module:
        """Report what is missing, unexpected or mis-shaped in one ``error``; returns the model."""
        self.problems.missing += [self.display(n) for n in self.shapes.keys() - self.seen]
        self.problems.raise_if_any(header, error)
        return self.model
