"""The example workflows (UI format, as users load them) use only our nodes and a few core
audio nodes, wire matching types, and hold widget values our schemas accept."""

from __future__ import annotations

import json

import pytest

import comfy_stubs

FOLDER = comfy_stubs.ROOT / "example_workflows"
WORKFLOWS = sorted(p for p in FOLDER.glob("*.json") if p.name != "index.json")
# Core nodes the examples may use: socket inputs, output types, widget values (LoadAudio's
# upload button and audio player also store a value each).
CORE = {
    "LoadAudio": ({}, ["AUDIO"], ["audio", "upload", "audioUI"]),
    "SaveAudio": ({"audio": "AUDIO"}, [], ["filename_prefix"]),
    "PreviewAudio": ({"audio": "AUDIO"}, [], []),
}
CONTROL = {"fixed", "increment", "decrement", "randomize"}


@pytest.fixture(scope="module")
def nodes():
    pack = comfy_stubs.load_pack("sailfish_workflows")
    yield {n.id: n for n in pack.nodes.NODES}, pack.nodes.paths.DOWNLOAD, pack.fish_core.hub
    comfy_stubs.unload_pack("sailfish_workflows")


def test_there_are_examples_and_an_index():
    names = {p.stem for p in WORKFLOWS}
    assert {"sailfish_tts", "sailfish_voice_clone", "sailfish_multi_speaker",
            "sailfish_subtitles"} <= names
    (category,) = json.loads((FOLDER / "index.json").read_text())
    assert category["description"] and category["title"]
    assert sorted(t["name"] for t in category["templates"]) == sorted(names)
    for template in category["templates"]:
        assert template["description"] and template["mediaType"] == "audio"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.stem)
def test_workflow_is_valid(path, nodes):
    ours, download, hub = nodes
    workflow = json.loads(path.read_text())
    by_id = {n["id"]: n for n in workflow["nodes"]}
    assert workflow["last_node_id"] == max(by_id) and workflow["last_link_id"] == len(workflow["links"])
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
