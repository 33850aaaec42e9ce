"""Sailfish: Fish Audio S2-Pro text-to-speech nodes for ComfyUI (pure PyTorch engine in
fish_core/, nodes in nodes/).

With the V3 node API (``comfy_api.latest``, ComfyUI 0.3.4x and later) the nodes are registered
through ``comfy_entrypoint``; on older ComfyUI through ``NODE_CLASS_MAPPINGS``. Only one of the
two is exported, because ComfyUI ignores ``comfy_entrypoint`` when ``NODE_CLASS_MAPPINGS``
exists.
"""

WEB_DIRECTORY = "./web"

if __package__:  # loaded as the pack (ComfyUI's custom_nodes); pytest, run from a checkout whose
    # folder name is not a Python identifier (e.g. sailfish-tts), imports this file on its own
    from .nodes import host, paths, playback, routes

    paths.register_folders()
    routes.mount()  # the HTTP API under /sailfish on ComfyUI's server (nodes/routes.py)
    playback.mount()  # POST /sailfish/live: a tab asks for live playback (nodes/playback.py)

    if host.v3_api() is not None:
        from .nodes import comfy_entrypoint

        __all__ = ["comfy_entrypoint", "WEB_DIRECTORY"]
    else:
        from .nodes import v1_mappings

        NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = v1_mappings()
        __all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
