"""The README's screenshot (docs/screenshot.png): an example workflow as a user opens it, in a
real ComfyUI frontend, taken by headless chromium. A helper script, not a pytest test:

    COMFYUI_DIR=PATH/TO/ComfyUI COMFYUI_PYTHON=PATH/TO/ComfyUI/venv/bin/python \\
        python3 tests/browser_screenshot.py [--workflow NAME] [--out docs/screenshot.png]

It starts the e2e test's server (the pack, the tiny checkpoint, nothing left in COMFYUI_DIR),
loads the workflow, fits it to the window and writes the PNG; the PNG is then reduced to a
256-colour palette with Pillow (ComfyUI's environment has it) to stay small.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from browser_playback_check import headless_page  # noqa: E402

LOAD = """(async () => {
  const app = window.comfyAPI.app.app;
  await app.loadGraphData(%s);
  const nodes = app.graph.nodes ?? app.graph._nodes, title = 34, pad = 30;
  const x0 = Math.min(...nodes.map((n) => n.pos[0])) - pad;
  const y0 = Math.min(...nodes.map((n) => n.pos[1])) - title - pad;
  const x1 = Math.max(...nodes.map((n) => n.pos[0] + n.size[0])) + pad;
  const y1 = Math.max(...nodes.map((n) => n.pos[1] + n.size[1])) + pad;
  const canvas = app.canvas, el = canvas.canvas;  // fit the graph into the canvas element
  const w = el.clientWidth, h = el.clientHeight, scale = Math.min(w / (x1 - x0), h / (y1 - y0));
  canvas.ds.scale = scale;
  canvas.ds.offset[0] = -x0 + (w / scale - (x1 - x0)) / 2;
  canvas.ds.offset[1] = -y0 + (h / scale - (y1 - y0)) / 2;
  canvas.setDirty(true, true);
  return [w, h, scale];
})()"""
# No first-run template browser over the canvas, no minimap over the nodes.
SETTINGS = {"Comfy.TutorialCompleted": True, "Comfy.Minimap.Visible": False}


async def shoot(url: str, chromium: str, workflow: Path, size: tuple[int, int]) -> bytes:
    async with headless_page(chromium, "--hide-scrollbars",
                             f"--window-size={size[0]},{size[1]}") as (page, session):
        await page.send("Page.enable")
        await page.send("Emulation.setDeviceMetricsOverride", width=size[0],
                        height=size[1], deviceScaleFactor=1, mobile=False)
        for key, value in SETTINGS.items():
            async with session.post(f"{url}/settings/{key}", json=value) as r:
                assert r.status == 200, await r.text()
        await page.send("Page.navigate", url=url)
        await page.until("!!(window.comfyAPI?.app?.app?.graph && "
                         "window.comfyAPI.app.app.extensions?.length)")
        await asyncio.sleep(3)  # the other extensions, the sidebar
        print("canvas (width, height, scale):", await page.eval(LOAD % workflow.read_text()))
        await asyncio.sleep(2)
        shot = await page.send("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflow", default="Sailfish TTS - multi-speaker dialogue")
    parser.add_argument("--out", default=str(TESTS.parent / "docs" / "screenshot.png"))
    parser.add_argument("--size", default="1600x900")
    parser.add_argument("--chromium", default=shutil.which("chromium")
                        or shutil.which("chromium-browser") or shutil.which("google-chrome"))
    args = parser.parse_args()
    if not args.chromium or not os.environ.get("COMFYUI_DIR"):
        print("needs chromium on PATH and COMFYUI_DIR (and COMFYUI_PYTHON)")
        return 1
    from test_comfyui_e2e import Server, comfy_python

    workflow = TESTS.parent / "example_workflows" / f"{args.workflow}.json"
    comfy = Path(os.environ["COMFYUI_DIR"]).resolve()
    server = Server(Path(tempfile.mkdtemp(prefix="sailfish-shot-")), comfy)
    server.start()
    try:
        size = tuple(int(v) for v in args.size.split("x"))
        png = asyncio.run(shoot(server.url, args.chromium, workflow, size))
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
    Path(args.out).write_bytes(png)
    small = ("from PIL import Image; import sys; "
             "Image.open(sys.argv[1]).convert('RGB').quantize(256, dither=Image.Dither.NONE)"
             ".save(sys.argv[1], optimize=True)")
    subprocess.run([comfy_python(comfy), "-c", small, args.out], check=True)
    print(f"wrote {args.out}: {Path(args.out).stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
