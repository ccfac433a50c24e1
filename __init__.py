"""ComfyUI-Ditto: talking-head video from one portrait and one speech track (ComfyUI entry point).

ComfyUI imports this file as a package and calls :func:`comfy_entrypoint`. Nothing here
imports ComfyUI or the nodes at import time, so the pack (and its tests) import cleanly
without ComfyUI; the nodes are imported when ComfyUI asks for them.
"""
import os
import sys

_PACK_DIR = os.path.dirname(os.path.abspath(__file__))
# The nodes import the plain-PyTorch library as top-level ``ditto_core`` (the same module the
# CLI and the tests use). Appended, not prepended: this folder also holds a ``nodes`` package
# that must never shadow ComfyUI's own ``nodes`` module.
if _PACK_DIR not in sys.path:
    sys.path.append(_PACK_DIR)

WEB_DIRECTORY = "./web"
"""ComfyUI serves this folder to the browser: stage timings and the inline video player."""


async def comfy_entrypoint():
    """ComfyUI V3 entry point: the :class:`~comfy_api.latest.ComfyExtension` of the Ditto nodes."""
    from .nodes import DittoExtension

    return DittoExtension()


__all__ = ["WEB_DIRECTORY", "comfy_entrypoint"]
