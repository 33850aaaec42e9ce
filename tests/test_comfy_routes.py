"""The HTTP API mounted on (a stand-in of) ComfyUI's PromptServer: the routes sit under
/sailfish, the model comes lazily through the shared model manager, and ComfyUI's "Free memory"
frees it (the next request loads it again)."""

import asyncio
import sys
import types
from contextlib import asynccontextmanager

import pytest

web = pytest.importorskip("aiohttp.web")

import comfy_stubs  # noqa: E402
from conftest import fixtures_dir  # noqa: E402


@pytest.fixture(scope="module")
def comfy(tmp_path_factory):
    base = tmp_path_factory.mktemp("comfy")
    stubs = comfy_stubs.install(base)
    models = base / "models" / "fish_speech"
    models.mkdir(parents=True)
    (models / "tiny-s2").symlink_to(fixtures_dir() / "tiny-s2", target_is_directory=True)
    server = types.ModuleType("server")
    server.PromptServer = types.SimpleNamespace(
        instance=types.SimpleNamespace(routes=web.RouteTableDef()))
    sys.modules["server"] = server
    pack = comfy_stubs.load_pack("sailfish_routes")
    yield types.SimpleNamespace(pack=pack, stubs=stubs, routes=server.PromptServer.instance.routes,
                                manager=pack.nodes.manager.MANAGER)
    pack.nodes.manager.MANAGER.unload()
    comfy_stubs.unload_pack("sailfish_routes")
    comfy_stubs.uninstall()
    sys.modules.pop("server", None)


@asynccontextmanager
async def serving(table, middlewares=()):
    """Serve ``table`` as ComfyUI's app would, on a free loopback port (yields the port)."""
    app = web.Application(middlewares=list(middlewares))
    app.add_routes(table)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def call(table, requests):
    """Serve ``table`` on a free loopback port and run ``requests`` (method, path, json)."""
    from aiohttp import ClientSession

    out = []
    async with serving(table) as port, ClientSession() as session:
        for method, path, body in requests:
            async with session.request(method, f"http://127.0.0.1:{port}{path}",
                                       json=body) as response:
                data = await response.read()
                out.append((response.status, response.headers.get("Content-Type"), data))
    return out


def test_routes_under_the_prefix_share_the_manager_and_free_memory_frees(comfy):
    paths = {route.path for route in comfy.routes}
    assert "/sailfish/v1/audio/speech" in paths and "/sailfish/v1/tts" in paths
    assert all(path.startswith("/sailfish/") for path in paths)
    assert comfy.manager.loaded() == []  # lazily: nothing loaded at start-up

    body = {"text": "Served by ComfyUI.", "format": "wav", "seed": 1, "max_new_tokens": 12}
    [(status, kind, data), (_, _, health)] = asyncio.run(call(comfy.routes, [
        ("POST", "/sailfish/v1/tts", body), ("GET", "/sailfish/v1/health", None)]))
    assert status == 200 and kind == "audio/wav" and data[:4] == b"RIFF"
    assert len(comfy.manager.loaded()) == 1 and b'"model_loaded": true' in health

    comfy.stubs.mm.unload_all_models()  # what "Free memory" does
    assert comfy.manager.loaded() == []
    [(status, _, again)] = asyncio.run(call(comfy.routes, [("POST", "/sailfish/v1/tts", body)]))
    assert status == 200 and again == data and len(comfy.manager.loaded()) == 1


def test_not_mounted_without_a_server_or_when_switched_off(comfy, monkeypatch):
    monkeypatch.setenv("SAILFISH_SERVE", "0")
    assert comfy.pack.nodes.routes.mount() is False
    monkeypatch.delitem(sys.modules, "server")
    monkeypatch.setenv("SAILFISH_SERVE", "1")
    assert comfy.pack.nodes.routes.mount() is False
