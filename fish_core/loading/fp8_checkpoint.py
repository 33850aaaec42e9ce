"""Read FP8 checkpoints (``quant.layout``): e4m3 codes paired with their ``.scale`` row scales.

A checkpoint is FP8 when any tensor is float8_e4m3fn (read from the headers only). While it
streams, each e4m3 weight waits for its scale (either may come first); a complete pair goes
through ``converter.from_fp8``, every other tensor through ``converter``. FP8 anywhere but a
Linear weight or an embedding table (a norm) is an error, and so is a scale without its weight.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from .shards import CheckpointError, iter_tensors, read_headers
from .siblings import quant
from .tensor_names import to_hf, to_internal
from .weights import LABELS, StreamedLoad

layout = quant.layout
LABELS_FP8 = {**LABELS, "misshaped": "wrong shape or dtype"}


def is_fp8_checkpoint(folder: str | Path) -> bool:
    """Whether any tensor of the checkpoint is float8_e4m3fn (read from the headers only)."""
    return bool(stored_fp8(folder))


def stored_fp8(folder: str | Path) -> list[str]:
    """Internal names of the tensors stored as float8_e4m3fn (from the headers only)."""
    return [to_internal(name) for name, (_, dtype) in read_headers(folder).items()
            if dtype == layout.STORED_DTYPE]


class FP8Stream:
    """One FP8-checkpoint load into ``model`` (built on meta): ``take`` each stored tensor."""

    def __init__(self, model: nn.Module, device: torch.device, dtype: torch.dtype,
                 converter: quant.Converter):
        self.device, self.dtype, self.converter = device, dtype, converter
        self.load = StreamedLoad(model, display=to_hf, labels=LABELS_FP8)
        # Weights that may be stored as FP8 rows: name → (rows, columns).
        self.rowwise = {**quant.linear_weights(model), **quant.embedding_weights(model)}
        self.codes: dict[str, torch.Tensor] = {}  # weight → e4m3 codes waiting for a scale
        self.scales: dict[str, torch.Tensor] = {}  # weight → scale waiting for codes
        self.scale_names: dict[str, str] = {}  # weight → stored name of its (first) scale
        self.plain: set[str] = set()  # rowwise weights stored in bf16

    def take(self, stored: str, tensor: torch.Tensor) -> None:
        if stored.startswith(layout.BUFFER_PREFIX):
            return
        name = to_internal(stored)
        weight = layout.weight_of_scale(name)
        if weight in self.rowwise:
            self.take_scale(stored, weight, tensor)
        elif name in self.codes:  # the same weight twice
            self.load.problems.unexpected.append(stored)
        elif not self.load.expects(stored, name, tensor.shape):
            return
        elif tensor.dtype == quant.fp8.FP8:
            self.take_codes(stored, name, tensor)
        else:
            if name in self.rowwise:
                self.plain.add(name)
            self.load.place(name, self.converter(name, tensor.to(self.device, self.dtype)))

    def take_scale(self, stored: str, weight: str, tensor: torch.Tensor) -> None:
        problem = layout.scale_problem(tensor, self.rowwise[weight][0])
        if weight in self.scale_names:
            self.load.problems.unexpected.append(stored)
        elif problem:
            self.load.problems.misshaped.append(f"{stored}: {problem}")
        else:
            self.scales[weight] = tensor
            self.pair(weight)
        self.scale_names.setdefault(weight, stored)

    def take_codes(self, stored: str, name: str, tensor: torch.Tensor) -> None:
        if name not in self.rowwise:
            self.load.problems.misshaped.append(f"{stored}: float8_e4m3fn, but only Linear "
                                                "weights and embedding tables may be FP8")
            self.load.seen.add(name)
            return
        self.codes[name] = tensor
        self.pair(name)

    def pair(self, weight: str) -> None:
        if weight in self.codes and weight in self.scales:
            q, scale = self.codes.pop(weight), self.scales.pop(weight)
            self.load.place(weight, self.converter.from_fp8(weight, q, scale))

    def finish(self, folder: Path) -> None:
        """Report codes left without a (valid) scale, scales of bf16 weights, and the rest."""
        problems = self.load.problems
        for weight in self.codes:
            if weight not in self.scale_names:
                problems.missing.append(to_hf(weight) + layout.SCALE_SUFFIX)
            self.load.seen.add(weight)  # reported through its scale, not as missing
        problems.unexpected += [f"{stored} (its weight is not FP8)"
                                for weight, stored in self.scale_names.items()
                                if weight in self.plain]
        self.load.finish(f"{folder}: the weights do not match config.json", CheckpointError)


def load_fp8(model: nn.Module, folder: Path, device: torch.device, dtype: torch.dtype,
             converter: quant.Converter, mapped=None) -> None:
    """Stream the FP8 checkpoint ``folder`` into ``model`` (built on meta); ``mapped`` as
    ``shards.iter_tensors`` takes it."""
    stream = FP8Stream(model, device, dtype, converter)
    for stored, tensor in iter_tensors(folder, mapped):
        stream.take(stored, tensor)
    stream.finish(folder)
