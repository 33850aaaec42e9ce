"""The picture in ARCHITECTURE.md, enforced: which layer may import which.

Every import in ``fish_core/``, ``nodes/``, ``quant/`` and the pack's ``__init__.py`` is read
with an AST walk (module-level and lazy ones inside functions, relative and absolute) and
resolved to the module it names; each must follow an edge of ``ALLOWED``. The layers form no
cycle, and neither do the modules. Importing the pack the way ComfyUI does at start-up loads no
engine, codec, loader or synthesizer module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layer → the layers it may import (besides itself). Lower layers never import higher ones.
ALLOWED: dict[str, set[str]] = {
    "params": set(),  # fish_core/params.py: options, seeds, errors, the engine's result type
    "access": set(),  # fish_core/access.py: loopback names and API keys, for serve and remote
    "budgets": set(),  # fish_core/budgets.py: the budgets per request, named constants
    "text": {"params", "budgets"},
    "audio": {"params", "budgets"},
    "engine": {"params"},
    "loading": {"params", "engine", "quant"},
    "codec": {"params", "engine", "loading", "audio"},  # engine.layers, loading.weights
    # the models that listen (aligner, ASR): engine.layers, loading.weights / hub
    "hearing": {"params", "audio", "engine", "loading"},
    # results, timeline, voices: shared, no engine
    "speech": {"params", "budgets", "text", "audio"},
    # never the engine or the loader
    "remote": {"params", "budgets", "access", "text", "audio", "speech"},
    "local": {"params", "budgets", "text", "audio", "engine", "codec", "loading", "speech",
              "hearing"},
    "serve": {"params", "budgets", "access", "text", "audio", "speech", "local", "loading",
              "hearing"},
    "cli": {"params", "budgets", "access", "text", "audio", "engine", "codec", "loading", "speech",
            "local",
            "remote", "serve", "quant", "hearing"},
    # fish_core/__init__.py: ``from fish_core import …``, both backends side by side
    "api": {"params", "speech", "local", "remote", "hearing"},
    "nodes": {"params", "budgets", "access", "text", "audio", "engine", "codec", "loading",
              "speech", "local",
              "remote", "serve", "quant", "api", "hearing"},
    "quant": set(),  # knows nothing of fish_core
    "pack": {"nodes"},  # the repository root's __init__.py, as ComfyUI imports it
}
# fish_core/budgets.py: a leaf every layer of fish_core and the nodes may import.
for _layer in set(ALLOWED) - {"budgets", "params", "access", "quant", "pack"}:
    ALLOWED[_layer].add("budgets")

# Edges allowed only to these modules of the imported layer: the codec shares the engine's
# transformer layers, its fused-op switch (``fused``: Triton on CUDA, the routing) and its CUDA
# graph capture, and the loader's streamed weight check, nothing else of either.
NARROW: dict[tuple[str, str], set[str]] = {
    ("codec", "engine"): {"fish_core.engine.layers", "fish_core.engine.fused",
                          "fish_core.engine.cuda_graph"},
    ("codec", "loading"): {"fish_core.loading.weights"},
    ("hearing", "engine"): {"fish_core.engine.layers"},
    ("hearing", "loading"): {"fish_core.loading.weights", "fish_core.loading.hub"},
    ("hearing", "audio"): {"fish_core.audio.files"},  # the door's audio checks and resampling
    ("cli", "serve"): {"fish_core.serve.main"},  # ``serve``; WAV is written by ``audio.wav``
    ("nodes", "serve"): {"fish_core.serve"},  # its public API (``mount``, ``ApiError`` …) only
}

# What ComfyUI start-up must not import: the model, the generation loop, the codec, the loader,
# the synthesizer (they come with the first model load).
HEAVY = ("fish_core.engine.model", "fish_core.engine.runner", "fish_core.engine.rows",
         "fish_core.engine.sampling", "fish_core.engine.cuda_graph", "fish_core.codec.",
         "fish_core.loading.checkpoint", "fish_core.local.synthesizer", "fish_core.hearing.")


def layer_of(module: str) -> str | None:
    """``fish_core.engine.runner`` → ``engine``; None for modules outside the pack."""
    parts = module.split(".")
    if parts[0] == "fish_core":
        if len(parts) == 1:
            return "api"
        if parts[1] in ("cli", "outputs", "__main__"):
            return "cli"
        return parts[1]
    if parts[0] in ("nodes", "quant"):
        return parts[0]
    if module == "":
        return "pack"
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    files = [ROOT / "__init__.py"]
    for folder in ("fish_core", "nodes", "quant"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def imports(path: Path) -> list[tuple[str, int]]:
    """Every pack module ``path`` imports (``(module, line)``), lazy ones included. A relative
    import climbing above the pack root (``from .. import quant`` inside ComfyUI) resolves to
    the sibling it names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(package, node)
            if target is None:
                continue  # above the pack: not one of ours
            # ``from pkg import mod`` names a module when pkg/mod.py exists
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                found.append((sub if is_module(sub) else target, node.lineno))
    return [(m, line) for m, line in found if layer_of(m) is not None and m != ""]


