"""Shared test fixtures.

Tests are data-driven: they read the fixture set named by the environment variable
``SAILFISH_FIXTURES`` (a directory laid out like ``tests/fixtures``: ``tiny-s2/`` and, optionally,
``golden/``), falling back to the copy committed in ``tests/fixtures``. Sizes (codebooks, layers,
sample rate …) come from that set's ``config.json`` and ``codec_config.json`` through ``sizes()``;
parity tests skip on a set without goldens (``tests/make_fixture.py`` writes such a set).
"""

import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

TESTS_DIR = Path(__file__).resolve().parent
DEFAULT_FIXTURES = TESTS_DIR / "fixtures"


def fixtures_dir() -> Path:
    root = Path(os.environ.get("SAILFISH_FIXTURES", DEFAULT_FIXTURES)).expanduser().resolve()
    if not (root / "tiny-s2").is_dir():
        raise RuntimeError(f"SAILFISH_FIXTURES={root} must contain tiny-s2/ "
                           "(and optionally golden/)")
    return root


def link_checkpoint(folder: Path, name: str = "tiny-s2") -> Path:
    """``folder`` (made if missing) holding the fixture checkpoint as ``name``, linked, as a
    models folder ComfyUI is configured with would; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to(fixtures_dir() / "tiny-s2", target_is_directory=True)
    return folder


@dataclass(frozen=True)
class Sizes:
    """The fixture checkpoint's sizes, read from its JSON files (not from fish_core)."""

    num_codebooks: int  # rows of a code tensor (1 semantic + residual)
    codebook_size: int  # LLM codebook size (= semantic codebook size of the codec)
    residual_codebook_size: int  # codec codebook size of rows 1..
    dim: int
    vocab_size: int
    n_layer: int
    fast_n_layer: int
    sample_rate: int
    frame_length: int  # samples per code frame

    @property
    def prompt_rows(self) -> int:  # a prompt is [1 + num_codebooks, T]
        return 1 + self.num_codebooks


@lru_cache(maxsize=None)
def read_sizes() -> Sizes:
    ckpt = fixtures_dir() / "tiny-s2"
    config = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    codec = json.loads((ckpt / "codec_config.json").read_text(encoding="utf-8"))
    text, fast = config["text_config"], config["audio_decoder_config"]
    quantizer = codec["quantizer"]
    return Sizes(
        num_codebooks=fast["num_codebooks"],
        codebook_size=fast["vocab_size"],
        residual_codebook_size=quantizer["codebook_size"],
        dim=text["dim"],
        vocab_size=text["vocab_size"],
        n_layer=text["n_layer"],
        fast_n_layer=fast["n_layer"],
        sample_rate=codec["sample_rate"],
        frame_length=math.prod(codec["encoder_rates"]) * math.prod(quantizer["downsample_factor"]),
    )


@pytest.fixture(scope="session")
def sizes() -> Sizes:
    return read_sizes()


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return fixtures_dir()


@pytest.fixture(scope="session")
def ckpt_dir(fixtures) -> Path:
    return fixtures / "tiny-s2"


@pytest.fixture(scope="session")
def golden_dir(fixtures) -> Path:
    if not (fixtures / "golden").is_dir():
        pytest.skip("fixture set without goldens")
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
def aligner_fixtures(fixtures) -> Path:
    """``<fixtures>/aligner``: the Qwen3-ForcedAligner / ASR checkpoints (``tiny-aligner/``,
    ``tiny-asr/``) and, in the shipped set, their inputs and goldens."""
    root = fixtures / "aligner"
    if not (root / "tiny-aligner").is_dir():
        raise RuntimeError(f"{fixtures} lacks aligner/tiny-aligner (tests/make_fixture.py "
                           "writes one)")
    return root


@pytest.fixture(scope="session")
def aligner_golden(aligner_fixtures) -> Golden:
    """The reference's outputs on the aligner fixtures (skips on a set without them)."""
    if not (aligner_fixtures / "golden").is_dir():
        pytest.skip("fixture set without aligner goldens")
    return Golden(aligner_fixtures / "golden")


@pytest.fixture(scope="session")
def tiny_synth(ckpt_dir):
    """The fixture checkpoint as a float32 CPU Synthesizer, shared by the streaming and server
    tests."""
    from fish_core.local.synthesizer import Synthesizer

    return Synthesizer.from_pretrained(ckpt_dir, device="cpu", dtype="fp32")


