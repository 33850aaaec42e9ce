"""One description per node, built into a V3 ``io.ComfyNode`` (when ComfyUI has
``comfy_api.latest``) or into a classic V1 class (older ComfyUI).

A node is its inputs, outputs and an ``execute(**inputs) -> tuple`` that calls fish_core; the
same description gives the V3 schema, the V1 ``INPUT_TYPES`` and the locale/help texts, so the
two APIs cannot drift apart. Widget order is input order, required inputs first (this is what
workflows store positionally in ``widgets_values``), so never reorder or rename inputs.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

CATEGORY = "audio/Sailfish TTS"
MODEL = "FISH_S2_MODEL"
VOICE = "FISH_S2_VOICE"
WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")


@dataclass(frozen=True)
class Input:
    id: str
    type: str  # a widget type (WIDGET_TYPES) or a socket type (AUDIO, FISH_S2_MODEL …)
    tooltip: str
    default: Any = None
    optional: bool = False
    advanced: bool = False  # expert input: folded away where the ComfyUI supports ``advanced``
    options: Sequence[str] | Callable[[], list[str]] = ()  # COMBO; a function is asked afresh
    min: float | None = None
    max: float | None = None
    step: float | None = None
    multiline: bool = False
    seed: bool = False  # INT with "control after generate" (adds a widget value in workflows)

    @property
    def widget(self) -> bool:
        return self.type in WIDGET_TYPES

    def choices(self) -> list[str]:
        return list(self.options() if callable(self.options) else self.options)


@dataclass(frozen=True)
class Output:
    type: str
    name: str
    tooltip: str


@dataclass(frozen=True)
class Node:
    id: str  # stable forever: workflows refer to it
    display_name: str
    description: str
    inputs: list[Input]
    outputs: list[Output]
    execute: Callable[..., tuple]
    output_node: bool = False
    fingerprint: Callable[..., Any] | None = None  # IS_CHANGED / fingerprint_inputs
    # VALIDATE_INPUTS / validate_inputs: ``f(<input>=default, …) -> True | message``. ComfyUI
    # skips its own list and range checks for the inputs ``f`` names (and only those).
    validate: Callable[..., bool | str] | None = None

    @property
    def ordered_inputs(self) -> list[Input]:
        """Required inputs first: the order ComfyUI lays widgets out in."""
        return [i for i in self.inputs if not i.optional] + [i for i in self.inputs if i.optional]

    @property
    def widgets(self) -> list[Input]:
        """Widget inputs in the order workflows store their values."""
        return [i for i in self.ordered_inputs if i.widget]


# ---------------------------------------------------------------- input helpers
# Every helper takes the input's name first and its tooltip right after the values that define
# it; the flags that few inputs set are keyword-only. A widget added to a node after release is
# optional (older API prompts lack it) and comes last, so stored widget values keep their places.
def Int(name, default, lowest, highest, tooltip, *, step=1, seed=False, optional=False,
        advanced=False) -> Input:
    return Input(name, "INT", tooltip, default, optional=optional, min=lowest, max=highest,
                 step=step, seed=seed, advanced=advanced)


def Float(name, default, lowest, highest, tooltip, *, step=0.01, optional=False,
          advanced=False) -> Input:
    return Input(name, "FLOAT", tooltip, default, optional=optional, min=lowest, max=highest,
                 step=step, advanced=advanced)


def ruled(kind: Callable[..., Input], name, default, rule, tooltip, *, step=None,
          off=None, **flags) -> Input:
    """An ``Int`` or ``Float`` widget whose range is ``rule``'s (``params.Rule``: the numbers
    the request checks and the docs print): an open end one ``step`` inside, no upper bound
    where the rule has none. ``off``: a value outside the rule that stands for "off" (the
    range reaches it; the values between are refused with the request, naming the input)."""
    step = step if step is not None else 1 if kind is Int else 0.01
    low = rule.low + step if rule.low_open else rule.low
    high = None if rule.high is None else rule.high - step if rule.high_open else rule.high
    if off is not None:
        low, high = min(low, off), None if high is None else max(high, off)
    return kind(name, default, low, high, tooltip, step=step, **flags)


def String(name, tooltip, default="", *, multiline=False, optional=False,
           advanced=False) -> Input:
    return Input(name, "STRING", tooltip, default, multiline=multiline, optional=optional,
                 advanced=advanced)


def Boolean(name, default, tooltip, *, optional=False, advanced=False) -> Input:
    return Input(name, "BOOLEAN", tooltip, default, optional=optional, advanced=advanced)


def Combo(name, choices, tooltip, default=None, *, optional=False, advanced=False) -> Input:
    return Input(name, "COMBO", tooltip, default, options=choices, optional=optional,
                 advanced=advanced)


def Socket(name, kind, tooltip, *, optional=False) -> Input:
    return Input(name, kind, tooltip, optional=optional)


# ---------------------------------------------------------------- V1 (classic) classes
def v1_class(node: Node) -> type:
    def input_types(cls):
        spec: dict[str, dict] = {"required": {}, "optional": {}}
        for i in node.ordered_inputs:
            spec["optional" if i.optional else "required"][i.id] = v1_input(i)
        return spec

    def run(self, **inputs):
        return node.execute(**inputs)

    attrs = dict(
        INPUT_TYPES=classmethod(input_types), FUNCTION="run", CATEGORY=CATEGORY,
        RETURN_TYPES=tuple(o.type for o in node.outputs),
        RETURN_NAMES=tuple(o.name for o in node.outputs),
        OUTPUT_TOOLTIPS=tuple(o.tooltip for o in node.outputs),
        DESCRIPTION=node.description, OUTPUT_NODE=node.output_node, run=run)
    if node.fingerprint is not None:
        attrs["IS_CHANGED"] = classmethod(lambda cls, **inputs: node.fingerprint(**inputs))
    if node.validate is not None:
        attrs["VALIDATE_INPUTS"] = validator(node.validate)
    return type(node.id, (), attrs)


def validator(validate: Callable) -> classmethod:
    """``validate`` as a classmethod with its own parameter names: ComfyUI reads them (with
    ``inspect.getfullargspec``) to know which inputs the node validates itself."""
    def run(cls, *args, **inputs):
        return validate(*args, **inputs)

    parameters = list(inspect.signature(validate).parameters.values())
    run.__signature__ = inspect.Signature(
        [inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD), *parameters])
    return classmethod(run)


def options(i: Input) -> dict:
    """The input's options, which both APIs spell the same way."""
    found: dict[str, Any] = {"tooltip": i.tooltip}
    for key in ("default", "min", "max", "step"):
        if getattr(i, key) is not None:
            found[key] = getattr(i, key)
    if i.multiline:
        found["multiline"] = True
    if i.seed:
        found["control_after_generate"] = True
    return found


