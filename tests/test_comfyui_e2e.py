"""End to end in a real ComfyUI: start its server with the pack and the tiny checkpoint, run
every example workflow over HTTP, and check Cancel (/interrupt) and Free memory (/free).

Runs only when COMFYUI_DIR points at a ComfyUI checkout. Its Python is COMFYUI_PYTHON, else
$COMFYUI_DIR/venv or .venv, else this interpreter. Everything the server writes (user data,
models, inputs, outputs) goes to a temporary folder; nothing is left in COMFYUI_DIR.

    COMFYUI_DIR=PATH/TO/ComfyUI COMFYUI_PYTHON=PATH/TO/ComfyUI/venv/bin/python \\
        python -m pytest tests/test_comfyui_e2e.py -q
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import comfy_stubs
from conftest import fixtures_dir, read_sizes

COMFYUI_DIR = os.environ.get("COMFYUI_DIR")
pytestmark = pytest.mark.skipif(not COMFYUI_DIR,
                                reason="set COMFYUI_DIR to a ComfyUI checkout to run this test")

IDS = {"SailfishModelLoader", "SailfishTTS", "SailfishVoiceClone", "SailfishMultiSpeaker",
       "SailfishSubtitles", "SailfishVoiceEncode", "SailfishVoiceSave", "SailfishVoiceLoad"}
WIDGETS = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
EXAMPLES = sorted((comfy_stubs.ROOT / "example_workflows").glob("*.json"))
# Examples that name an endpoint the operator configures: each runs in its own test, against a
# stand-in engine configured under that name.
DRAMA_EXAMPLE = (comfy_stubs.ROOT / "example_workflows"
                 / "Sailfish TTS - Drama 3 on a remote engine.json")
LOCAL_EXAMPLES = [p for p in EXAMPLES if p != DRAMA_EXAMPLE]
STARTUP_SECONDS, PROMPT_SECONDS = 300, 300
# Secrets in ComfyUI's environment: none is configured for any endpoint, so none may appear
# in a request, the history or an error.
SECRETS = {name: f"e2e-secret-{name.lower()}-{uuid.uuid4().hex}"
           for name in ("SAILFISH_REMOTE_API_KEY", "HF_TOKEN", "OPENAI_API_KEY")}
LOCAL_ENGINE = ("127.0.0.1", 8080)  # the built-in "local" endpoint: python -m fish_core serve
FRAME, RATE = read_sizes().frame_length, read_sizes().sample_rate  # the fixture codec's
# A second custom node that registers the pack's V1 classes (what ComfyUI without
# comfy_api.latest gets) as "V1<NodeId>", so that both APIs run in the real executor.
V1_PROBE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location(
    "sailfish_v1_check_pack", {root!r} + "/__init__.py", submodule_search_locations=[{root!r}])
pack = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = pack
spec.loader.exec_module(pack)
NODE_CLASS_MAPPINGS = {{"V1" + k: v for k, v in pack.nodes.v1_mappings()[0].items()}}
"""


def comfy_python(comfy_dir: Path) -> str:
    if os.environ.get("COMFYUI_PYTHON"):
        return os.environ["COMFYUI_PYTHON"]
    for venv in ("venv", ".venv"):
        candidate = comfy_dir / venv / "bin" / "python"
        if candidate.is_file():
            return str(candidate)
    return sys.executable


