"""The example workflows (UI format, as users load them) use only our nodes and a few core
audio nodes, wire matching types, and hold widget values our schemas accept."""

from __future__ import annotations

import json

import pytest

import comfy_stubs

FOLDER = comfy_stubs.ROOT / "example_workflows"
WORKFLOWS = sorted(FOLDER.glob("*.json"))
# Core nodes the examples may use: socket inputs, output types, widget values (LoadAudio's
# upload button and audio player also store a value each).
CORE = {
    "LoadAudio": ({}, ["AUDIO"], ["audio", "upload", "audioUI"]),
    "SaveAudio": ({"audio": "AUDIO"}, [], ["filename_prefix"]),
    "PreviewAudio": ({"audio": "AUDIO"}, [], []),
    "Note": ({}, [], ["text"]),  # the frontend's own text node: never sent to the server
}
CONTROL = {"fixed", "increment", "decrement", "randomize"}


# Endpoints an example names, configured as the README tells the operator to.
OPERATOR_ENDPOINTS = ("drama", "local")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    from engine_standins import readme_endpoint

    config = tmp_path_factory.mktemp("operator") / "endpoints.json"
    config.write_text(json.dumps({"endpoints": {name: readme_endpoint(name)
                                                for name in OPERATOR_ENDPOINTS}}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SAILFISH_ENDPOINTS", str(config))
        pack = comfy_stubs.load_pack("sailfish_workflows")
        yield ({n.id: n for n in pack.nodes.NODES}, pack.nodes.paths.DOWNLOAD,
               pack.fish_core.loading.hub)
        comfy_stubs.unload_pack("sailfish_workflows")


def test_every_feature_has_an_example_with_a_readable_name():
    """ComfyUI 0.3.64 lists every .json of the folder as a template titled by its file name:
    no index.json (it showed as a broken template named "index"), and names read as titles."""
    names = {p.stem for p in WORKFLOWS}
    assert not (FOLDER / "index.json").exists()
    for feature in ("text to speech", "voice clone", "multi-speaker dialogue", "subtitles",
                    "voice library", "takes", "speaker tracks", "remote engine",
                    "Drama 3", "loudness-normalised dialogue", "casting"):
        assert any(feature in name for name in names), feature
    assert all(name.startswith("Sailfish TTS - ") and "_" not in name for name in names)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.stem)
def test_workflow_is_valid(path, nodes):
    ours, download, hub = nodes
    workflow = json.loads(path.read_text())
    by_id = {n["id"]: n for n in workflow["nodes"]}
    assert workflow["last_node_id"] == max(by_id)
    assert workflow["last_link_id"] == len(workflow["links"])
    for node in workflow["nodes"]:
        kind = node["type"]
        assert kind in ours or kind in CORE, f"{path.name}: unknown node type {kind}"
        if kind in ours:
            check_our_node(ours[kind], node, download, hub)
        else:
            sockets, outputs, widgets = CORE[kind]
            assert {i["name"]: i["type"] for i in node["inputs"]} == sockets
            assert [o["type"] for o in node["outputs"]] == outputs
            assert len(node["widgets_values"]) == len(widgets), kind
            if kind == "LoadAudio":
                assert node["widgets_values"][0].endswith((".wav", ".flac", ".mp3"))
            if kind == "SaveAudio":
                assert isinstance(node["widgets_values"][0], str)
        for i in node["inputs"]:
            required = kind in CORE or not next(x for x in ours[kind].inputs
                                                if x.id == i["name"]).optional
            assert i["link"] is not None or not required, f"{kind}.{i['name']} is not connected"
    for link_id, src, src_slot, dst, dst_slot, kind in workflow["links"]:
        out, inp = by_id[src]["outputs"][src_slot], by_id[dst]["inputs"][dst_slot]
        assert out["type"] == inp["type"] == kind, (link_id, out, inp)
        assert link_id in out["links"] and inp["link"] == link_id


def check_our_node(desc, node, download, hub):
    sockets = [i for i in desc.ordered_inputs if not i.widget]
    assert [(i["name"], i["type"]) for i in node["inputs"]] == [(s.id, s.type) for s in sockets]
    assert [o["type"] for o in node["outputs"]] == [o.type for o in desc.outputs]
    values = list(node["widgets_values"])
    expected = len(desc.widgets) + sum(w.seed for w in desc.widgets)
    assert len(values) == expected, f"{desc.id}: {len(values)} widget values, expected {expected}"
    for widget in desc.widgets:
        value = values.pop(0)
        where = f"{desc.id}.{widget.id} = {value!r}"
        if widget.type == "COMBO":
            if widget.id == "model" and desc.id == "SailfishModelLoader":
                # Examples must run anywhere: a variant that downloads on first run.
                assert value.endswith(download) and value[: -len(download)] in hub.VARIANTS, where
            else:
                assert value in widget.choices(), where
        elif widget.type in ("INT", "FLOAT"):
            assert isinstance(value, (int, float)) and not isinstance(value, bool), where
            assert widget.type == "FLOAT" or isinstance(value, int), where
            assert widget.min <= value <= widget.max, where
        elif widget.type == "BOOLEAN":
            assert isinstance(value, bool), where
        else:
            assert isinstance(value, str), where
        if widget.seed:
            assert values.pop(0) in CONTROL, where


def test_takes_and_tracks_examples_use_the_new_outputs(nodes):
    ours = nodes[0]

    def load(feature):
        (path,) = [p for p in WORKFLOWS if feature in p.stem]
        workflow = json.loads(path.read_text())
        return {n["id"]: n for n in workflow["nodes"]}, workflow["links"]

    by_id, links = load("takes")
    (tts,) = [n for n in by_id.values() if n["type"] == "SailfishTTS"]
    takes = [w.id for w in ours["SailfishTTS"].widgets].index("takes") + 1  # + seed control
    assert tts["widgets_values"][takes] > 1
    assert ({by_id[dst]["type"] for _, src, _, dst, _, _ in links if src == tts["id"]} ==
            {"SaveAudio", "PreviewAudio"})
    by_id, links = load("speaker tracks")
    (multi,) = [n for n in by_id.values() if n["type"] == "SailfishMultiSpeaker"]
    names = [o.name for o in ours["SailfishMultiSpeaker"].outputs]
    saved = {names[slot] for _, src, slot, dst, _, _ in links
             if src == multi["id"] and by_id[dst]["type"] == "SaveAudio"}
    assert {"audio", "speaker_1", "speaker_2"} <= saved


def test_drama3_example_names_an_operator_endpoint_and_more_than_four_speakers(nodes):
    from fish_core.text.script import parse_script

    ours = nodes[0]
    (path,) = [p for p in WORKFLOWS if "Drama 3" in p.stem]
    workflow = {n["type"]: n for n in json.loads(path.read_text())["nodes"]}

    def value(kind, widget):
        names = [w.id for w in ours[kind].widgets]
        at = names.index(widget) + sum(w.seed for w in ours[kind].widgets[:names.index(widget)])
        return workflow[kind]["widgets_values"][at]

    assert value("SailfishModelLoader", "remote") in OPERATOR_ENDPOINTS
    assert value("SailfishModelLoader", "remote_model") == "drama-3"
    turns = parse_script(value("SailfishMultiSpeaker", "script"))
    assert len({t.label for t in turns}) > 4 and all(t.text.startswith("[") for t in turns)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.stem)
def test_a_note_says_what_to_upload_and_what_to_expect(path):
    """Every example opens with one Note: what to upload first (no clip is shipped) or that
    nothing is needed, and what the run gives."""
    nodes = json.loads(path.read_text())["nodes"]
    (note,) = [n for n in nodes if n["type"] == "Note"]
    text = note["widgets_values"][0]
    assert "Expect" in text and len(text) < 1200
    if any(n["type"] == "LoadAudio" for n in nodes):
        assert "Upload first" in text and "no clips are shipped" in text
    else:
        assert "Nothing to upload" in text or "Needs an engine" in text
    top = min(n["pos"][1] for n in nodes if n is not note)
    assert note["pos"][1] + note["size"][1] < top  # above the graph, seen first