def resolve(package: str, node: ast.ImportFrom) -> str | None:
    """The absolute module a ``from … import`` names, seen from ``package``; None when a
    relative import climbs above the pack root."""
    if not node.level:
        return node.module or ""
    base = package.split(".") if package else []
    up = node.level - 1
    if up > len(base):
        return None
    base = base[:len(base) - up]
    return ".".join(base + ([node.module] if node.module else []))


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def edges() -> list[tuple[str, str, str, int]]:
    """``(importer, imported, file, line)`` for every import between pack modules."""
    out = []
    for path in source_files():
        name = module_name(path)
        for target, line in imports(path):
            out.append((name, target, str(path.relative_to(ROOT)), line))
    return out


def test_every_import_follows_an_allowed_edge():
    wrong = []
    for importer, imported, file, line in edges():
        a, b = layer_of(importer), layer_of(imported)
        if a != b and b not in ALLOWED[a]:
            wrong.append(f"{file}:{line}: {a} → {b} ({imported})")
        elif (a, b) in NARROW and imported not in NARROW[a, b]:
            wrong.append(f"{file}:{line}: {a} → {imported} (only {sorted(NARROW[a, b])})")
    assert not wrong, "imports against ARCHITECTURE.md:\n" + "\n".join(wrong)


def test_every_import_of_the_pack_names_an_existing_module():
    """A lazy import is only run when its function is: a moved module must not leave one behind
    pointing at the old place."""
    missing = []
    for path in source_files():
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = resolve(package, node)
                if target and not is_module(target):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target}")
    assert not missing, missing


def test_the_walk_sees_lazy_and_relative_imports():
    """The checker itself: a lazy relative import inside a function is found and resolved."""
    found = dict(imports(ROOT / "fish_core" / "local" / "synthesizer.py"))
    assert "fish_core.loading.hub" in found  # lazy, inside Synthesizer.from_pretrained
    assert "fish_core.engine.device" in found  # module-level, relative
    nodes_found = {m for m, _ in imports(ROOT / "nodes" / "routes.py")}
    assert any(m.startswith("fish_core.serve") for m in nodes_found)  # lazy, two dots up


def test_layers_form_no_cycle():
    order: list[str] = []
    seen: dict[str, int] = {}

    def visit(layer, path):
        state = seen.get(layer)
        assert state != 1, f"layer cycle: {' → '.join(path + [layer])}"
        if state == 2:
            return
        seen[layer] = 1
        for dep in sorted(ALLOWED[layer]):
            visit(dep, path + [layer])
        seen[layer] = 2
        order.append(layer)

    for layer in ALLOWED:
        visit(layer, [])
    assert set(order) == set(ALLOWED)


def test_modules_form_no_cycle():
    graph: dict[str, set[str]] = {}
    for importer, imported, _, _ in edges():
        if importer != imported and not imported.startswith(importer + "."):
            graph.setdefault(importer, set()).add(imported)
    state: dict[str, int] = {}

    def visit(module, path):
        if state.get(module) == 1:
            pytest.fail(f"import cycle: {' → '.join(path[path.index(module):] + [module])}")
        if state.get(module) == 2:
            return
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            visit(dep, path + [module])
        state[module] = 2

    for module in sorted(graph):
        visit(module, [])


