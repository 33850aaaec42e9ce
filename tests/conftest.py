"""Shared test fixtures.

Parity tests are data-driven: they read the fixture set named by the environment variable
``SAILFISH_FIXTURES`` (a directory laid out like ``tests/fixtures``: ``tiny-s2/`` + ``golden/``),
falling back to the copy committed in ``tests/fixtures``.
"""

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

TESTS_DIR = Path(__file__).resolve().parent
DEFAULT_FIXTURES = TESTS_DIR / "fixtures"


def fixtures_dir() -> Path:
    root = Path(os.environ.get("SAILFISH_FIXTURES", DEFAULT_FIXTURES)).expanduser().resolve()
    if not (root / "tiny-s2").is_dir() or not (root / "golden").is_dir():
        raise RuntimeError(f"SAILFISH_FIXTURES={root} must contain tiny-s2/ and golden/")
    return root


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return fixtures_dir()


@pytest.fixture(scope="session")
def ckpt_dir(fixtures) -> Path:
    return fixtures / "tiny-s2"


@pytest.fixture(scope="session")
def golden_dir(fixtures) -> Path:
    return fixtures / "golden"


class Golden:
    """Lazy access to golden/*.safetensors and golden/*.json."""

    def __init__(self, root: Path):
        self.root = root
        self._cache = {}

    def tensors(self, name: str) -> dict:
        key = name + ".safetensors"
        if key not in self._cache:
            self._cache[key] = load_file(str(self.root / key))
        return self._cache[key]

    def json(self, name: str):
        key = name + ".json"
        if key not in self._cache:
            self._cache[key] = json.loads((self.root / key).read_text(encoding="utf-8"))
        return self._cache[key]


@pytest.fixture(scope="session")
def golden(golden_dir) -> Golden:
    return Golden(golden_dir)


@pytest.fixture(scope="session")
def tiny_synth(ckpt_dir):
    """The fixture checkpoint as a float32 CPU Synthesizer, shared by the streaming and server
    tests."""
    from fish_core.synth import Synthesizer

    return Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32")


@pytest.fixture(autouse=True)
def _single_thread_determinism():
    # The goldens were recorded with one thread; keep reductions comparable and tests quiet.
    torch.set_num_threads(1)
    yield