def snapshot(comfy_dir: Path) -> dict:
    """Names in COMFYUI_DIR and its data folders, to prove the test leaves nothing there."""
    folders = [comfy_dir] + [comfy_dir / d for d in ("user", "custom_nodes", "models", "input",
                                                      "output", "temp")]
    return {str(f): sorted(os.listdir(f)) for f in folders if f.is_dir()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_voice_clip(path: Path, seconds: float = 1.5, rate: int = 24000, pitch: float = 180.0):
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * pitch * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    sf.write(str(path), np.stack([wave, 0.8 * wave], axis=1).astype(np.float32), rate)


class Server:
    def __init__(self, root: Path, comfy_dir: Path, extra_args: tuple[str, ...] = ()):
        self.root, self.comfy_dir, self.extra_args = root, comfy_dir, list(extra_args)
        self.base, self.inputs, self.outputs = root / "base", root / "input", root / "output"
        self.voices = self.base / "models" / "fish_speech_voices"
        (self.base / "custom_nodes").mkdir(parents=True)
        (self.base / "custom_nodes" / "sailfish-tts").symlink_to(comfy_stubs.ROOT,
                                                                 target_is_directory=True)
        probe = self.base / "custom_nodes" / "sailfish_v1_check"  # the V1 classes, as V1<id>
        probe.mkdir()
        (probe / "__init__.py").write_text(V1_PROBE.format(root=str(comfy_stubs.ROOT)))
        models = root / "extra_models" / "fish_speech"
        shutil.copytree(fixtures_dir() / "tiny-s2", models / "tiny-s2")
        self.config = root / "extra_model_paths.yaml"
        self.config.write_text(f"sailfish_e2e:\n  base_path: {root / 'extra_models'}\n"
                               "  fish_speech: fish_speech\n")
        self.inputs.mkdir()
        self.outputs.mkdir()
        for name in {"sailfish_reference.wav", *self.example_audio_files()}:
            write_voice_clip(self.inputs / name, pitch=150 + (40 * len(name)) % 120)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "comfyui.log"
        self.proc = None

    @staticmethod
    def example_audio_files() -> set[str]:
        return {n["widgets_values"][0] for p in EXAMPLES for n in json.loads(p.read_text())["nodes"]
                if n["type"] == "LoadAudio"}

    def start(self) -> None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1",
                   OMP_NUM_THREADS="1",  # one thread: steady timings on a shared CPU
                   **SECRETS)
        env.pop("SAILFISH_ENDPOINTS", None)  # no endpoint configured: only the built-in local
        command = [comfy_python(self.comfy_dir), str(self.comfy_dir / "main.py"), "--cpu",
                   "--listen", "127.0.0.1", "--port", str(self.port), "--disable-auto-launch",
                   "--base-directory", str(self.base),
                   "--extra-model-paths-config", str(self.config),
                   "--input-directory", str(self.inputs), "--output-directory", str(self.outputs),
                   *self.extra_args]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(command, cwd=self.root, env=env, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"ComfyUI exited with {self.proc.returncode}:\n"
                            f"{self.log_text()[-4000:]}")
            try:
                self.get("/object_info/SailfishTTS")
                return
            except (urllib.error.URLError, ConnectionError, KeyError):
                time.sleep(1)
        pytest.fail(f"ComfyUI did not answer within {STARTUP_SECONDS} s:\n"
                    f"{self.log_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    # ---------------------------------------------------------------- HTTP
    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def post(self, path: str, body: dict):
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                data = r.read()
        except urllib.error.HTTPError as e:
            pytest.fail(f"POST {path} → {e.code}: {e.read().decode(errors='replace')}")
        return json.loads(data) if data.strip() else {}

    def queue(self, prompt: dict) -> str:
        return self.post("/prompt", {"prompt": prompt, "client_id": str(uuid.uuid4())})["prompt_id"]

    def wait(self, prompt_id: str) -> dict:
        deadline = time.monotonic() + PROMPT_SECONDS
        while time.monotonic() < deadline:
            history = self.get(f"/history/{prompt_id}")
            if prompt_id in history:
                return history[prompt_id]
            if self.proc.poll() is not None:
                pytest.fail(f"ComfyUI died:\n{self.log_text()[-4000:]}")
            time.sleep(0.3)
        pytest.fail(f"prompt {prompt_id} did not finish in {PROMPT_SECONDS} s:\n"
                    f"{self.log_text()[-3000:]}")

    def run(self, prompt: dict) -> dict:
        entry = self.wait(self.queue(prompt))
        assert entry["status"]["status_str"] == "success", (
            json.dumps(entry["status"]["messages"])[-3000:])
        return entry

    def audio(self, entry: dict) -> list[tuple[int, int]]:
        """(sample rate, samples) of every audio file the prompt saved."""
        return [found for files in self.audio_by_node(entry).values() for found in files]

    def audio_by_node(self, entry: dict) -> dict[str, list[tuple[int, int]]]:
        """(sample rate, samples) of the audio files (saved or previewed) of each output node."""
        found = {}
        for node_id, output in entry["outputs"].items():
            for item in output.get("audio", []):
                query = urllib.parse.urlencode({k: item[k] for k in ("filename", "subfolder",
                                                                     "type")})
                with urllib.request.urlopen(f"{self.url}/view?{query}", timeout=30) as r:
                    info = sf.info(io.BytesIO(r.read()))
                found.setdefault(node_id, []).append((info.samplerate, info.frames))
        return found


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    comfy_dir = Path(COMFYUI_DIR).resolve()
    before = snapshot(comfy_dir)
    s = Server(tmp_path_factory.mktemp("comfyui"), comfy_dir)
    try:
        s.start()
        s.object_info = s.get("/object_info")
        yield s
    finally:
        s.stop()
    assert snapshot(comfy_dir) == before, "the test left files in COMFYUI_DIR"


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def engine(server, tiny_synth, voices_dir):
    """A key-less serve of the tiny checkpoint where the ``local`` endpoint expects one
    (127.0.0.1:8080), as a newcomer runs ``python -m fish_core serve``, and the operator's
    endpoints file (in ComfyUI's user directory) enabling ``local`` as docs/security.md says
    (``"local": {}``). When another program holds that port, the serve takes a free one and
    the entry names it."""
    from fish_core.serve.background import BackgroundServer
    from fish_core.serve.service import Service

    host, port = LOCAL_ENGINE
    entry = {}
    if not port_is_free(host, port):
        port = free_port()
        entry = {"urls": f"http://{host}:{port}"}
    config = server.base / "user" / "sailfish" / "endpoints.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"endpoints": {"local": entry}}))
    service = Service.standalone(lambda: tiny_synth, voices=[voices_dir])
    with BackgroundServer(service, host, port) as running:
        yield running
    service.close()


FRONTEND_ONLY = ("Note", "MarkdownNote")  # nodes the frontend keeps out of the API prompt


def to_api(workflow: dict, object_info: dict) -> dict:
    """UI-format workflow → API prompt: widget values are mapped by each node's input order
    from /object_info (a control_after_generate widget stores one extra value)."""
    links = {link[0]: link for link in workflow["links"]}
    prompt = {}
    for node in workflow["nodes"]:
        if node["type"] in FRONTEND_ONLY:
            continue
        info = object_info[node["type"]]
        spec = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
        order = info["input_order"].get("required", []) + info["input_order"].get("optional", [])
        linked = {i["name"]: links[i["link"]] for i in node["inputs"] if i.get("link") is not None}
        values, inputs = list(node["widgets_values"]), {}
        for name in order:
            kind, options = spec[name][0], (spec[name][1] if len(spec[name]) > 1 else {})
            if name in linked:
                inputs[name] = [str(linked[name][1]), linked[name][2]]
            if isinstance(kind, list) or kind in WIDGETS:
                value = values.pop(0)
                inputs.setdefault(name, value)
                if options.get("control_after_generate"):
                    values.pop(0)
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt


def for_the_tiny_model(prompt: dict, frames: int = 16) -> dict:
    for node in prompt.values():
        if node["class_type"] == "SailfishModelLoader":
            node["inputs"]["model"] = "tiny-s2"
        if "max_new_tokens" in node["inputs"]:
            node["inputs"]["max_new_tokens"] = frames
    return prompt


def tag_silence(text: str) -> int:
    """Samples of silence the ``[pause:…]`` tags of ``text`` write (each exact)."""
    from fish_core.text.pauses import split_pauses  # here: browser_playback_check imports us

    spoken = split_pauses(text)
    return sum(round(s * RATE) for s in [spoken.lead, *(p.after for p in spoken.pieces)] if s)


def srt_end(srt: str) -> float:
    h, m, s, ms = map(int, re.findall(r"--> *(\d+):(\d+):(\d+)[,.](\d+)", srt)[-1])
    return h * 3600 + m * 60 + s + ms / 1000


def tts_prompt(text: str, seed: int, frames: int, voice_file: str | None = None) -> dict:
    prompt = {
        "1": {"class_type": "SailfishModelLoader", "inputs": {
            "model": "tiny-s2", "precision": "auto", "quantization": "none", "device": "auto",
            "compile": False, "context_length": 0, "unload_after_minutes": 0}},
        "2": {"class_type": "SailfishTTS", "inputs": {
            "model": ["1", 0], "text": text, "seed": seed, "temperature": 0.8, "top_p": 0.8,
            "top_k": 30, "max_new_tokens": frames}},
        "3": {"class_type": "SaveAudio", "inputs": {"audio": ["2", 0],
                                                    "filename_prefix": "e2e/tts"}},
    }
    if voice_file:
        prompt["4"] = {"class_type": "SailfishVoiceLoad", "inputs": {"voice": voice_file}}
        prompt["2"]["inputs"]["voice"] = ["4", 0]
    return prompt


# ---------------------------------------------------------------- tests
def test_pack_loads_with_all_nodes(server):
    log = server.log_text()
    assert "IMPORT FAILED" not in log and "Traceback" not in log, log[-3000:]
    assert IDS <= set(server.object_info)
    loader = server.object_info["SailfishModelLoader"]
    models = loader["input"]["required"]["model"][1]["options"]  # a V3 combo
    assert models[0] == "tiny-s2" and "s2-pro (download)" in models  # extra_model_paths.yaml


def test_schemas_match_the_node_descriptions(server):
    pack = comfy_stubs.load_pack("sailfish_e2e")
    try:
        for node in pack.nodes.NODES:
            info = server.object_info[node.id]
            order = info["input_order"]
            assert (order.get("required", []) + order.get("optional", []) ==
                    [i.id for i in node.ordered_inputs])
            assert info["output"] == [o.type for o in node.outputs]
            assert info["category"] == "audio/Sailfish TTS"
    finally:
        comfy_stubs.unload_pack("sailfish_e2e")


def test_v1_classes_run_in_comfyui(server):
    def inputs(info):
        return info["input_order"].get("required", []) + info["input_order"].get("optional", [])

    for node_id in IDS:
        v1, v3 = server.object_info["V1" + node_id], server.object_info[node_id]
        assert inputs(v1) == inputs(v3) and v1["output"] == v3["output"]
    prompt = tts_prompt("Through the classic API.", 17, 16)
    for node in prompt.values():
        if node["class_type"].startswith("Sailfish"):
            node["class_type"] = "V1" + node["class_type"]
    (rate, samples), = server.audio(server.run(prompt))
    assert rate == RATE and samples % FRAME == 0


def test_example_workflows_are_served(server):
    templates = server.get("/workflow_templates")["sailfish-tts"]
    assert {p.stem for p in EXAMPLES} <= set(templates)


def sources(prompt: dict, node_type: str) -> dict[str, int]:
    """The output nodes of ``prompt`` fed by a ``node_type`` node: node id → output slot."""
    return {node_id: node["inputs"]["audio"][1] for node_id, node in prompt.items()
            if isinstance(node["inputs"].get("audio"), list)
            and prompt[node["inputs"]["audio"][0]]["class_type"] == node_type}


@pytest.mark.parametrize("path", LOCAL_EXAMPLES, ids=lambda p: p.stem)
def test_example_workflow_runs(server, engine, path):
    workflow = json.loads(path.read_text())
    prompt = for_the_tiny_model(to_api(workflow, server.object_info))
    entry = server.run(prompt)
    by_node = server.audio_by_node(entry)
    files = [found for node_files in by_node.values() for found in node_files]
    assert files and {rate for rate, _ in files} == {RATE}
    by_source: dict[str, list] = {}  # the node that made the audio → its outputs' files
    for node_id, node_files in by_node.items():
        source = prompt[node_id]["inputs"]["audio"][0]
        takes = int(prompt[source]["inputs"].get("takes", 1))
        assert len(node_files) == takes, node_id  # one file per take
        by_source.setdefault(source, []).extend(node_files)
    for source, source_files in by_source.items():
        kind, inputs = prompt[source]["class_type"], prompt[source]["inputs"]
        lengths = {samples for _, samples in source_files}
        assert len(lengths) == 1  # takes padded to the longest; speaker tracks as long as the mix
        (samples,) = lengths
        if kind == "SailfishSubtitles":  # 16 frames (0.74 s) fit every cue: the SRT's length
            assert samples == round(srt_end(inputs["srt"]) * RATE)
        elif kind == "SailfishMultiSpeaker":  # frames + a pause between turns
            gap = round(inputs["pause"] * RATE)
            assert any((samples - k * gap) % FRAME == 0 for k in range(0, 10))
        else:  # frames + the exact silences of the text's [pause:…] tags
            assert (samples - tag_silence(inputs["text"])) % FRAME == 0, (source, samples)
    if "speaker tracks" in path.stem:  # the mix, speaker_1 and speaker_2 saved, same length
        assert {0, 1, 2} <= set(sources(prompt, "SailfishMultiSpeaker").values())
    kinds = {n["class_type"] for n in prompt.values()}
    if "SailfishVoiceSave" in kinds:
        assert list(server.voices.rglob("*.safetensors"))


def test_remote_mode_runs_and_no_secret_leaks(server, engine, tiny_synth):
    """The remote-mode example against a key-less serve started here, with no environment
    set up: audio as the local model makes it, and no secret of ComfyUI's environment is in
    the workflow, the prompt or the history."""
    path = comfy_stubs.ROOT / "example_workflows" / "Sailfish TTS - remote engine.json"
    prompt = for_the_tiny_model(to_api(json.loads(path.read_text()), server.object_info))
    (loader,) = [n for n in prompt.values() if n["class_type"] == "SailfishModelLoader"]
    assert loader["inputs"]["remote"] == "local"  # a name: all a workflow stores
    entry = server.run(prompt)
    (rate, samples), = server.audio(entry)
    tts = next(n["inputs"] for n in prompt.values() if n["class_type"] == "SailfishTTS")
    local = tiny_synth.tts(tts["text"], seed=tts["seed"], temperature=tts["temperature"],
                           top_p=tts["top_p"], top_k=tts["top_k"],
                           max_new_tokens=tts["max_new_tokens"])
    assert rate == RATE and samples == local.waveform.shape[0]
    seen = json.dumps(server.get("/history")) + path.read_text() + json.dumps(prompt)
    assert not [name for name, secret in SECRETS.items() if secret in seen]


def test_old_remote_workflows_get_a_clear_message(server):
    """A workflow saved before endpoints holds a URL where ``remote`` is now: ComfyUI refuses
    the prompt with our message (nothing is reached); one with an empty URL runs locally."""
    prompt = tts_prompt("An old workflow.", 3, 8)
    prompt["1"]["inputs"].update(remote="http://127.0.0.1:9/", remote_url="http://127.0.0.1:9/",
                                 api_key_env="HF_TOKEN")
    request = urllib.request.Request(server.url + "/prompt", data=json.dumps(
        {"prompt": prompt, "client_id": str(uuid.uuid4())}).encode(),
        headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    body = refused.value.read().decode()
    assert refused.value.code == 400 and "by URL" in body and "configured: local" in body
    assert not [name for name, secret in SECRETS.items() if secret in body]
    prompt["1"]["inputs"] = {k: v for k, v in prompt["1"]["inputs"].items()
                             if k not in ("remote_url", "api_key_env")}
    prompt["1"]["inputs"]["remote"] = ""  # an old local-mode workflow's empty remote_url
    (rate, samples), = server.audio(server.run(prompt))
    assert rate == RATE and samples % FRAME == 0


def test_saved_voice_loads_and_speaks(server):
    encode = for_the_tiny_model(to_api(json.loads(
        (comfy_stubs.ROOT / "example_workflows" / "Sailfish TTS - voice library.json")
        .read_text()),
        server.object_info))
    encode = {k: v for k, v in encode.items()
              if v["class_type"] in ("SailfishModelLoader", "LoadAudio", "SailfishVoiceEncode",
                                     "SailfishVoiceSave")}
    for node in encode.values():
        if node["class_type"] == "SailfishVoiceSave":
            node["inputs"]["filename_prefix"] = "e2e/reused"
    server.run(encode)
    saved = sorted(server.voices.glob("e2e/reused_*.safetensors"))
    assert saved
    name = saved[-1].relative_to(server.voices).as_posix()
    assert name in server.get("/object_info/SailfishVoiceLoad")["SailfishVoiceLoad"]["input"][
        "required"]["voice"][1]["options"]
    (rate, samples), = server.audio(server.run(tts_prompt("In a saved voice.", 21, 16, name)))
    assert rate == RATE and samples % FRAME == 0


def test_interrupt_mid_generation_keeps_the_server_and_model(server):
    loads = server.log_text().count("Sailfish: loading")
    text = " ".join(f"This is sentence number {i}, spoken slowly." for i in range(600))
    prompt_id = server.queue(tts_prompt(text, 1234, 64))
    deadline = time.monotonic() + 60
    while not server.get("/queue")["queue_running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)  # well inside a generation that takes far longer
    server.post("/interrupt", {})
    entry = server.wait(prompt_id)
    events = [name for name, _ in entry["status"]["messages"]]
    assert "execution_interrupted" in events, events
    interrupted = dict(entry["status"]["messages"])["execution_interrupted"]
    assert interrupted["node_type"] == "SailfishTTS"
    (rate, samples), = server.audio(server.run(tts_prompt("Still working.", 99, 16)))
    assert rate == RATE and samples % FRAME == 0
    assert server.log_text().count("Sailfish: loading") == loads  # the model stayed loaded


def test_free_memory_unloads_the_model(server):
    server.run(tts_prompt("Load the model.", 5, 8))
    freed = server.log_text().count("Sailfish: unloaded tiny-s2 (freed by ComfyUI)")
    server.post("/free", {"unload_models": True, "free_memory": True})
    deadline = time.monotonic() + 60
    while server.log_text().count("Sailfish: unloaded tiny-s2 (freed by ComfyUI)") == freed:
        assert time.monotonic() < deadline, server.log_text()[-3000:]
        time.sleep(0.3)
    loads = server.log_text().count("Sailfish: loading")
    (rate, samples), = server.audio(server.run(tts_prompt("Loaded again.", 6, 8)))
    assert rate == RATE and samples % FRAME == 0
    assert server.log_text().count("Sailfish: loading") == loads + 1
    assert "Exception in thread" not in server.log_text()  # ComfyUI's worker still alive


def test_takes_save_one_file_per_take(server):
    """What core Save Audio (0.3.64) does with an AUDIO batch: one file per item, numbered on
    from the counter; every file has the batch's (padded) length."""
    prompt = tts_prompt("Three takes through Save Audio.", 7, 12)
    prompt["2"]["inputs"]["takes"] = 3
    prompt["3"]["inputs"]["filename_prefix"] = "e2e/takes"
    entry = server.run(prompt)
    files = entry["outputs"]["3"]["audio"]
    assert len(files) == 3 and len({f["filename"] for f in files}) == 3
    assert all(f["filename"].startswith("takes_") for f in files)
    lengths = {samples for _, samples in server.audio(entry)}
    assert len(lengths) == 1 and lengths.pop() % FRAME == 0


def test_http_api_on_comfyui_port(server):
    """The pack's HTTP API answers on ComfyUI's own port under /sailfish, loads the model through
    the shared manager on first use, and ComfyUI's Free memory frees it."""
    assert server.get("/sailfish/v1/health")["status"] == "ok"
    body = {"text": "Over HTTP.", "seed": 1, "max_new_tokens": 8, "format": "wav"}
    request = urllib.request.Request(server.url + "/sailfish/v1/tts",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=PROMPT_SECONDS) as r:
        info = sf.info(io.BytesIO(r.read()))
    assert info.samplerate == RATE and info.frames % FRAME == 0 and info.frames > 0
    assert server.get("/sailfish/v1/health")["model_loaded"] is True
    server.post("/free", {"unload_models": True, "free_memory": True})
    deadline = time.monotonic() + 60
    while server.get("/sailfish/v1/health")["model_loaded"]:
        assert time.monotonic() < deadline, server.log_text()[-3000:]
        time.sleep(0.3)


def test_speech_stream_on_comfyui_port(server):
    """WS /sailfish/v1/audio/speech/stream in ComfyUI: a key offered as a subprotocol without
    sailfish.speech.v1 is refused before the upgrade and appears in no log line; SGLang-Omni's
    session.config (split_granularity, stream_audio, voice "default") is spoken."""
    import aiohttp

    token = "base64url.bearer." + base64.urlsafe_b64encode(b"e2e-key-0028").decode().rstrip("=")
    url = server.url.replace("http://", "ws://") + "/sailfish/v1/audio/speech/stream"

    async def session():
        async with aiohttp.ClientSession() as client:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(url, protocols=(token,))
            async with client.ws_connect(url, protocols=("sailfish.speech.v1",)) as ws:
                await ws.send_json({"type": "session.config", "voice": "default", "seed": 4,
                                    "max_new_tokens": 8, "split_granularity": "clause",
                                    "stream_audio": False, "response_format": "pcm"})
                await ws.send_json({"type": "input.text", "text": "One, two."})
                await ws.send_json({"type": "input.done"})
                events, frames = [], []
                while not events or events[-1]["type"] not in ("session.done", "error"):
                    msg = await ws.receive(timeout=PROMPT_SECONDS)
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        frames.append(msg.data)
                    else:
                        events.append(json.loads(msg.data))
            return refused.value.status, events, frames

    status, events, frames = asyncio.run(session())
    assert status == 400
    assert events[0]["type"] == "session.configured" and events[0]["split_granularity"] == "clause"
    assert [e["sentence_text"] for e in events if e["type"] == "audio.start"] == ["One,", "two."]
    assert events[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    assert len(frames) == 2 and all(frames)
    assert token not in server.log_text() and "e2e-key-0028" not in server.log_text()


def test_errors_reach_the_user(server):
    entry = server.wait(server.queue(tts_prompt("   ", 1, 8)))
    assert entry["status"]["status_str"] == "error"
    error = dict(entry["status"]["messages"])["execution_error"]
    assert error["node_type"] == "SailfishTTS" and "text is empty" in error["exception_message"]


# ---------------------------------------------------------------- live playback (nodes/playback.py)
LIVE_SRT = ("1\n00:00:00,400 --> 00:00:00,900\nFirst cue.\n\n"
            "2\n00:00:01,600 --> 00:00:02,400\nSecond cue.\n")


def live_prompt() -> dict:
    """TTS with two takes, a multi-speaker script with pauses and subtitles with gaps, each
    saved by Save Audio (nodes 2/3, 4/5, 6/7)."""
    prompt = tts_prompt("Heard while it is made. Two takes.", 31, 16)
    prompt["2"]["inputs"]["takes"] = 2
    sampling = {k: prompt["2"]["inputs"][k] for k in ("seed", "temperature", "top_p", "top_k",
                                                      "max_new_tokens")}
    prompt["4"] = {"class_type": "SailfishMultiSpeaker", "inputs": {
        "model": ["1", 0], "script": "[speaker_1]: One turn.\n[speaker_2]: Another turn.",
        "pause": 0.3, **sampling}}
    prompt["6"] = {"class_type": "SailfishSubtitles", "inputs": {
        "model": ["1", 0], "srt": LIVE_SRT, **sampling}}
    for saver, source in (("5", "4"), ("7", "6")):
        prompt[saver] = {"class_type": "SaveAudio", "inputs": {
            "audio": [source, 0], "filename_prefix": f"e2e/live_{source}"}}
    return prompt


async def live_session(server, listen: bool, prompt: dict) -> tuple[list, list, str]:
    """Two websocket clients; the first queues ``prompt`` (both ask for live playback when
    ``listen``). Returns each client's JSON messages until the prompt ended, and its id."""
    import aiohttp

    ids = [f"e2e-live-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    async with aiohttp.ClientSession() as session:
        sockets = [await session.ws_connect(f"{server.url}/ws?clientId={i}",
                                            max_msg_size=16 << 20) for i in ids]
        for client in ids:
            async with session.post(f"{server.url}/sailfish/live",
                                    json={"client_id": client, "listen": listen}) as r:
                assert r.status == 200 and (await r.json()) == {"listen": listen}
        async with session.post(f"{server.url}/prompt",
                                json={"prompt": prompt, "client_id": ids[0]}) as r:
            assert r.status == 200, await r.text()
            prompt_id = (await r.json())["prompt_id"]

        async def read(ws, until_end: bool) -> list:
            seen = []
            while True:
                try:
                    msg = await ws.receive(timeout=PROMPT_SECONDS if until_end else 3)
                except asyncio.TimeoutError:
                    assert not until_end, "no end of the prompt on the websocket"
                    return seen
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                seen.append(json.loads(msg.data))
                if (until_end and seen[-1]["type"] in ("execution_success", "execution_error",
                                                       "execution_interrupted")
                        and seen[-1]["data"].get("prompt_id") == prompt_id):
                    return seen

        mine = await read(sockets[0], True)
        other = await read(sockets[1], False)  # a few more seconds for stray events
        for ws in sockets:
            await ws.close()
    return mine, other, prompt_id


def live_events(messages: list, node: str) -> list[dict]:
    return [m["data"] for m in messages if m["type"] == "sailfish.live"
            and m["data"]["node"] == node]


def saved_audio(server, entry: dict, node: str) -> np.ndarray:
    """Take 1 as Save Audio wrote it (the batch's first file), float in [-1, 1)."""
    item = entry["outputs"][node]["audio"][0]
    query = urllib.parse.urlencode({k: item[k] for k in ("filename", "subfolder", "type")})
    with urllib.request.urlopen(f"{server.url}/view?{query}", timeout=30) as r:
        wave, rate = sf.read(io.BytesIO(r.read()), dtype="float32")
    assert rate == RATE
    return wave


def live_pcm(events: list[dict]) -> np.ndarray:
    pieces = []
    for e in events:
        if e["state"] == "chunk":
            pieces.append(np.zeros(e["samples"], np.float32) if e.get("silence") else
                          np.frombuffer(base64.b64decode(e["pcm"]), "<i2") / 32767)
    return np.concatenate(pieces)


def test_playback_chunks_reach_only_the_queuing_client_before_the_node_ends(server):
    mine, other, prompt_id = asyncio.run(live_session(server, True, live_prompt()))
    assert mine[-1]["type"] == "execution_success", mine[-1]
    assert not [m for m in other if m["type"] == "sailfish.live"]  # the other tab: nothing
    entry = server.wait(prompt_id)
    order = [(m["type"], m["data"].get("node")) for m in mine]
    for node, saver in (("2", "3"), ("4", "5"), ("6", "7")):
        events = live_events(mine, node)
        assert [e["seq"] for e in events] == list(range(len(events)))
        assert events[0]["state"] == "start" and events[-1]["state"] == "done"
        assert all(e["prompt_id"] == prompt_id for e in events)
        # every event between "executing node" and the next executing message
        where = [i for i, m in enumerate(mine) if m["type"] == "sailfish.live"
                 and m["data"]["node"] == node]
        started = order.index(("executing", node))
        after = next(i for i in range(started + 1, len(order)) if order[i][0] == "executing")
        assert started < where[0] and where[-1] < after < len(order) - 1
        heard, saved = live_pcm(events), saved_audio(server, entry, saver)
        assert events[-1]["samples"] == heard.shape[0] <= saved.shape[0]
        assert not saved[heard.shape[0]:].any()  # take 1's padding to the longest take
        assert np.abs(heard - saved[:heard.shape[0]]).max() <= 3 / 32767  # 16-bit rounding
    assert any(e.get("silence") for e in live_events(mine, "4"))  # the pauses
    assert live_events(mine, "6")[1].get("silence")  # the gap before the first cue
    # Not listening (the setting off): nothing is sent, the prompt runs as before.
    mine, other, _ = asyncio.run(live_session(server, False, tts_prompt("Quiet.", 3, 8)))
    assert mine[-1]["type"] == "execution_success"
    assert not [m for m in mine + other if m["type"] == "sailfish.live"]


def test_playback_registrations_need_an_open_socket(server):
    """A peer without a ComfyUI websocket of that id cannot register it (so it cannot fill the
    set and push a tab's registration out)."""
    request = urllib.request.Request(server.url + "/sailfish/live",
                                     data=json.dumps({"client_id": "no-such-socket",
                                                      "listen": True}).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=30)
    assert e.value.code == 409 and b"websocket" in e.value.read()


def test_playback_route_rejects_bad_requests(server):
    for body in ({"client_id": "a b", "listen": True}, {"client_id": "ok", "listen": 1}, [1]):
        request = urllib.request.Request(server.url + "/sailfish/live",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=30)
        assert e.value.code == 400 and b"client_id" in e.value.read()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_installing_requirements_changes_no_installed_package():
    """`pip install -r requirements.txt` in ComfyUI's environment, as a dry run: whatever it
    would install must be new (our own dependencies), never an upgrade, downgrade or reinstall
    of a package already there, torch above all."""
    python = comfy_python(Path(COMFYUI_DIR))
    listed = subprocess.run([python, "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, timeout=120, check=True)
    installed = {canonical(p["name"]): p["version"] for p in json.loads(listed.stdout)}
    run = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
                          "-r", str(comfy_stubs.ROOT / "requirements.txt")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    would = {canonical(item["metadata"]["name"]): item["metadata"]["version"]
             for item in json.loads(run.stdout)["install"]}
    changed = {name: f"{installed[name]} -> {version}" for name, version in would.items()
               if name in installed}
    assert not changed, f"installing requirements.txt would change installed packages: {changed}"
    assert "torch" in installed and "torch" not in would


# ---------------------------------------------------------------- Drama 3 on an operator's endpoint
DRAMA_FRAMES = 5  # what the stand-in engine answers per request, in codec frames


@pytest.fixture(scope="module")
def drama_engine(server):
    """A stand-in SGLang-Omni serving s2-pro and drama-3, configured in ComfyUI's user
    directory under the name the Drama 3 example uses, as the README's entry (key-less here:
    ComfyUI's environment was fixed at start). Whatever the file held before comes back."""
    from engine_standins import StandIn, readme_endpoint, sglang_app, tone

    config = server.base / "user" / "sailfish" / "endpoints.json"
    before = config.read_text() if config.is_file() else None
    app = sglang_app(RATE, [tone(RATE, DRAMA_FRAMES * FRAME)], model_ids=("s2-pro", "drama-3"))
    with StandIn(app) as engine:
        entries = json.loads(before)["endpoints"] if before else {}
        entry = {k: v for k, v in readme_endpoint("drama").items()
                 if k not in ("api_key_env", "api_key_file")}
        entries["drama"] = {**entry, "urls": [engine.url]}
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({"endpoints": entries}))
        try:
            yield engine
        finally:
            if before is None:
                config.unlink()
            else:
                config.write_text(before)


def test_drama3_example_runs_on_the_operators_endpoint(server, drama_engine):
    """The Drama 3 example, unchanged but for the tiny frame count: the loader names the
    operator's endpoint and drama-3, the six-speaker script goes in one request with the two
    connected voices as speakers 0 and 1 and its directions untouched, the audio comes back,
    and no secret of ComfyUI's environment is sent or kept."""
    workflow = DRAMA_EXAMPLE.read_text()
    prompt = for_the_tiny_model(to_api(json.loads(workflow), server.object_info))
    (loader,) = [n for n in prompt.values() if n["class_type"] == "SailfishModelLoader"]
    assert (loader["inputs"]["remote"], loader["inputs"]["remote_model"]) == ("drama", "drama-3")
    entry = server.run(prompt)
    (rate, samples), = server.audio(entry)
    assert rate == RATE and samples == DRAMA_FRAMES * FRAME
    (body,) = drama_engine.requests
    assert body["model"] == "drama-3"
    assert len(set(re.findall(r"<\|speaker:(\d+)\|>", body["input"]))) == 6
    assert "<|speaker:2|>[shouting over the storm] All hands on deck" in body["input"]
    assert [r["text"][:14] for r in body["references"]] == ["<|speaker:0|>E", "<|speaker:1|>E"]
    sent = json.dumps(drama_engine.requests) + json.dumps(drama_engine.app["headers"])
    seen = sent + json.dumps(server.get("/history")) + workflow + json.dumps(prompt)
    assert not [name for name, secret in SECRETS.items() if secret in seen]
    assert not any("authorization" in {k.lower() for k in h} for h in drama_engine.app["headers"])
