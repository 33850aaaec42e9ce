"""What the node test files share: the pack loaded under ComfyUI stand-ins with the tiny
checkpoint configured (``env``), running a node through V3 or V1, the loaded model, a reference
clip and a voice, the model manager stand-in, the pack under a stand-in of ComfyUI's server
(``comfy``), and the AUDIO checks. ``tests/conftest.py`` exposes the fixtures to every test
module; a test module imports only the helpers it uses."""

from __future__ import annotations

import asyncio
import math
import sys
import time
import types

import pytest
import torch

import comfy_stubs
from conftest import link_checkpoint, read_sizes

IDS = {"SailfishModelLoader", "SailfishTTS", "SailfishVoiceClone", "SailfishMultiSpeaker",
       "SailfishSubtitles", "SailfishVoiceEncode", "SailfishVoiceSave", "SailfishVoiceLoad",
       "SailfishVoiceFromTake", "SailfishEngineVoice", "SailfishCaptions",
       "SailfishTranscribe"}
FAST = dict(seed=3, temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=12)
LOADER = dict(model="tiny-s2", precision="auto", quantization="none", device="auto",
              compile=False, context_length=0, unload_after_minutes=0)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy")
    # As extra_model_paths.yaml would: a fish_speech folder configured before the pack loads.
    models = link_checkpoint(base / "extra" / "fish_speech")
    with (comfy_stubs.pack_in_comfy(base, "sailfish_v3", lambda stubs: stubs.folder_paths
                                    .add_model_folder_path("fish_speech", str(models)))
            as (pack, stubs)):
        extension = asyncio.run(pack.comfy_entrypoint())
        v3 = {cls.GET_SCHEMA().node_id: cls for cls in asyncio.run(extension.get_node_list())}
        v1 = pack.nodes.v1_mappings()[0]
        yield types.SimpleNamespace(pack=pack, stubs=stubs, base=base, models=models, v3=v3,
                                    v1=v1, manager=pack.nodes.manager.MANAGER)
        pack.nodes.manager.MANAGER.unload()


@pytest.fixture(autouse=True)
def _clean_progress(request):
    """Around every test that uses ``env``: no progress hook, no interrupt pending."""
    if "env" not in request.fixturenames:
        yield
        return
    env = request.getfixturevalue("env")
    env.stubs.utils.PROGRESS_BAR_HOOK = None
    env.stubs.mm.interrupt_current_processing(False)
    yield
    env.stubs.utils.PROGRESS_BAR_HOOK = None


@pytest.fixture(scope="module")
def comfy(tmp_path_factory):
    """The pack as ComfyUI loads it, its HTTP routes on a stand-in of ComfyUI's server."""
    from aiohttp import web

    base = tmp_path_factory.mktemp("comfy")
    link_checkpoint(base / "models" / "fish_speech")
    server = sys.modules["server"] = comfy_stubs.server_module(web.RouteTableDef())
    try:
        with comfy_stubs.pack_in_comfy(base, "sailfish_routes") as (pack, stubs):
            yield types.SimpleNamespace(pack=pack, stubs=stubs,
                                        routes=server.PromptServer.instance.routes,
                                        manager=pack.nodes.manager.MANAGER)
            pack.nodes.manager.MANAGER.unload()
    finally:
        sys.modules.pop("server", None)


def run_v3(env, node_id, **inputs):
    return env.v3[node_id].execute(**inputs).args


def run_v1(env, node_id, **inputs):
    cls = env.v1[node_id]
    return getattr(cls(), cls.FUNCTION)(**inputs)


@pytest.fixture(scope="module")
def model(env):
    return run_v3(env, "SailfishModelLoader", **LOADER)[0]


@pytest.fixture(scope="module")
def reference():
    """1.5 s of stereo 24 kHz "speech", batch of 2 (item 0 is used)."""
    t = torch.arange(36000) / 24000
    wave = 0.3 * torch.sin(2 * math.pi * 220 * t) * torch.sin(2 * math.pi * 3 * t)
    return {"waveform": torch.stack([wave, 0.5 * wave]).expand(2, 2, -1).clone(),
            "sample_rate": 24000}


@pytest.fixture(scope="module")
def voice(env, model, reference):
    return run_v1(env, "SailfishVoiceEncode", model=model, audio=reference,
                  transcript="A short test sentence.", name="Alice")[0]


def loaded(manager) -> list:
    """The configurations ``manager`` holds loaded."""
    return manager.loaded()


def check_audio(audio, frames=True):
    assert set(audio) == {"waveform", "sample_rate"}
    wave = audio["waveform"]
    assert isinstance(wave, torch.Tensor) and wave.dtype == torch.float32
    assert wave.device.type == "cpu" and wave.is_contiguous()
    assert wave.dim() == 3 and wave.shape[:2] == (1, 1) and wave.shape[2] > 0
    assert audio["sample_rate"] == read_sizes().sample_rate and type(audio["sample_rate"]) is int
    if frames:
        assert wave.shape[2] % read_sizes().frame_length == 0
    return wave.shape[2]


class FakeRuntime:
    def __init__(self):
        self.model, self.codec = torch.nn.Linear(4, 4), torch.nn.Linear(2, 2)


class FakeSynth:
    def __init__(self):
        self.runtime = FakeRuntime()  # a Synthesizer's parts are its runtime's
        self.released = 0

    def release_caches(self):
        self.released += 1


class Loader:
    """Counts loads; each load takes ``delay`` seconds."""

    def __init__(self):
        self.loads, self.delay = [], 0.0

    def __call__(self, handle, device):
        self.loads.append(handle)
        time.sleep(self.delay)
        return FakeSynth()


@pytest.fixture
def manager(env, tmp_path):
    made = []

    def make(memory="auto"):
        made.append(env.pack.nodes.manager.ModelManager(load=make.loader, memory=memory))
        return made[-1]

    make.loader = Loader()
    make.handle = env.pack.nodes.manager.ModelHandle(str(tmp_path), precision="bf16")
    yield make
    for m in made:
        m.unload()


def wait_until(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()