def test_comfyui_start_up_imports_nothing_heavy(tmp_path):
    """The pack imported as ComfyUI imports it (with the routes mounted on a server stand-in)
    loads no engine, codec, loader or synthesizer module."""
    script = f"""
import sys, types
sys.path.insert(0, {str(ROOT / 'tests')!r})
import comfy_stubs
from pathlib import Path
comfy_stubs.install(Path({str(tmp_path)!r}))
class Routes:
    def route(self, method, path):
        return lambda handler: handler
sys.modules["server"] = comfy_stubs.server_module(Routes())
pack = comfy_stubs.load_pack("pack")
assert "pack.fish_core.serve.routes" in sys.modules, "the routes were not mounted"
heavy = [m for m in sys.modules if m.startswith("pack.") and
         any(m[5:] == h or (h.endswith(".") and m[5:].startswith(h)) for h in {HEAVY!r})]
print("HEAVY", sorted(heavy))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "HEAVY []" in result.stdout, result.stdout[-2000:]


def attributes(path: Path, owners: set[str]) -> list[tuple[str, int]]:
    """``(attribute, line)`` for every ``owner.attribute`` and ``self.owner.attribute`` in
    ``path`` whose owner is named in ``owners``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
            if owner in owners:
                found.append((node.attr, node.lineno))
    return found


