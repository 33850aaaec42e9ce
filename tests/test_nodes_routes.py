"""The HTTP API mounted on (a stand-in of) ComfyUI's PromptServer: the routes sit under
/sailfish, the model comes lazily through the shared model manager, and ComfyUI's "Free memory"
frees it (the next request loads it again)."""

import asyncio
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

web = pytest.importorskip("aiohttp.web")


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


def test_the_model_folders_are_scanned_once_not_per_round(comfy, monkeypatch):
    """Every scheduler round asks for the served model; the folders are scanned when a choice is
    first seen, and again only when the folder found is no longer a checkpoint."""
    routes_module = comfy.pack.nodes.routes
    paths = comfy.pack.nodes.paths
    monkeypatch.delenv("SAILFISH_SERVE_MODEL", raising=False)
    monkeypatch.setattr(routes_module, "_FOUND", {})
    scans = []
    real_scan = paths.local_models
    monkeypatch.setattr(paths, "local_models", lambda: scans.append(1) or real_scan())
    first = routes_module.model_handle()
    assert [routes_module.model_handle().folder for _ in range(3)] == [first.folder] * 3
    assert Path(first.folder).name == "tiny-s2"
    scanned = len(scans)
    assert scanned >= 1
    routes_module.model_handle()
    assert len(scans) == scanned  # no scan per round
    monkeypatch.setattr(comfy.pack.fish_core.loading.hub, "is_model_dir",
                        lambda path, codec=False: False)  # the folder went away
    with pytest.raises(Exception, match="model"):
        routes_module.model_handle()
    assert len(scans) > scanned


def test_models_route_reports_the_checkpoint_served(comfy, monkeypatch):
    """/sailfish/v1/models and /v1/health name the folder served (the first local checkpoint
    here, or the one SAILFISH_SERVE_MODEL names), not s2-pro; requests may name it."""
    import json

    from conftest import fixtures_dir

    routes_module = comfy.pack.nodes.routes
    monkeypatch.delenv("SAILFISH_SERVE_MODEL", raising=False)
    service = routes_module.build_service(comfy.manager)
    assert service.model_name == "tiny-s2"
    table = web.RouteTableDef()
    for route in comfy.pack.fish_core.serve.routes.routes(service, "/sailfish"):
        table.route(route.method, route.path)(route.handler)
    [(status, _, listed), (_, _, health)] = asyncio.run(call(table, [
        ("GET", "/sailfish/v1/models", None), ("GET", "/sailfish/v1/health", None)]))
    ids = {m["id"] for m in json.loads(listed)["data"]}
    assert status == 200 and "tiny-s2" in ids and json.loads(health)["model"] == "tiny-s2"
    assert routes_module.served_name(str(fixtures_dir() / "tiny-s2")) == "tiny-s2"
    assert routes_module.served_name("s2-pro (download)") == "s2-pro"
    assert routes_module.served_name("voices/alt") == "voices/alt"


def test_the_key_is_read_by_the_shared_reader_and_a_bad_one_mounts_nothing(comfy, monkeypatch):
    """SAILFISH_SERVE_API_KEY goes through ``fish_core.access`` as serve's and remote's keys do:
    a usable key guards the routes; one that cannot be a header value (a space, a newline) is
    refused, and the HTTP API is not mounted rather than served without a key."""
    routes_module = comfy.pack.nodes.routes
    monkeypatch.setenv("SAILFISH_SERVE_API_KEY", "  sk-good-key\n")
    service = routes_module.build_service()
    service.authorize("Bearer sk-good-key")  # the key, trimmed as the shared reader trims it
    with pytest.raises(Exception, match="API key"):
        service.authorize(None)
    monkeypatch.setenv("SAILFISH_SERVE_API_KEY", "two words")
    with pytest.raises(ValueError, match="SAILFISH_SERVE_API_KEY"):
        routes_module.build_service()
    table = web.RouteTableDef()
    monkeypatch.setattr(sys.modules["server"].PromptServer.instance, "routes", table)
    assert routes_module.mount() is False and len(table) == 0
    monkeypatch.delenv("SAILFISH_SERVE_API_KEY")
    assert not routes_module.build_service().has_key
