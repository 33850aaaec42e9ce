"""The ComfyUI host, seen from the pack: its modules when we run inside ComfyUI, None outside.

Nothing in the pack imports ``comfy``, ``folder_paths``, ``server`` or ``comfy_api`` at module
level, so the pack imports without ComfyUI (unit tests with stand-ins, plain scripts). Each
caller says what it does when the module is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def module(name: str) -> ModuleType | None:
    """ComfyUI's module ``name`` (``"comfy.model_management"``, ``"folder_paths"`` …), or None
    when not running inside ComfyUI."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def prompt_server():
    """ComfyUI's ``PromptServer.instance``, or None outside ComfyUI (or before it starts)."""
    return getattr(getattr(module("server"), "PromptServer", None), "instance", None)


def v3_api():
    """``comfy_api.latest`` when this ComfyUI has the V3 node API (``io.ComfyNode`` and
    ``ComfyExtension``), else None."""
    latest = module("comfy_api.latest")
    if (latest is None or not hasattr(latest, "ComfyExtension")
            or not hasattr(getattr(latest, "io", None), "ComfyNode")):
        return None
    return latest
