"""Registration (V3 and V1), schemas, tooltips, locales and help pages of the ComfyUI nodes
(``nodes/__init__.py``, ``nodes/schema.py``), and the install hygiene of requirements.txt."""

from __future__ import annotations

import json
import re

import pytest

import comfy_stubs
from node_env import IDS


# ---------------------------------------------------------------- registration and schemas
def test_v3_registration_exports_only_the_entrypoint(env):
    assert set(env.v3) == IDS
    assert not hasattr(env.pack, "NODE_CLASS_MAPPINGS")  # it would make ComfyUI skip V3
    assert env.pack.WEB_DIRECTORY == "./web"


def test_v1_registration_without_comfy_api(tmp_path):
    with comfy_stubs.pack_in_comfy(tmp_path, "sailfish_v1", v3=False) as (pack, _):
        assert not hasattr(pack, "comfy_entrypoint")
        assert set(pack.NODE_CLASS_MAPPINGS) == IDS
        assert pack.NODE_DISPLAY_NAME_MAPPINGS["SailfishTTS"] == "Sailfish TTS"
        for cls in pack.NODE_CLASS_MAPPINGS.values():
            assert set(cls.INPUT_TYPES()) == {"required", "optional"}
            assert callable(getattr(cls(), cls.FUNCTION))
            assert len(cls.RETURN_TYPES) == len(cls.RETURN_NAMES) == len(cls.OUTPUT_TOOLTIPS)
            assert cls.CATEGORY == "audio/Sailfish TTS" and cls.DESCRIPTION


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
    assert inputs["model"] == ("FISH_S2_MODEL", False) and inputs["voice"] == ("FISH_S2_VOICE",
                                                                               True)
    assert outputs == ["AUDIO", "STRING", "SAILFISH_WORDS"]  # new outputs go last
    assert inputs["takes"] == ("INT", True)
    assert list(inputs)[-2:] == ["words", "check"]  # new inputs go last: words, then check
    assert inputs["words"] == ("COMBO", True) and inputs["check"] == ("BOOLEAN", True)
    inputs, _ = sockets("SailfishVoiceClone")
    assert inputs["reference_audio"] == ("AUDIO", False) and inputs["reference_text"][0] == "STRING"
    inputs, _ = sockets("SailfishMultiSpeaker")
    assert [k for k in inputs if k.startswith("speaker_")] == [f"speaker_{n}" for n in range(1, 5)]
    assert all(inputs[f"speaker_{n}"] == ("FISH_S2_VOICE", True) for n in range(1, 5))
    assert sockets("SailfishMultiSpeaker")[1] == ["AUDIO"] * 5 + ["STRING", "SAILFISH_WORDS"]
    assert sockets("SailfishSubtitles")[1] == ["AUDIO", "STRING", "STRING", "STRING",
                                               "SAILFISH_WORDS"]
    inputs, outputs = sockets("SailfishCaptions")
    assert inputs["words"] == ("SAILFISH_WORDS", False) and outputs == ["STRING"]
    assert sockets("SailfishVoiceEncode")[1] == ["FISH_S2_VOICE"]
    assert sockets("SailfishVoiceLoad")[1] == ["FISH_S2_VOICE"]
    assert env.v3["SailfishVoiceSave"].define_schema().is_output_node
    seed = next(i for i in env.v3["SailfishTTS"].define_schema().inputs if i.id == "seed")
    assert seed.kwargs["control_after_generate"] is True
    temperature = env.v1["SailfishTTS"].INPUT_TYPES()["required"]["temperature"][1]
    assert 0 < temperature["min"] and temperature["max"] < 2


def test_every_setting_widget_ranges_as_its_rule(env):
    """Node bounds come from the rules the request checks (``speech.settings.rules``): a widget
    offers no value its rule refuses, bar a declared "off" (loudness 0), and reaches each
    closed end (an open one within a step)."""
    fish_core = env.pack.fish_core
    rules = {**fish_core.speech.settings.rules(), "pause": fish_core.speech.request.PAUSE}
    checked = set()
    for node in env.pack.nodes.NODES:
        for i in node.inputs:
            if i.id not in rules or not i.widget:
                continue
            rule, off = rules[i.id], (0.0 if i.id == "loudness" else None)
            assert rule.holds(i.min) or i.min == off, (node.id, i.id, i.min)
            assert i.min - i.step - 1e-9 <= rule.low <= i.min or i.min == off, (node.id, i.id)
            # a widget without a max is capped at 2048 by ComfyUI's frontend: every rule has one
            assert rule.high is not None and i.max is not None, (node.id, i.id)
            assert rule.holds(i.max) or i.max == off, (node.id, i.id, i.max)
            assert i.max <= rule.high <= i.max + i.step + 1e-9 or i.max == off, (node.id, i.id)
            assert rule.holds(i.default) or i.default == off, (node.id, i.id)
            checked.add(i.id)
    assert {"seed", "temperature", "top_p", "top_k", "max_new_tokens", "takes", "speed",
            "loudness", "pause"} <= checked


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
                assert ([v["tooltip"] for v in d["inputs"].values()] ==
                        [i.tooltip for i in node.ordered_inputs])
    for node_id in IDS:
        assert (comfy_stubs.ROOT / "web" / "docs" / f"{node_id}.md").is_file()


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