def tone(sr: int, seconds: float = 0.5, hz: float = 220.0) -> torch.Tensor:
    """A sine "voice" clip, float32 ``[sr * seconds]``."""
    t = torch.arange(int(sr * seconds)) / sr
    return 0.3 * torch.sin(2 * math.pi * hz * t)


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory, tiny_synth) -> Path:
    """A voice library folder (one per test module) holding one voice, ``alice`` (a tone)."""
    root = tmp_path_factory.mktemp("voices")
    alice = tiny_synth.encode_voice(tone(tiny_synth.sample_rate), "A short reference.",
                                    name="alice", sample_rate=tiny_synth.sample_rate)
    alice.save(root / "alice.safetensors")
    return root


@contextmanager
def served(synth, voices: Path, **options):
    """Our HTTP server on ``synth`` over loopback (``options``: the Service's, e.g. api_key,
    limits), closed at the end."""
    from fish_core.serve.background import BackgroundServer
    from fish_core.serve.service import Service

    service = Service.standalone(lambda: synth, voices=[voices], **options)
    with BackgroundServer(service) as running:
        yield running
    service.close()


@pytest.fixture
def without_torchao(monkeypatch):
    """``importlib.import_module`` as if torchao were not installed."""
    import importlib

    real = importlib.import_module

    def no_torchao(name, *args):
        if name == "torchao" or name.startswith("torchao."):
            raise ImportError("no torchao")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_torchao)


# The thread policy (Synthesizer.from_pretrained, the CLI, the nodes) follows this too; a test of
# the policy itself removes it.
os.environ.setdefault("SAILFISH_THREADS", "1")


@pytest.fixture(autouse=True)
def _single_thread_determinism():
    # The goldens were recorded with one thread; keep reductions comparable and tests quiet.
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def clone_prompt(fixtures, ckpt_dir) -> torch.Tensor:
    """A voice-cloning prompt ``[1 + num_codebooks, T]`` for tests that need one but compare with
    no golden: the recorded ``b_clone`` prompt when the set has goldens, else one encoded the
    same way from the set's tokenizer with seeded reference codes."""
    if (fixtures / "golden").is_dir():
        return Golden(fixtures / "golden").tensors("prompts")["b_clone.batch0.prompt"]
    from fish_core.text.prompt import PromptEncoder, Reference, conversation
    from fish_core.text.tokenizer import FishTokenizer

    size = read_sizes()
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(0, size.residual_codebook_size, (size.num_codebooks, 12),
                          generator=generator)  # [K, 12]
    clip = Reference("Welcome to the voice cloning demo.", codes)
    messages = conversation("The quick brown fox jumps over the lazy dog.", [clip])
    encoder = PromptEncoder(FishTokenizer.from_dir(ckpt_dir), size.num_codebooks,
                            size.codebook_size)
    return encoder.encode(messages)  # [1 + K, T]


def measure_peak_growth(fn) -> int:
    """Bytes ``fn()`` grows this process at its peak: the larger of the resident set's
    high-water mark in one call (reset first with Linux's clear_refs; torch's allocations count
    here) and Python's allocations in a second (tracemalloc: a buffer counts in full even
    before it is touched). ``fn`` must be callable twice."""
    import re
    import tracemalloc

    def status(field: str) -> int:
        with open("/proc/self/status") as f:
            return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1)) << 10

    resident = 0
    if os.path.exists("/proc/self/clear_refs"):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status("VmRSS")
        fn()
        resident = status("VmHWM") - before
    tracemalloc.start()
    try:
        fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return max(peak, resident)


@pytest.fixture(autouse=True)
def _compiles_only_when_marked_slow(request):
    """A test that runs torch.compile (minutes on a CPU) is marked ``slow`` (pyproject.toml), so
    the README's quick subset (``-m "not slow"``) holds none; this catches one that is not."""
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    yield
    if counters["stats"]["unique_graphs"] > before and not request.node.get_closest_marker("slow"):
        pytest.fail("this test compiled a graph with torch.compile: mark it @pytest.mark.slow")


# The node tests' fixtures (tests/node_env.py), for every test module that names them. Imported
# last: node_env imports helpers from this module.
from node_env import _clean_progress, comfy, env, manager, model, reference, voice  # noqa: E402,F401
