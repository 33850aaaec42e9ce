"""Stand-ins for the ComfyUI modules the pack touches, for unit tests without ComfyUI.

They follow ComfyUI 0.3.64 where it matters to the pack: ``LoadedModel`` keeps only weak
references and a finalizer that edits ``current_loaded_models``; ``load_models_gpu`` detaches
an already-loaded model (``unpatch_all=False``) before loading it again; ``free_memory``
unloads first and pops afterwards; ``ProgressBar`` takes the hook at construction; V3 input
classes accept only their documented keyword arguments (``advanced`` only when asked).

``load_pack(name)`` imports the repository root as a package, the way ComfyUI does;
``pack_in_comfy(base, name)`` does it under the stand-ins (every test file that needs the pack
inside ComfyUI uses it), and ``server_module(routes)`` stands in for ComfyUI's ``server``.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import threading
import types
import weakref
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
STUBBED = ("folder_paths", "comfy", "comfy.utils", "comfy.model_management",
           "comfy.model_patcher", "comfy_api", "comfy_api.latest")


def load_pack(name: str):
    """Import the pack (repository root) as package ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "__init__.py",
                                                  submodule_search_locations=[str(ROOT)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def unload_pack(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def install(base: Path, v3: bool = True, advanced: bool = False) -> types.SimpleNamespace:
    """Put the stand-ins into ``sys.modules`` (``comfy_api`` only with ``v3``); ``base`` holds
    the models/input/output folders. Returns the modules by short name."""
    uninstall()
    mods = dict(folder_paths=folder_paths_module(base), utils=utils_module(),
                mm=model_management_module(), model_patcher=model_patcher_module())
    comfy = types.ModuleType("comfy")
    comfy.utils, comfy.model_management, comfy.model_patcher = (
        mods["utils"], mods["mm"], mods["model_patcher"])
    sys.modules.update({"folder_paths": mods["folder_paths"], "comfy": comfy,
                        "comfy.utils": mods["utils"], "comfy.model_management": mods["mm"],
                        "comfy.model_patcher": mods["model_patcher"]})
    if v3:
        latest = comfy_api_module(advanced)
        api = types.ModuleType("comfy_api")
        api.latest = latest
        sys.modules.update({"comfy_api": api, "comfy_api.latest": latest})
        mods["latest"] = latest
    else:
        sys.modules["comfy_api"] = None  # "import comfy_api" raises ImportError
    return types.SimpleNamespace(**mods)


def uninstall() -> None:
    for name in STUBBED:
        sys.modules.pop(name, None)


@contextmanager
def swapped(base: Path, **options):
    """``install`` for the duration of a block, then put back whatever was there."""
    saved = {name: sys.modules[name] for name in STUBBED if name in sys.modules}
    try:
        yield install(base, **options)
    finally:
        uninstall()
        sys.modules.update(saved)


@contextmanager
def pack_in_comfy(base: Path, name: str, configure=None, **options):
    """The pack imported as package ``name`` under the stand-ins (``options``: ``install``'s;
    ``configure(stubs)`` runs before the import, as ``extra_model_paths.yaml`` would); yields
    ``(pack, stubs)``, then unloads the pack and puts back what was there."""
    with swapped(base, **options) as stubs:
        if configure is not None:
            configure(stubs)
        pack = load_pack(name)
        try:
            yield pack, stubs
        finally:
            unload_pack(name)


def server_module(routes) -> types.ModuleType:
    """A stand-in for ComfyUI's ``server``: ``PromptServer.instance.routes`` is ``routes``."""
    server = types.ModuleType("server")
    server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(routes=routes))
    return server


# ---------------------------------------------------------------- folder_paths
def folder_paths_module(base: Path):
    m = types.ModuleType("folder_paths")
    m.models_dir = str(base / "models")
    m.folder_names_and_paths = {}

    def add_model_folder_path(name, path, is_default=False):
        paths = m.folder_names_and_paths.setdefault(name, ([], set()))[0]
        if path in paths:
            paths.remove(path)
        paths.insert(0, path) if is_default else paths.append(path)

    def get_folder_paths(name):
        return list(m.folder_names_and_paths[name][0])  # KeyError for unknown names, as real

    m.add_model_folder_path = add_model_folder_path
    m.get_folder_paths = get_folder_paths
    m.get_input_directory = lambda: str(base / "input")
    m.get_output_directory = lambda: str(base / "output")
    m.get_user_directory = lambda: str(base / "user")
    return m


# ---------------------------------------------------------------- comfy.utils
def utils_module():
    m = types.ModuleType("comfy.utils")
    m.PROGRESS_BAR_HOOK = None

    class ProgressBar:
        def __init__(self, total, node_id=None):
            self.total, self.current, self.node_id = total, 0, node_id
            self.hook = m.PROGRESS_BAR_HOOK

        def update_absolute(self, value, total=None, preview=None):
            if total is not None:
                self.total = total
            self.current = min(value, self.total)
            if self.hook is not None:
                self.hook(self.current, self.total, preview, node_id=self.node_id)

    m.ProgressBar = ProgressBar
    return m


# ---------------------------------------------------------------- comfy.model_management
def model_management_module():
    m = types.ModuleType("comfy.model_management")
    m.current_loaded_models = []
    m.interrupt_processing = False
    m.soft_empty_calls = 0
    lock = threading.RLock()

    class InterruptProcessingException(Exception):
        pass

    def interrupt_current_processing(value=True):
        with lock:
            m.interrupt_processing = value

    def processing_interrupted():
        with lock:
            return m.interrupt_processing

    def throw_exception_if_processing_interrupted():
        with lock:
            if m.interrupt_processing:
                m.interrupt_processing = False
                raise InterruptProcessingException()

    def cleanup_models():
        gone = [i for i, lm in enumerate(m.current_loaded_models) if lm.real_model() is None]
        for i in gone[::-1]:
            m.current_loaded_models.pop(i)

    class LoadedModel:
        def __init__(self, patcher):
            self._model = weakref.ref(patcher)
            self.device = patcher.load_device
            self.real_model = lambda: None
            self.model_finalizer = None

        @property
        def model(self):
            return self._model()

        def model_load(self):
            self.model.model.to(self.device)
            real = self.model.model
            self.real_model = weakref.ref(real)
            self.model_finalizer = weakref.finalize(real, cleanup_models)

        def model_unload(self, memory_to_free=None, unpatch_weights=True):
            self.model.detach(unpatch_weights)
            self.model_finalizer.detach()
            self.model_finalizer = None
            self.real_model = lambda: None
            return True

        def is_dead(self):
            return self.real_model() is not None and self.model is None

        def __eq__(self, other):
            return self.model is other.model

    def load_models_gpu(models, memory_required=0, force_patch_weights=False,
                        minimum_memory_required=None, force_full_load=False):
        to_load = []
        for patcher in models:
            candidate = LoadedModel(patcher)
            found = [lm for lm in m.current_loaded_models if lm == candidate]
            to_load.append(found[0] if found else candidate)
        for loaded in to_load:  # 0.3.64 detaches a loaded model (and its clones) first
            for i in range(len(m.current_loaded_models) - 1, -1, -1):
                if loaded.model.is_clone(m.current_loaded_models[i].model):
                    old = m.current_loaded_models.pop(i)
                    old.model.detach(unpatch_all=False)
                    old.model_finalizer.detach()
        for loaded in to_load:
            loaded.model_load()
            m.current_loaded_models.insert(0, loaded)

    def free_memory(memory_required, device, keep_loaded=()):
        unloaded = [i for i, lm in enumerate(m.current_loaded_models)
                    if lm.device == device and lm not in keep_loaded and not lm.is_dead()
                    and lm.model_unload()]
        return [m.current_loaded_models.pop(i) for i in sorted(unloaded, reverse=True)]

    def unload_all_models():
        free_memory(1e30, get_torch_device())

    def get_torch_device():
        return torch.device("cpu")

    def soft_empty_cache(force=False):
        m.soft_empty_calls += 1

    for f in (interrupt_current_processing, processing_interrupted,
              throw_exception_if_processing_interrupted, load_models_gpu, free_memory,
              unload_all_models, get_torch_device, soft_empty_cache):
        setattr(m, f.__name__, f)
    m.InterruptProcessingException = InterruptProcessingException
    m.LoadedModel = LoadedModel
    m.unet_offload_device = get_torch_device
    return m


# ---------------------------------------------------------------- comfy.model_patcher
def model_patcher_module():
    m = types.ModuleType("comfy.model_patcher")

    class ModelPatcher:
        def __init__(self, model, load_device, offload_device, size=0, weight_inplace_update=False):
            self.model, self.load_device, self.offload_device = model, load_device, offload_device
            self.callbacks: dict[str, list] = {}
            self.detached = []

        def add_callback(self, call_type, callback):
            self.callbacks.setdefault(call_type, []).append(callback)

        def is_clone(self, other):
            return hasattr(other, "model") and self.model is other.model

        def detach(self, unpatch_all=True):
            self.detached.append(unpatch_all)
            if unpatch_all:
                self.model.to(self.offload_device)
            for callback in self.callbacks.get("on_detach_after", []):
                callback(self, unpatch_all)
            return self.model

    m.ModelPatcher = ModelPatcher
    return m


# ---------------------------------------------------------------- comfy_api.latest (V3)
def comfy_api_module(advanced: bool):
    io = types.ModuleType("comfy_api.latest.io")
    base = ["display_name", "optional", "tooltip", "lazy"]
    widget = base + ["default", "socketless", "force_input"]
    params = {
        "INT": widget + ["min", "max", "step", "control_after_generate", "display_mode"],
        "FLOAT": widget + ["min", "max", "step", "round", "display_mode"],
        "STRING": widget + ["multiline", "placeholder", "dynamic_prompts"],
        "BOOLEAN": widget + ["label_on", "label_off"],
        "COMBO": widget + ["options", "control_after_generate", "upload", "image_folder",
                           "remote"],
    }

    def comfy_type(io_type):
        allowed = params.get(io_type, base) + (["advanced"] if advanced else [])

        class Input:
            def __init__(self, id, **kwargs):
                unknown = set(kwargs) - set(allowed)
                if unknown:
                    raise TypeError(f"{io_type}.Input got unexpected arguments {sorted(unknown)}")
                self.id, self.io_type, self.kwargs = id, io_type, kwargs

        Input.__signature__ = inspect.Signature(
            [inspect.Parameter("id", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            + [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=None)
               for p in allowed])

        class Output:
            def __init__(self, id=None, display_name=None, tooltip=None, is_output_list=False):
                self.io_type, self.display_name, self.tooltip = io_type, display_name, tooltip

        return types.SimpleNamespace(io_type=io_type, Input=Input, Output=Output)

    for name, io_type in (("Int", "INT"), ("Float", "FLOAT"), ("String", "STRING"),
                          ("Boolean", "BOOLEAN"), ("Combo", "COMBO"), ("Audio", "AUDIO")):
        setattr(io, name, comfy_type(io_type))
    io.Custom = comfy_type

    class Schema:
        def __init__(self, node_id, display_name=None, category="sd", inputs=None, outputs=None,
                     hidden=None, description="", is_output_node=False, **flags):
            self.node_id, self.display_name, self.category = node_id, display_name, category
            self.inputs, self.outputs = inputs or [], outputs or []
            self.description, self.is_output_node = description, is_output_node

    class ComfyNode:
        @classmethod
        def GET_SCHEMA(cls):
            return cls.define_schema()

    class NodeOutput:
        def __init__(self, *args, ui=None, expand=None, block_execution=None):
            self.args, self.ui = args, ui

    class ComfyExtension:
        async def on_load(self):
            pass

    io.Schema, io.ComfyNode, io.NodeOutput = Schema, ComfyNode, NodeOutput
    latest = types.ModuleType("comfy_api.latest")
    latest.io, latest.ComfyExtension = io, ComfyExtension
    return latest
