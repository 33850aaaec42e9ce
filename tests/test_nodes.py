"""The ComfyUI nodes with stand-ins for ComfyUI (tests/comfy_stubs.py) and the tiny checkpoint:
registration (V3 and V1), schemas, every node's execute, the model manager, progress, Cancel,
and the install hygiene of requirements.txt."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import math
import re
import threading
import time
import types
import weakref

import pytest
import torch

import comfy_stubs
from conftest import fixtures_dir, read_sizes
from fish_core.engine.config import ModelConfig

IDS = {"SailfishModelLoader", "SailfishTTS", "SailfishVoiceClone", "SailfishMultiSpeaker",
       "SailfishSubtitles", "SailfishVoiceEncode", "SailfishVoiceSave", "SailfishVoiceLoad"}
FAST = dict(seed=3, temperature=0.8, top_p=0.8, top_k=30, max_new_tokens=12)
LOADER = dict(model="tiny-s2", precision="auto", quantization="none", device="auto",
              compile=False, context_length=0, unload_after_minutes=0)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy")
    stubs = comfy_stubs.install(base)
    # As extra_model_paths.yaml would: a fish_speech folder configured before the pack loads.
    models = base / "extra" / "fish_speech"
    models.mkdir(parents=True)
    (models / "tiny-s2").symlink_to(fixtures_dir() / "tiny-s2", target_is_directory=True)
    stubs.folder_paths.add_model_folder_path("fish_speech", str(models))
    pack = comfy_stubs.load_pack("sailfish_v3")
    extension = asyncio.run(pack.comfy_entrypoint())
    v3 = {cls.GET_SCHEMA().node_id: cls for cls in asyncio.run(extension.get_node_list())}
    v1 = pack.nodes.v1_mappings()[0]
    yield types.SimpleNamespace(pack=pack, stubs=stubs, base=base, models=models, v3=v3, v1=v1,
                                manager=pack.nodes.manager.MANAGER)
    pack.nodes.manager.MANAGER.unload()
    comfy_stubs.unload_pack("sailfish_v3")
    comfy_stubs.uninstall()


@pytest.fixture(autouse=True)
def _clean_progress(env):
    env.stubs.utils.PROGRESS_BAR_HOOK = None
    env.stubs.mm.interrupt_current_processing(False)
    yield
    env.stubs.utils.PROGRESS_BAR_HOOK = None


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


# ---------------------------------------------------------------- registration and schemas
def test_v3_registration_exports_only_the_entrypoint(env):
    assert set(env.v3) == IDS
    assert not hasattr(env.pack, "NODE_CLASS_MAPPINGS")  # it would make ComfyUI skip V3
    assert env.pack.WEB_DIRECTORY == "./web"


def test_v1_registration_without_comfy_api(tmp_path):
    with comfy_stubs.swapped(tmp_path, v3=False):
        pack = comfy_stubs.load_pack("sailfish_v1")
        try:
            assert not hasattr(pack, "comfy_entrypoint")
            assert set(pack.NODE_CLASS_MAPPINGS) == IDS
            assert pack.NODE_DISPLAY_NAME_MAPPINGS["SailfishTTS"] == "Sailfish TTS"
            for cls in pack.NODE_CLASS_MAPPINGS.values():
                assert set(cls.INPUT_TYPES()) == {"required", "optional"}
                assert callable(getattr(cls(), cls.FUNCTION))
                assert len(cls.RETURN_TYPES) == len(cls.RETURN_NAMES) == len(cls.OUTPUT_TOOLTIPS)
                assert cls.CATEGORY == "audio/Sailfish TTS" and cls.DESCRIPTION
        finally:
            comfy_stubs.unload_pack("sailfish_v1")


def test_every_input_has_a_tooltip_in_both_apis(env):
    for node_id in IDS:
        schema = env.v3[node_id].define_schema()
        assert schema.category == "audio/Sailfish TTS" and schema.description
        for i in schema.inputs:
            assert i.kwargs.get("tooltip"), (node_id, i.id)
        for o in schema.outputs:
            assert o.tooltip and o.display_name, node_id
        v1 = env.v1[node_id].INPUT_TYPES()
        for group in v1.values():
            for name, (_, options) in group.items():
                assert options.get("tooltip"), (node_id, name)
        # Same inputs, same order (= the widget order workflows store) in both APIs.
        assert [i.id for i in schema.inputs] == [*v1["required"], *v1["optional"]]


def test_types_and_sockets(env):
    def sockets(node_id):
        schema = env.v3[node_id].define_schema()
        return ({i.id: (i.io_type, i.kwargs.get("optional", False)) for i in schema.inputs},
                [o.io_type for o in schema.outputs])

    assert sockets("SailfishModelLoader")[1] == ["FISH_S2_MODEL"]
    inputs, outputs = sockets("SailfishTTS")
    assert inputs["model"] == ("FISH_S2_MODEL", False) and inputs["voice"] == ("FISH_S2_VOICE", True)
    assert outputs == ["AUDIO", "STRING"]
    assert inputs["takes"] == ("INT", True)
    inputs, _ = sockets("SailfishVoiceClone")
    assert inputs["reference_audio"] == ("AUDIO", False) and inputs["reference_text"][0] == "STRING"
    inputs, _ = sockets("SailfishMultiSpeaker")
    assert [k for k in inputs if k.startswith("speaker_")] == [f"speaker_{n}" for n in range(1, 5)]
    assert all(inputs[f"speaker_{n}"] == ("FISH_S2_VOICE", True) for n in range(1, 5))
    assert sockets("SailfishMultiSpeaker")[1] == ["AUDIO"] * 5 + ["STRING"]
    assert sockets("SailfishSubtitles")[1] == ["AUDIO", "STRING", "STRING", "STRING"]
    assert sockets("SailfishVoiceEncode")[1] == ["FISH_S2_VOICE"]
    assert sockets("SailfishVoiceLoad")[1] == ["FISH_S2_VOICE"]
    assert env.v3["SailfishVoiceSave"].define_schema().is_output_node
    seed = next(i for i in env.v3["SailfishTTS"].define_schema().inputs if i.id == "seed")
    assert seed.kwargs["control_after_generate"] is True
    temperature = env.v1["SailfishTTS"].INPUT_TYPES()["required"]["temperature"][1]
    assert 0 < temperature["min"] and temperature["max"] < 2


def test_advanced_flag_only_where_comfyui_has_it(env):
    nodes = env.pack.nodes
    plain = comfy_stubs.comfy_api_module(advanced=False).io
    newer = comfy_stubs.comfy_api_module(advanced=True).io
    top_p = next(i for i in nodes.TTS.inputs if i.id == "top_p")
    assert "advanced" not in nodes.schema.v3_input(plain, top_p).kwargs  # 0.3.64 would raise
    assert nodes.schema.v3_input(newer, top_p).kwargs["advanced"] is True
    text = next(i for i in nodes.TTS.inputs if i.id == "text")
    assert "advanced" not in nodes.schema.v3_input(newer, text).kwargs


def test_locales_and_help_pages_cover_every_node(env):
    for lang in ("en", "zh"):
        defs = json.loads((comfy_stubs.ROOT / "locales" / lang / "nodeDefs.json").read_text())
        assert set(defs) == IDS, lang
        for node in env.pack.nodes.NODES:
            d = defs[node.id]
            assert d["display_name"] and d["description"]
            assert list(d["inputs"]) == [i.id for i in node.ordered_inputs], (lang, node.id)
            assert all(v["name"] and v["tooltip"] for v in d["inputs"].values())
            assert list(d["outputs"]) == [str(k) for k in range(len(node.outputs))]
            if lang == "en":  # English is the schema's own text
                assert (d["display_name"], d["description"]) == (node.display_name,
                                                                 node.description)
                assert [v["tooltip"] for v in d["inputs"].values()] == \
                    [i.tooltip for i in node.ordered_inputs]
    for node_id in IDS:
        assert (comfy_stubs.ROOT / "web" / "docs" / f"{node_id}.md").is_file()


def test_model_combo_lists_local_folders_then_downloads(env):
    options = env.v1["SailfishModelLoader"].INPUT_TYPES()["required"]["model"][0]
    assert options == ["tiny-s2", "s2-pro (download)", "s2-pro-fp8 (download)"]
    shared = env.base / "models" / "tts" / "fishaudio"  # another pack's tts folder
    shared.mkdir(parents=True)
    (shared / "s2").symlink_to(fixtures_dir() / "tiny-s2", target_is_directory=True)
    try:
        assert env.pack.nodes.paths.model_choices()[:2] == ["tiny-s2", "fishaudio/s2"]
    finally:
        (shared / "s2").unlink()


def test_download_entry_is_offline_safe_and_targets_our_folder(env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE") as e:
        run_v1(env, "SailfishModelLoader", **{**LOADER, "model": "s2-pro (download)"})
    assert str(env.models) in str(e.value)  # the first fish_speech folder


def test_quantization_choices_are_what_quant_offers(env):
    quantization = env.v1["SailfishModelLoader"].INPUT_TYPES()["required"]["quantization"]
    assert quantization[0] == list(env.pack.quant.MODES) and quantization[1]["default"] == "none"


def test_loader_errors_name_the_field(env):
    with pytest.raises(FileNotFoundError, match="model: 'nope'"):
        run_v1(env, "SailfishModelLoader", **{**LOADER, "model": "nope"})


# ---------------------------------------------------------------- the nodes
def test_loader_returns_a_small_handle(env, model):
    assert isinstance(model, env.pack.nodes.manager.ModelHandle)
    assert model.folder.endswith("tiny-s2") and model.device == "auto"
    assert len(loaded(env.manager)) == 1


def test_tts_v3_and_v1_agree(env, model):
    a = run_v3(env, "SailfishTTS", model=model, text="Hello there. How are you?", **FAST)[0]
    b = run_v1(env, "SailfishTTS", model=model, text="Hello there. How are you?", **FAST)[0]
    check_audio(a)
    assert torch.equal(a["waveform"], b["waveform"])  # same seed, same audio


def test_tts_with_voice(env, model, voice):
    assert voice.name == "Alice" and voice.frames > 0
    check_audio(run_v1(env, "SailfishTTS", model=model, text="Speak as Alice.", voice=voice,
                       **FAST)[0])


def test_voice_clone(env, model, reference):
    audio, _ = run_v3(env, "SailfishVoiceClone", model=model, reference_audio=reference,
                      reference_text="A short test sentence.", text="Now in that voice.",
                      **FAST)
    check_audio(audio)


def test_multi_speaker_maps_names_to_voices(env, model, voice, reference):
    bob = run_v1(env, "SailfishVoiceEncode", model=model, audio=reference,
                 transcript="Another sentence.", name="Bob")[0]
    script = "Alice: Hi Bob!\nBob: Hello Alice.\nAlice: Bye."
    audio, *tracks, timeline = run_v3(env, "SailfishMultiSpeaker", model=model, script=script,
                                      pause=0.0, speaker_1=voice, speaker_2=bob, **FAST)
    check_audio(audio)
    assert len(tracks) == 4 and all(t["waveform"].shape == audio["waveform"].shape for t in tracks)
    assert torch.equal(sum(t["waveform"] for t in tracks), audio["waveform"])
    assert tracks[0]["waveform"].abs().max() > 0 and tracks[1]["waveform"].abs().max() > 0
    assert [s["speaker"] for s in json.loads(timeline)["takes"][0]["segments"]] == [0, 1, 0]
    paused, *_ = run_v1(env, "SailfishMultiSpeaker", model=model, script=script, pause=0.25,
                       speaker_1=voice, speaker_2=bob, **FAST)
    length = check_audio(paused, frames=False)
    gap = round(0.25 * read_sizes().sample_rate)
    assert any((length - k * gap) % read_sizes().frame_length == 0
               for k in range(1, 4))  # 3 turns: 2 pauses


def test_multi_speaker_errors_name_the_field(env, model, voice):
    with pytest.raises(ValueError, match="script: .*Carol"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="Alice: Hi.\nCarol: Hey.",
               pause=0.0, speaker_1=voice, **FAST)
    with pytest.raises(ValueError, match="speaker_1 is not connected"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="Alice: Hi.", pause=0.0,
               speaker_2=voice, **FAST)
    with pytest.raises(ValueError, match="speaker_1 and speaker_2 are both named 'alice'"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="Alice: Hi.\nAlice: Again.",
               pause=0.0, speaker_1=voice, speaker_2=voice, **FAST)
    with pytest.raises(ValueError, match="script is empty"):
        run_v1(env, "SailfishMultiSpeaker", model=model, script="  ", pause=0.0, **FAST)


def test_multi_speaker_script_error_comes_before_the_model_loads(env, manager, voice,
                                                                 monkeypatch):
    stand_in = manager(memory=None)  # loading it would evict nothing, but it counts loads
    monkeypatch.setattr(env.pack.nodes.runtime, "MANAGER", stand_in)
    with pytest.raises(ValueError, match=r"script: speaker\(s\) Carol have no reference voice; "
                       r"voices given: Alice \(connected: speaker_1 = Alice\)"):
        run_v1(env, "SailfishMultiSpeaker", model=manager.handle,
               script="Alice: Hi.\nCarol: Hey.", pause=0.0, speaker_1=voice, **FAST)
    assert manager.loader.loads == [] and loaded(stand_in) == []
    with pytest.raises(AttributeError, match="dialogue"):  # a good script does reach it
        run_v1(env, "SailfishMultiSpeaker", model=manager.handle, script="Alice: Hi.",
               pause=0.0, speaker_1=voice, **FAST)
    assert len(manager.loader.loads) == 1


def test_subtitles_follow_the_timeline(env, model, voice):
    srt = ("1\n00:00:00,500 --> 00:00:02,000\nFirst line.\n\n"
           "2\n00:00:02,500 --> 00:00:04,000\nSecond line.\n")
    audio, generated, report, timeline = run_v3(env, "SailfishSubtitles", model=model, srt=srt,
                                      voice=voice, **{**FAST, "max_new_tokens": 8})
    # 8 frames (0.37 s) always fit their slot, so the audio ends where the last cue ends.
    assert check_audio(audio, frames=False) == round(4.0 * read_sizes().sample_rate)
    assert "00:00:00,500 -->" in generated and "Second line." in generated
    assert report == "Every cue fits its slot."
    (take,) = json.loads(timeline)["takes"]
    assert take["samples"] == round(4.0 * read_sizes().sample_rate) and len(take["segments"]) == 2
    with pytest.raises(ValueError, match="srt: "):
        run_v1(env, "SailfishSubtitles", model=model, srt="not subtitles", **FAST)


def test_takes_are_a_padded_batch_with_exact_lengths(env, model, voice):
    audio, timeline = run_v3(env, "SailfishTTS", model=model, text="Three takes, please.",
                             voice=voice, takes=3, **FAST)
    wave = audio["waveform"]
    assert wave.shape[:2] == (3, 1) and wave.dtype == torch.float32
    takes = json.loads(timeline)["takes"]
    assert [t["seed"] for t in takes] == [FAST["seed"] + k for k in range(3)]
    assert wave.shape[2] == max(t["samples"] for t in takes)
    for k, take in enumerate(takes):
        assert not wave[k, 0, take["samples"]:].any()  # the padding is silence
        single, _ = run_v1(env, "SailfishTTS", model=model, text="Three takes, please.",
                           voice=voice, **{**FAST, "seed": FAST["seed"] + k})
        assert torch.equal(wave[k, :, :take["samples"]], single["waveform"][0])
    with pytest.raises(ValueError, match="takes must be"):
        run_v1(env, "SailfishTTS", model=model, text="Hi.", takes=9, **FAST)


def test_voice_save_and_load_round_trip(env, voice):
    (first,) = run_v1(env, "SailfishVoiceSave", voice=voice, filename_prefix="people/alice")
    (second,) = run_v3(env, "SailfishVoiceSave", voice=voice, filename_prefix="people/alice")
    assert (first, second) == ("people/alice_00001.safetensors", "people/alice_00002.safetensors")
    voices_dir = env.base / "models" / "fish_speech_voices"
    assert (voices_dir / first).is_file()
    options = env.v1["SailfishVoiceLoad"].INPUT_TYPES()["required"]["voice"][0]
    assert options == [first, second]
    (loaded,) = run_v3(env, "SailfishVoiceLoad", voice=first)
    assert loaded.name == "Alice" and torch.equal(loaded.clips[0].codes, voice.clips[0].codes)
    fingerprint = env.v1["SailfishVoiceLoad"].IS_CHANGED(voice=first)
    assert fingerprint and fingerprint == env.v3["SailfishVoiceLoad"].fingerprint_inputs(voice=first)
    with pytest.raises(ValueError, match="filename_prefix"):
        run_v1(env, "SailfishVoiceSave", voice=voice, filename_prefix="../outside")
    with pytest.raises(FileNotFoundError, match="voice: '../x.safetensors'"):
        run_v1(env, "SailfishVoiceLoad", voice="../x.safetensors")


def test_bad_inputs_name_the_field(env, model, reference):
    with pytest.raises(ValueError, match="text is empty"):
        run_v1(env, "SailfishTTS", model=model, text=" \n", **FAST)
    with pytest.raises(ValueError, match="reference_text is empty"):
        run_v1(env, "SailfishVoiceClone", model=model, reference_audio=reference,
               reference_text="", text="Hi.", **FAST)
    silent = {"waveform": torch.zeros(1, 1, 44100), "sample_rate": 44100}
    with pytest.raises(ValueError, match="reference audio: audio is silent"):
        run_v1(env, "SailfishVoiceClone", model=model, reference_audio=silent,
               reference_text="Words.", text="Hi.", **FAST)
    with pytest.raises(ValueError, match="transcript is empty"):
        run_v1(env, "SailfishVoiceEncode", model=model, audio=reference, transcript="",
               name="x")


# ---------------------------------------------------------------- progress and Cancel
def test_progress_bar_moves_per_frame(env, model):
    updates = []
    env.stubs.utils.PROGRESS_BAR_HOOK = lambda value, total, preview, node_id=None: \
        updates.append((value, total))
    run_v1(env, "SailfishTTS", model=model, text="Count my frames.", **FAST)
    values = [v for v, _ in updates]
    assert values == sorted(values) and updates[-1] == (FAST["max_new_tokens"],) * 2
    assert values[:3] == [1, 2, 3]  # one update per generated frame


@pytest.mark.parametrize("via", ["progress hook", "cancel callback"])
def test_cancel_stops_within_a_frame_and_the_model_stays(env, model, via):
    mm = env.stubs.mm
    seen = []

    def hook(value, total, preview, node_id=None):
        seen.append(value)
        if value == 3:
            mm.interrupt_current_processing(True)  # the user presses Cancel
            if via == "progress hook":
                mm.throw_exception_if_processing_interrupted()  # what ComfyUI's hook does

    env.stubs.utils.PROGRESS_BAR_HOOK = hook
    before = env.manager.get(model)
    long_text = " ".join(f"Sentence number {i} goes here." for i in range(40))
    with pytest.raises(mm.InterruptProcessingException):
        run_v1(env, "SailfishTTS", model=model, text=long_text,
               **{**FAST, "max_new_tokens": 64})
    assert seen[-1] == 3 and not mm.processing_interrupted()  # stopped at once, flag reset
    env.stubs.utils.PROGRESS_BAR_HOOK = None
    check_audio(run_v1(env, "SailfishTTS", model=model, text="Still here.", **FAST)[0])
    assert env.manager.get(model) is before  # not reloaded


# ---------------------------------------------------------------- the model manager
class FakeSynth:
    def __init__(self):
        self.model, self.codec = torch.nn.Linear(4, 4), torch.nn.Linear(2, 2)
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


def test_manager_loads_each_configuration_once(manager):
    m, handle = manager(), manager.handle
    assert m.get(handle) is m.get(handle)
    assert len(manager.loader.loads) == 1
    m.get(dataclasses.replace(handle, precision="fp32"))
    assert len(manager.loader.loads) == 2 and len(loaded(m)) == 2


def test_manager_concurrent_requests_load_once(manager):
    m = manager()
    manager.loader.delay = 0.2
    got = []
    threads = [threading.Thread(target=lambda: got.append(m.get(manager.handle)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(manager.loader.loads) == 1 and len(got) == 6 and len({id(s) for s in got}) == 1


def test_manager_registers_with_comfyui_and_reloading_keeps_the_model(env, manager):
    m = manager()
    with m.use(manager.handle) as synth:
        pass
    with m.use(manager.handle) as again:
        pass
    assert again is synth and len(manager.loader.loads) == 1
    (loaded,) = [lm for lm in env.stubs.mm.current_loaded_models
                 if lm.model.model.model is synth.model]  # our modules, in a ModelPatcher
    assert loaded.model.detached == [False]  # ComfyUI's re-load detach is not an unload
    m.unload()
    assert loaded not in env.stubs.mm.current_loaded_models and synth.released == 1


def test_comfyui_unload_frees_the_model(env, manager):
    m = manager()
    with m.use(manager.handle) as synth:
        pass
    gone = weakref.ref(synth)
    del synth
    env.stubs.mm.unload_all_models()  # "Unload models" / "Free memory" / low VRAM
    assert loaded(m) == [] and env.stubs.mm.current_loaded_models == []
    assert loaded(env.manager) == []  # the real model went too
    gc.collect()
    assert gone() is None
    with m.use(manager.handle):
        pass
    assert len(manager.loader.loads) == 2  # the next run loads it again


def test_idle_unload_frees_the_model(env, manager):
    m = manager()
    handle = dataclasses.replace(manager.handle, unload_after_minutes=0.3 / 60)
    with m.use(handle) as synth:
        time.sleep(0.5)  # in use: never unloaded
        assert loaded(m)
    gone = weakref.ref(synth)
    del synth
    assert wait_until(lambda: not loaded(m))
    assert all(lm.model is not None and lm.model.model.model is not None
               for lm in env.stubs.mm.current_loaded_models)
    assert wait_until(lambda: gc.collect() is not None and gone() is None)


def test_plain_cache_without_comfyui(manager):
    m = manager(memory=None)
    with m.use(manager.handle) as synth:
        assert synth is m.get(manager.handle)
    m.unload(manager.handle)
    assert loaded(m) == [] and synth.released == 1


def test_real_model_is_freed_when_comfyui_unloads_it(env, model):
    run_v1(env, "SailfishTTS", model=model, text="Load me.", **FAST)
    gone = weakref.ref(env.manager.get(model).model)
    env.stubs.mm.unload_all_models()
    gc.collect()
    assert loaded(env.manager) == [] and gone() is None
    check_audio(run_v1(env, "SailfishTTS", model=model, text="Back again.", **FAST)[0])


# ---------------------------------------------------------------- install hygiene
def requirement_problems(lines):
    problems = []
    for line in lines:
        name = re.split(r"[\s<>=!~;\[]", line, maxsplit=1)[0].lower()
        if name in ("torch", "torchaudio", "torchvision"):
            problems.append(f"{line}: ComfyUI owns torch")
        if "==" in line or "===" in line:
            problems.append(f"{line}: exact pin")
        if "<" in line or "~=" in line:
            problems.append(f"{line}: upper bound")
    return problems


def test_requirements_change_nothing_in_a_comfyui_environment():
    root = comfy_stubs.ROOT
    lines = [ln.split("#")[0].strip() for ln in
             (root / "requirements.txt").read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    assert lines and requirement_problems(lines) == []
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert requirement_problems(project["project"]["dependencies"]) == []
    assert requirement_problems(["torch>=2", "numpy==1.26", "x<2", "y~=1.0"]) != []


def test_make_room_counts_the_kv_cache_and_the_graph_pool(env, manager, ckpt_dir):
    """Before a load ComfyUI is asked for the weights plus the slow AR's KV cache at the
    handle's context (in its precision) plus the CUDA graph pool, not the weights alone."""
    mod = env.pack.nodes.manager
    text = ModelConfig.from_file(ckpt_dir).text
    context = text.max_seq_len // 2
    asked = []

    class Memory:
        def make_room(self, nbytes, device):
            asked.append(nbytes)

        def register(self, synth, device, on_detach):
            return None

        def empty_cache(self):
            pass

    m = manager(memory=Memory())
    for precision, itemsize in (("bf16", 2), ("fp32", 4)):
        handle = mod.ModelHandle(str(ckpt_dir), precision=precision, context_length=context,
                                 device="cpu")
        m.get(handle)
        kv = text.n_layer * 2 * text.n_local_heads * text.head_dim * context * itemsize
        assert mod.kv_cache_size(handle) == kv
        assert asked[-1] == mod.weights_size(str(ckpt_dir)) + kv + mod.GRAPH_POOL_BYTES
    full = mod.ModelHandle(str(ckpt_dir), precision="bf16")  # 0: the model's own context
    assert mod.kv_cache_size(full) == 2 * mod.kv_cache_size(
        mod.ModelHandle(str(ckpt_dir), precision="bf16", context_length=context))
