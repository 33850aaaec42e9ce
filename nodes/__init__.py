"""ComfyUI nodes of the Sailfish pack: thin schemas whose execute calls fish_core.

``NODES`` is every node's one description (``schema.Node``); the pack root registers them as
V3 nodes through ``comfy_entrypoint`` when ComfyUI has ``comfy_api.latest``, else as V1 classes
through ``NODE_CLASS_MAPPINGS``.
"""

from . import host, schema
from .captions import CAPTIONS
from .hearing import TRANSCRIBE
from .model import MODEL_LOADER
from .speech import MULTI_SPEAKER, SUBTITLES, TTS, VOICE_CLONE
from .voice import ENGINE_VOICE, VOICE_ENCODE, VOICE_FROM_TAKE, VOICE_LOAD, VOICE_SAVE

NODES = [MODEL_LOADER, TTS, VOICE_CLONE, MULTI_SPEAKER, SUBTITLES, VOICE_ENCODE, VOICE_SAVE,
         VOICE_LOAD, VOICE_FROM_TAKE, ENGINE_VOICE, CAPTIONS, TRANSCRIBE]


async def comfy_entrypoint():
    """V3 registration (ComfyUI calls this when the pack exports no NODE_CLASS_MAPPINGS)."""
    return schema.v3_extension(NODES, host.v3_api())


def v1_mappings() -> tuple[dict, dict]:
    return schema.v1_mappings(NODES)