def public_names(path: Path, cls: str) -> set[str]:
    """The public methods, properties and attributes (``self.x = …``) of ``cls`` in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    names = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    targets = [t for n in ast.walk(node) if isinstance(n, (ast.Assign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
    names |= {t.attr for t in targets
              if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "self"}
    return {name for name in names if not name.startswith("_")}


RUNTIME_PARTS = {"engine", "encoder", "model", "tokenizer", "codec", "config"}


def test_the_synthesizer_does_not_re_export_the_runtime_parts():
    """The public ``Synthesizer`` is a facade over one ``Runtime`` (``synth.runtime``), the one
    way to the loaded model's parts: neither it nor the ``Front`` it extends names one of them
    (an attribute, a property or a method), nor forwards unknown names (``__getattr__``)."""
    assert RUNTIME_PARTS <= public_names(ROOT / "fish_core" / "local" / "runtime.py", "Runtime")
    facade = public_names(ROOT / "fish_core" / "local" / "synthesizer.py", "Synthesizer")
    front = public_names(ROOT / "fish_core" / "speech" / "front.py", "Front")
    assert "runtime" in facade
    assert not (facade | front) & RUNTIME_PARTS, sorted((facade | front) & RUNTIME_PARTS)
    for path, cls in ((ROOT / "fish_core" / "local" / "synthesizer.py", "Synthesizer"),
                      (ROOT / "fish_core" / "speech" / "front.py", "Front")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        assert not methods & {"__getattr__", "__getattribute__"}, f"{cls} forwards names"


def test_the_driver_and_the_scheduler_use_the_runtime_never_the_synthesizer():
    """``local.driver``, the local ``Synthesizer``'s backend and ``serve.scheduler`` generate
    through the
    ``Runtime``'s public methods (``references``, ``system_turn``, ``prompt``, ``row_batch``
    …), never its engine, encoder or model, and never the public ``Synthesizer``: the
    scheduler only takes the runtime of the Synthesizer it is handed."""
    allowed = public_names(ROOT / "fish_core" / "local" / "runtime.py", "Runtime")
    allowed -= RUNTIME_PARTS - {"config"}  # the runtime's own parts (its sizes are fine)
    assert {"prompt", "row_batch", "system_turn", "config"} <= allowed
    wrong = []
    for path in (ROOT / "fish_core" / "local" / "driver.py",
                 ROOT / "fish_core" / "local" / "synthesizer.py",
                 ROOT / "fish_core" / "serve" / "scheduler.py"):
        for attr, line in attributes(path, {"runtime"}):
            if attr not in allowed:
                wrong.append(f"{path.name}:{line}: runtime.{attr}")
        for attr, line in attributes(path, {"synth"}):
            if attr != "runtime":
                wrong.append(f"{path.name}:{line}: synth.{attr}")
    assert not wrong, wrong


# The engine's frame and cache: ``runner.Engine`` owns them, ``rows.RowBatch`` (the one decode
# loop, a floor above the runner) drives them; nothing else in the pack may touch them.
FRAME_AND_CACHE = {"frame", "step", "run_step", "decode_frame", "frame_tail", "slow_step",
                   "prefill", "prefill_rows", "prefill_whole", "prefill_after", "load_prefixes",
                   "run_prefix", "ensure_cache", "caches", "first_rows", "cache_rows"}
LOOP_USES = {"frame", "prefill_rows", "ensure_cache", "caches"}  # what RowBatch calls


def test_one_decode_loop_owns_the_frames_and_the_engine_the_cache():
    """Outside ``engine/runner.py`` (the Engine) and ``engine/rows.py`` (RowBatch) no
    module of the pack reaches an engine's frame step, prefill or KV cache; in the loop, only
    ``RowBatch.step`` runs a frame and only ``RowBatch.join_many`` prefills; and the Engine
    itself has no loop over frames: it schedules nothing."""
    engine_file = ROOT / "fish_core" / "engine" / "runner.py"
    loop_file = ROOT / "fish_core" / "engine" / "rows.py"
    wrong = []
    for path in source_files():
        if path in (engine_file, loop_file):
            continue
        for attr, line in attributes(path, {"engine", "_engine"}):
            if attr in FRAME_AND_CACHE:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: engine.{attr}")
    assert not wrong, "the frame or the KV cache reached outside the loop:\n" + "\n".join(wrong)

    tree = ast.parse(loop_file.read_text(encoding="utf-8"))
    calls = {}  # engine attribute → the RowBatch methods that use it
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for method in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(method):
                if (isinstance(node, ast.Attribute) and node.attr in FRAME_AND_CACHE
                        and isinstance(node.value, (ast.Name, ast.Attribute))
                        and (getattr(node.value, "id", None) or node.value.attr) == "engine"):
                    calls.setdefault(node.attr, set()).add(f"{cls.name}.{method.name}")
    assert set(calls) <= LOOP_USES, calls
    assert calls["frame"] == {"RowBatch.step"} and calls["prefill_rows"] == {"RowBatch.join_many"}

    engine = next(n for n in ast.parse(engine_file.read_text(encoding="utf-8")).body
                  if isinstance(n, ast.ClassDef) and n.name == "Engine")
    loops = [node for node in ast.walk(engine) if isinstance(node, ast.While)
             or isinstance(node, ast.For) and any(
                 isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                 and call.func.attr in ("step", "run_step", "decode_frame", "frame")
                 for call in ast.walk(node))]
    assert not loops, [f"runner.py:{node.lineno}" for node in loops]


def test_the_runner_stands_below_the_loop():
    """``engine/runner.py`` (model, step, cache) imports nothing of ``engine/rows.py`` (the loop
    that drives it) and has no ``generate``: a run to the end is the loop's (``rows.generate``)."""
    path = ROOT / "fish_core" / "engine" / "runner.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    up = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
          and (node.module or "").split(".")[-1] == "rows"
          or isinstance(node, ast.ImportFrom) and any(a.name == "rows" for a in node.names)]
    assert not up, [f"runner.py:{line}" for line in up]
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    assert not [n for n in engine.body if getattr(n, "name", None) == "generate"]


