"""ComfyUI adapters over ``ditto_core``: one thin V3 node per pipeline stage, plus interop.

Nodes parse widgets, call ``ditto_core`` and wrap the results; all the work happens in the
library. Stage nodes pass ``ditto_core`` objects to each other untouched (see
:mod:`.ditto_types`), so tensors stay on the GPU between them.
"""
from __future__ import annotations

from comfy_api.latest import ComfyExtension, io

from . import (
    all_in_one, audio_nodes, live_nodes, model_nodes, motion_nodes, output_nodes, render_nodes, source_nodes,
)
from .comfy_housekeeping import empty_cache_takes_turns
from .paths import reap_stale_files, register_model_folder
from .samples import install_sample_inputs

NODE_CLASSES: list[type[io.ComfyNode]] = [
    *model_nodes.NODES,
    *source_nodes.NODES,
    *audio_nodes.NODES,
    *motion_nodes.NODES,
    *render_nodes.NODES,
    *output_nodes.NODES,
    *all_in_one.NODES,
    *live_nodes.NODES,
]


class DittoExtension(ComfyExtension):
    """The Ditto node pack."""

    async def on_load(self) -> None:
        register_model_folder()
        empty_cache_takes_turns()  # ComfyUI's cache emptying never breaks a live avatar's warm-up
        reap_stale_files()  # what Ditto runs of a server killed mid-write left behind
        live_nodes.register_live_routes()  # /ditto/live on ComfyUI's own server

    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        # ComfyUI releases up to at least 0.3.6x ask for the node list but never call on_load (the
        # live routes were then never mounted): its steps are done here too, each of them once.
        await self.on_load()  # before any schema lists the model folders
        install_sample_inputs()  # before the Load nodes list the input folder
        return list(NODE_CLASSES)


__all__ = ["DittoExtension", "NODE_CLASSES"]
