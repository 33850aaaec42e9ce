"""The model manager (``nodes/manager.py``): one load per configuration, ComfyUI's memory
management, idle unload, the memory asked for before a load."""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
import weakref

from fish_core.engine.config import ModelConfig
from node_env import FAST, check_audio, loaded, run_v1, wait_until


# ---------------------------------------------------------------- the model manager
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
                 if lm.model.model.model is synth.runtime.model]  # our modules, in a ModelPatcher
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
    gone = weakref.ref(env.manager.get(model).runtime.model)
    env.stubs.mm.unload_all_models()
    gc.collect()
    assert loaded(env.manager) == [] and gone() is None
    check_audio(run_v1(env, "SailfishTTS", model=model, text="Back again.", **FAST)[0])


def test_make_room_counts_the_kv_cache_the_prefix_cache_and_the_graph_pool(env, manager,
                                                                          ckpt_dir):
    """Before a load ComfyUI is asked for the weights plus the slow AR's KV cache at the
    handle's context (in its precision) plus the voice-prefix cache's budget plus the CUDA
    graph pool, not the weights alone."""
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
        prefixes = handle.prefix_cache_mb * 1024 * 1024  # the default budget
        assert prefixes > 0
        assert asked[-1] == mod.weights_size(str(ckpt_dir)) + kv + prefixes + mod.GRAPH_POOL_BYTES
    off = mod.ModelHandle(str(ckpt_dir), precision="bf16", context_length=context // 2,
                          device="cpu", prefix_cache_mb=0)
    m.get(off)
    assert (asked[-1] == mod.weights_size(str(ckpt_dir)) + mod.kv_cache_size(off)
            + mod.GRAPH_POOL_BYTES)
    full = mod.ModelHandle(str(ckpt_dir), precision="bf16")  # 0: the model's own context
    assert mod.kv_cache_size(full) == 2 * mod.kv_cache_size(
        mod.ModelHandle(str(ckpt_dir), precision="bf16", context_length=context))


def test_the_prefix_cache_budget_reaches_the_model_and_is_counted_at_each_use(env, monkeypatch):
    """The loader's ``prefix_cache_mb`` sizes the loaded model's voice-prefix cache; another
    budget for the same model resizes it (no second load); every use hands ComfyUI what a
    generation holds besides the weights, the budget included."""
    from node_env import LOADER, run_v3

    mod = env.pack.nodes.manager
    handle = run_v3(env, "SailfishModelLoader", **LOADER, prefix_cache_mb=3)[0]
    synth = env.manager.get(handle)
    assert synth.runtime.engine.prefixes.budget == 3 * 1024 * 1024
    asked = []
    load = env.stubs.mm.load_models_gpu
    monkeypatch.setattr(env.stubs.mm, "load_models_gpu",
                        lambda models, memory_required=0, **kw: asked.append(memory_required)
                        or load(models, memory_required, **kw))
    with env.manager.use(handle):
        pass
    assert asked == [mod.generation_size(handle)]
    assert (mod.generation_size(handle) == mod.kv_cache_size(handle) + 3 * 1024 * 1024
            + mod.GRAPH_POOL_BYTES)
    off = run_v3(env, "SailfishModelLoader", **LOADER, prefix_cache_mb=0)[0]
    with env.manager.use(off) as same:
        assert same is synth and not synth.runtime.engine.prefixes.enabled
    assert asked[-1] == mod.generation_size(off) == asked[0] - 3 * 1024 * 1024
    run_v3(env, "SailfishModelLoader", **LOADER)  # the default budget again
    assert synth.runtime.engine.prefixes.budget == mod.DEFAULT_PREFIX_CACHE_MB * 1024 * 1024