def test_the_pack_root_imports_on_its_own_without_registering_anything():
    """pytest imports the root ``__init__.py`` as a plain module when the checkout's folder
    name is no identifier (``sailfish-tts``, as ComfyUI-Manager names it): that must not fail
    on its relative imports, and registers nothing outside a package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("__init__", ROOT / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.WEB_DIRECTORY == "./web"
    assert not hasattr(module, "NODE_CLASS_MAPPINGS") and not hasattr(module, "comfy_entrypoint")


def test_nodes_use_only_the_public_serve_api():
    """``nodes/`` reaches the HTTP service through ``fish_core.serve``'s public names (``mount``,
    ``Service``, ``Guard``, ``ApiError``, ``detail`` …: its ``__all__``), never a module inside
    it (the import rule above) nor a name outside ``__all__``."""
    tree = ast.parse((ROOT / "fish_core" / "serve" / "__init__.py").read_text(encoding="utf-8"))
    public = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and any(getattr(t, "id", None) == "__all__" for t in n.targets))
    used = []
    for path in sorted((ROOT / "nodes").rglob("*.py")):
        package = module_name(path).rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and resolve(package, node) == "fish_core.serve":
                used += [(alias.name, path.name, node.lineno) for alias in node.names]
        used += [(attr, path.name, line) for attr, line in attributes(path, {"serve"})]
    assert used, "the nodes mount the HTTP service through fish_core.serve"
    wrong = [f"{file}:{line}: serve.{name}" for name, file, line in used if name not in public]
    assert not wrong, "nodes use serve names outside its public API:\n" + "\n".join(wrong)


def node_functions(path: Path) -> dict[str, ast.FunctionDef]:
    """The ``execute`` functions of the nodes described in ``path`` (``Node(…, execute=f)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    names = {kw.value.id for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", None) == "Node" for kw in node.keywords
             if kw.arg == "execute" and isinstance(kw.value, ast.Name)}
    return {name: functions[name] for name in names}


def with_calls(function: ast.FunctionDef) -> set[str]:
    """The functions called as context managers in ``function`` (``with f(…) as x``)."""
    return {item.context_expr.func.id for node in ast.walk(function)
            if isinstance(node, ast.With) for item in node.items
            if isinstance(item.context_expr, ast.Call)
            and isinstance(item.context_expr.func, ast.Name)}


def test_nodes_run_the_model_through_the_node_runner():
    """One node runner: every generating node (TTS, Voice Clone, Multi-Speaker, Subtitles, local
    or remote) runs inside ``runner.generation`` (the manager's model, progress, Cancel, live
    playback), the encoding nodes inside ``runner.loaded``; only the runner uses the model
    manager's ``use`` and opens a playback stream, and the node modules import neither."""
    runner = ROOT / "nodes" / "runner.py"
    generating = node_functions(ROOT / "nodes" / "speech.py")
    assert {"tts", "voice_clone", "multi_speaker", "subtitles"} <= set(generating)
    wrong = [f"speech.py: {name} generates outside runner.generation"
             for name, fn in generating.items() if "generation" not in with_calls(fn)]
    for name, fn in node_functions(ROOT / "nodes" / "voice.py").items():
        if with_calls(fn) - {"loaded"}:
            wrong.append(f"voice.py: {name} takes the model outside runner.loaded")
    for path in sorted((ROOT / "nodes").glob("*.py")):
        if path == runner:
            continue
        for attr, line in attributes(path, {"MANAGER", "playback"}):
            if attr in ("use", "sender", "PlaybackSender"):
                wrong.append(f"{path.name}:{line}: .{attr} outside the node runner")
    for path in (ROOT / "nodes" / "speech.py", ROOT / "nodes" / "voice.py"):
        for module, line in imports(path):
            if module in ("nodes.manager", "nodes.playback"):
                wrong.append(f"{path.name}:{line}: imports {module} (the runner's)")
    assert not wrong, wrong


def test_nodes_import_no_private_name_of_fish_core():
    """The nodes use fish_core's public names (``from fish_core import Synthesizer, Voice`` or
    a module's documented API), never a ``_private`` module or name."""
    wrong = []
    for path in sorted((ROOT / "nodes").glob("*.py")):
        package = module_name(path).rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = resolve(package, node) or ""
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                target, names = "", [alias.name for alias in node.names]
            else:
                continue
            for name in [f"{target}.{n}" if target else n for n in names]:
                if name.startswith("fish_core") and any(
                        part.startswith("_") and part != "__init__" for part in name.split(".")):
                    wrong.append(f"{path.name}:{node.lineno}: {name}")
    assert not wrong, wrong
