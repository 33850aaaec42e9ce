"""``speech/settings.py`` and the four doors: a bad setting is refused before any model loads,
naming its field (a CLI flag, a node input, an HTTP field, a Python keyword).

Each door is tried against a model folder whose weights cannot be read (a copy of the fixture
checkpoint with its codec's weights overwritten): the same request with good settings fails on the
shard,
so a door that reports the setting has checked it before it touched the model."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from fish_core.params import RequestError
from fish_core.speech.finishing import Finishing
from fish_core.speech.request import Request
from fish_core.speech.settings import KEYWORDS, Settings
from test_cli import run_cli

# (keywords, the field as Python names it) -- one per kind of rule: sampling, seed, speed,
# loudness, a pause tag in the text.
BAD = [({"temperature": 7}, "temperature"), ({"seed": -1}, "seed"), ({"speed": 9}, "speed"),
       ({"loudness": -2}, "loudness"), ({"text": "Hi [pause:soon] there."}, "text")]


@pytest.fixture(scope="module")
def broken(ckpt_dir, tmp_path_factory):
    """A copy of the fixture checkpoint whose weights cannot be read: the codec's file is not
    a checkpoint (the Model Loader node reads the shards' headers when it runs, so they stay;
    the model is made of both and cannot be loaded)."""
    folder = tmp_path_factory.mktemp("broken") / "tiny-s2"
    shutil.copytree(ckpt_dir, folder)
    codec = folder / "codec.pth"
    assert codec.is_file(), "the fixture checkpoint has no codec.pth"
    codec.write_bytes(b"\xff" * 64)
    return folder


# ---------------------------------------------------------------- the object
def test_settings_are_checked_when_made_and_flat_keywords_reach_their_group():
    s = Settings.of(temperature=0.5, speed=1.25, takes=2, seed=4)
    assert (s.sampling.temperature, s.finishing.speed, s.takes, s.seed) == (0.5, 1.25, 2, 4)
    assert Settings.of(s, top_k=5).sampling == Settings.of(temperature=0.5, top_k=5).sampling
    assert Settings.of(s, top_k=5).finishing == s.finishing  # other groups kept
    with pytest.raises(TypeError, match="'temprature'"):
        Settings.of(temprature=0.5)
    with pytest.raises(TypeError, match="'takes'"):
        Settings.of(where="stream", takes=2)
    with pytest.raises(RequestError) as e:
        Settings(takes=99)
    assert e.value.field == "takes"
    # every field of Finishing is a flat keyword: a finishing option is declared once
    assert set(Finishing().keywords()) <= set(KEYWORDS)


def test_a_request_keeps_its_settings_and_its_pauses_parsed_once():
    settings = Settings.of(seed=3, max_bytes=64)
    request = Request.tts("One. [pause:1s] Two.", settings=settings)
    assert request.settings == settings and request.seed == 3
    assert [p.text for p in request.spoken[0].pieces] == ["One.", "Two."]
    picked = Request.tts("Hi.")
    assert picked.settings.seed is not None and picked.seed == picked.settings.seed


@pytest.mark.parametrize("bad, field", BAD)
def test_python_keyword_refused_naming_it(bad, field):
    """Python: the keyword is refused when the request is made, before a model exists."""
    options = dict(bad)
    text = options.pop("text", "Hi.")
    with pytest.raises(RequestError) as e:
        Request.tts(text, **options)
    assert e.value.field == field and field in str(e.value)


# ---------------------------------------------------------------- the CLI
CLI_BAD = [(["--temperature", "7"], "--temperature"), (["--seed", "-1"], "--seed"),
           (["--speed", "9"], "--speed"), (["--loudness", "-2"], "--loudness")]


def test_cli_flags_refused_before_the_model_loads(broken, tmp_path):
    out = tmp_path / "out.wav"
    good = run_cli("say", "Hi.", "--model", broken, "-o", out, "--precision", "fp32")
    assert good.returncode != 0 and "--temperature" not in good.stderr  # the shard's error
    for flags, flag in CLI_BAD:
        proc = run_cli("say", "Hi.", "--model", broken, "-o", out, *flags)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"error: {flag}"), (flags, proc.stderr)
    proc = run_cli("say", "Hi [pause:soon] there.", "--model", broken, "-o", out)
    assert proc.returncode == 2 and "[pause:soon]" in proc.stderr, proc.stderr
    lexicon = tmp_path / "bad.lex"
    lexicon.write_text("no tab here\n", encoding="utf-8")
    proc = run_cli("say", "Hi.", "--model", broken, "-o", out, "--lexicon", lexicon)
    assert proc.returncode == 2 and "--lexicon" in proc.stderr, proc.stderr
    srt = tmp_path / "s.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:01,000\nHi.\n", encoding="utf-8")
    proc = run_cli("srt", srt, "--model", broken, "-o", out, "--top-p", "0")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --top-p"), proc.stderr


# ---------------------------------------------------------------- the nodes
@pytest.fixture(scope="module")
def broken_nodes(broken, tmp_path_factory):
    """The generating nodes and a model handle on ``broken``, not loaded (as after ComfyUI freed
    the memory: the TTS node would load it again)."""
    import comfy_stubs

    base = tmp_path_factory.mktemp("comfy-broken")
    with comfy_stubs.pack_in_comfy(base, "sailfish_broken") as (pack, stubs):
        extension = asyncio.run(pack.comfy_entrypoint())
        v3 = {cls.GET_SCHEMA().node_id: cls for cls in asyncio.run(extension.get_node_list())}
        yield v3, pack.nodes.manager.ModelHandle(str(broken), device="cpu")
        pack.nodes.manager.MANAGER.unload()


def test_node_inputs_refused_before_the_model_loads(broken_nodes):
    from node_env import FAST

    nodes, model = broken_nodes
    run = nodes["SailfishTTS"].execute
    with pytest.raises(Exception) as load:  # good inputs: the model cannot load
        run(model=model, text="Hi.", **FAST)
    assert not hasattr(load.value, "field")  # the codec's error, not a setting's
    for bad, field in BAD:
        inputs = {**FAST, "text": "Hi.", **bad}
        with pytest.raises(ValueError) as e:  # the pack's own RequestError (another package)
            run(model=model, **inputs)
        assert e.value.field == field and field in str(e.value), (bad, e.value)


# ---------------------------------------------------------------- HTTP
def test_http_fields_refused_before_the_model_loads(broken, tmp_path):
    try:  # the HTTP client the openai SDK itself depends on (httpx2 in newer releases)
        import httpx2 as httpx
    except ImportError:
        httpx = pytest.importorskip("httpx")
    from fish_core import Synthesizer
    from fish_core.serve.background import BackgroundServer
    from fish_core.serve.service import Service

    voices = tmp_path / "voices"
    voices.mkdir()
    loads = []

    def load():
        loads.append(1)
        return Synthesizer.from_pretrained(broken, device="cpu", dtype="fp32")

    with pytest.raises(Exception) as failed:  # what loading it would say
        load()
    assert not hasattr(failed.value, "field")
    service = Service.standalone(load, lazy=True, voices=[voices])
    body = {"model": "s2-pro", "input": "Hi.", "max_new_tokens": 4}
    with BackgroundServer(service) as server:
        url = server.url + "/v1/audio/speech"
        for bad, field in BAD:
            wire = {("input" if k == "text" else k): v for k, v in bad.items()}
            answer = httpx.post(url, json={**body, **wire}, timeout=60)
            param = "input" if field == "text" else field
            assert answer.status_code == 400, (bad, answer.text)
            assert answer.json()["error"]["param"] == param, (bad, answer.text)
    service.close()
    assert len(loads) == 1  # only the probe above: no request reached the model
