"""Where a model runs and in which precision: the one place that detects devices and names
precisions (the Synthesizer, the CLI and the ComfyUI nodes all read it)."""

from __future__ import annotations

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PRECISIONS = ["auto", *DTYPES]  # what the CLI and the Model Loader node offer


def mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def available_devices() -> list[str]:
    """``auto``, then every device this machine has (``cuda`` is the first GPU)."""
    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        found += ["cuda"] + [f"cuda:{i}" for i in range(1, torch.cuda.device_count())]
    if mps_available():
        found.append("mps")
    return found


def resolve_device(device: str | torch.device = "auto", field: str = "device") -> torch.device:
    """``auto``: the first GPU, else Apple's MPS, else the CPU. A device this machine does not
    have is an error naming ``field``."""
    if str(device) != "auto":
        return check_device(device, field)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def check_device(device: str | torch.device, field: str = "device") -> torch.device:
    """``device`` as a torch device this machine has, else a ValueError naming ``field`` and
    what is available."""
    have = ", ".join(available_devices())
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{field}: {device!r} is not a device; this machine has {have}") from None
    if resolved.type == "cuda":
        index = resolved.index or 0
        missing = not torch.cuda.is_available() or index >= torch.cuda.device_count()
    elif resolved.type == "mps":
        missing = not mps_available()
    else:
        missing = resolved.type != "cpu"
    if missing:
        raise ValueError(f"{field}: {str(device)!r} is not available here; this machine has {have}")
    return resolved


def resolve_dtype(precision: str | torch.dtype = "auto", device: torch.device | None = None
                  ) -> torch.dtype:
    """A precision name (``PRECISIONS``, or torch's ``bfloat16``/``float16``/``float32``) as a
    dtype. ``auto``: bf16, or fp16 on a GPU without bf16."""
    if isinstance(precision, torch.dtype):
        return precision
    if precision == "auto":
        if device is not None and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return torch.float16
        return torch.bfloat16
    by_torch_name = {str(d).removeprefix("torch."): d for d in DTYPES.values()}
    dtype = DTYPES.get(precision) or by_torch_name.get(precision)
    if dtype is None:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return dtype


# The codec's decode precision on a GPU. fp16 keeps the fixture's waveform at 52 dB SNR of fp32
# (tests/test_codec.py asserts >= CODEC_FAST_SNR_DB); bf16's 8-bit mantissa gives only ~35 dB.
CODEC_FAST_DECODE = torch.float16
CODEC_FAST_SNR_DB = 40.0


def codec_dtypes_for(device: torch.device) -> tuple[torch.dtype, torch.dtype]:
    """The codec's (encode, decode) precision by default. Encode is float32 everywhere: a voice's
    codes must not depend on the device (fp16 flips nearest-codebook choices). Decode is float32
    on the CPU (reduced-precision convolutions are slow there) and ``CODEC_FAST_DECODE`` on a
    GPU."""
    return torch.float32, torch.float32 if device.type == "cpu" else CODEC_FAST_DECODE


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` (a small CPU tensor: a prompt, positions, settings) on ``device`` without the
    host waiting for the device. A blocking copy (``.to(device)``, ``torch.tensor(...,
    device=...)``) is a host sync on CUDA: PyTorch synchronizes the stream after it, so it waits
    for every kernel queued before it. Here, on CUDA, the tensor is pinned and copied
    asynchronously (ordered on the stream before every kernel that reads it; PyTorch's pinned
    allocator keeps the block until the copy is done); on the CPU it is the tensor itself;
    elsewhere a plain copy. If pinning fails, the plain copy."""
    if host.device.type == device.type == "cpu":
        return host
    if device.type == "cuda" and host.device.type == "cpu":
        try:
            pinned = host.pin_memory()
        except RuntimeError:  # no pinned memory to be had: copy as usual (and wait)
            return host.to(device)
        return pinned.to(device, non_blocking=True)
    return host.to(device)
