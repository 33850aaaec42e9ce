"""``engine/device.py``'s ``to_device``: host data on the engine's device without a host sync."""

import pytest
import torch

from fish_core.engine.device import to_device


def test_to_device_on_the_cpu_is_the_tensor_itself():
    host = torch.arange(6).view(2, 3)
    assert to_device(host, torch.device("cpu")) is host


def test_to_device_elsewhere_copies():
    host = torch.arange(6, dtype=torch.float32)
    moved = to_device(host, torch.device("meta"))
    assert moved.device.type == "meta" and moved.shape == host.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_device_on_cuda_copies_asynchronously_from_pinned_memory():
    host = torch.arange(1000, dtype=torch.long)
    moved = to_device(host, torch.device("cuda"))
    assert moved.device.type == "cuda" and torch.equal(moved.cpu(), host)