def v1_input(i: Input) -> tuple:
    return (i.choices() if i.type == "COMBO" else i.type), options(i)


def v1_mappings(nodes: Sequence[Node]) -> tuple[dict, dict]:
    """``NODE_CLASS_MAPPINGS``, ``NODE_DISPLAY_NAME_MAPPINGS``."""
    return ({n.id: v1_class(n) for n in nodes}, {n.id: n.display_name for n in nodes})


# ---------------------------------------------------------------- V3 classes
def v3_class(node: Node, io) -> type:
    def define_schema(cls):
        return io.Schema(
            node_id=node.id, display_name=node.display_name, category=CATEGORY,
            description=node.description, is_output_node=node.output_node,
            inputs=[v3_input(io, i) for i in node.ordered_inputs],
            outputs=[v3_type(io, o.type).Output(display_name=o.name, tooltip=o.tooltip)
                     for o in node.outputs])

    def execute(cls, **inputs):
        return io.NodeOutput(*node.execute(**inputs))

    attrs = dict(define_schema=classmethod(define_schema), execute=classmethod(execute))
    if node.fingerprint is not None:
        attrs["fingerprint_inputs"] = classmethod(lambda cls, **inputs: node.fingerprint(**inputs))
    if node.validate is not None:
        attrs["validate_inputs"] = validator(node.validate)
    return type(node.id, (io.ComfyNode,), attrs)


def v3_type(io, type_name: str):
    known = {"INT": io.Int, "FLOAT": io.Float, "STRING": io.String, "BOOLEAN": io.Boolean,
             "COMBO": io.Combo, "AUDIO": io.Audio}
    return known.get(type_name) or io.Custom(type_name)


def v3_input(io, i: Input):
    kind = v3_type(io, i.type).Input
    kwargs = {**options(i), "optional": i.optional}
    if i.type == "COMBO":
        kwargs["options"] = i.choices()
    if i.advanced and "advanced" in inspect.signature(kind).parameters:
        kwargs["advanced"] = True  # newer ComfyUI only (0.3.64 has no such flag)
    return kind(i.id, **kwargs)


def v3_extension(nodes: Sequence[Node], latest):
    """The ``ComfyExtension`` that lists our V3 node classes."""
    classes = [v3_class(n, latest.io) for n in nodes]

    class Sailfish(latest.ComfyExtension):
        async def get_node_list(self):
            return list(classes)

    return Sailfish()
