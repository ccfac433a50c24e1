"""Live avatars on ComfyUI's own server: the ``/ditto/live`` routes and the node that publishes an avatar.

A workflow loads the models and registers the portrait as usual; **Publish Live Avatar** puts
that avatar under an id, and browsers (``/ditto/live``, the page) or programs (the WebSocket at
``/ditto/live/ws``) stream with it, on the models the workflow loaded (:data:`REGISTRY`). Clients
on other machines need the token in the ``DITTO_LIVE_TOKEN`` environment variable.
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import Any, Callable

from comfy_api.latest import io

from ditto_core.cli_types import int_in, seconds_or_zero
from ditto_core.live.admission import MAX_LOAD, MAX_STREAM_STEPS, MAX_STREAMS, SILENT_TIMEOUT_S
from ditto_core.live.cli import device_share
from ditto_core.live.server import PREFIX, Limits, LiveAvatars, add_live_routes
from ditto_core.motion.motion_options import MotionOptions
from ditto_core.registration.source_info import SourceInfo

from . import ditto_types as T
from .model_registry import REGISTRY, ModelHandle

log = logging.getLogger(__name__)


SETTINGS: dict[str, tuple[Any, Callable[[str], Any]]] = {
    "DITTO_LIVE_MAX_STREAMS": (MAX_STREAMS, int_in(1)),
    "DITTO_LIVE_MAX_LOAD": (MAX_LOAD, device_share),
    "DITTO_LIVE_SILENT_TIMEOUT": (SILENT_TIMEOUT_S, seconds_or_zero),
}
"""The live server's settings on ComfyUI: each variable's default and the parser of the standalone
``serve`` flag it stands for (``--max-streams``, ``--max-load``, ``--silent-timeout``)."""


def setting(name: str):
    """An environment setting; a bad value is logged and the default used (ComfyUI must still load the pack)."""
    default, parse = SETTINGS[name]
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return parse(text)
    except argparse.ArgumentTypeError as error:
        log.warning("Ditto live: %s=%r is not usable (%s); using %r.", name, text, error, default)
        return default


LIVE_AVATARS = LiveAvatars(max_streams=setting("DITTO_LIVE_MAX_STREAMS"), max_load=setting("DITTO_LIVE_MAX_LOAD") or None)
"""The avatars ComfyUI's live routes can open (process-wide, like REGISTRY)."""

LIVE_LIMITS = Limits(silent_timeout_s=setting("DITTO_LIVE_SILENT_TIMEOUT") or None)
"""What one live connection on ComfyUI's server may do."""


def _withdraw_avatars(pipeline) -> None:
    """A model set leaves (Unload Ditto Models, or ComfyUI making room): its avatars and their
    runtime go with it, or the runtime would keep its VRAM in use behind ComfyUI's back."""
    withdrawn = LIVE_AVATARS.withdraw(pipeline, "the avatar's models were unloaded on the server; "
                                                "publish the avatar again to stream it")
    if withdrawn:
        log.info("Ditto live: avatars %s withdrawn with their unloaded models", ", ".join(withdrawn))


REGISTRY.on_drop(_withdraw_avatars)


def register_live_routes() -> bool:
    """Mount the live routes on ComfyUI's server (once); False where there is no server (tests, scripts)."""
    try:
        from server import PromptServer
    except ImportError:
        return False
    server = getattr(PromptServer, "instance", None)
    if server is None or getattr(server, "_ditto_live_routes", False):
        return False
    add_live_routes(server.routes, LIVE_AVATARS, token=os.environ.get("DITTO_LIVE_TOKEN") or None, limits=LIVE_LIMITS)
    server._ditto_live_routes = True
    return True


class PublishLiveAvatar(io.ComfyNode):
    """Makes a registered avatar available to live streams under an id."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoPublishLiveAvatar",
            display_name="Publish Live Avatar",
            description=f"Live streaming: browsers open {PREFIX} on this server (microphone in, avatar out); "
                        f"programs use the WebSocket at {PREFIX}/ws with this id (docs/LIVE.md).",
            inputs=[
                T.MODELS.Input("models", tooltip="From Load Ditto Models: the streams run on these models."),
                T.SOURCE.Input("source", tooltip="From Register Avatar."),
                io.String.Input("avatar_id", default="avatar", tooltip="Name clients open the stream with."),
                io.Int.Input("steps", default=MotionOptions().steps, min=1, max=MAX_STREAM_STEPS, optional=True,
                             tooltip="DDIM steps of the streams (recorded by the warm-up; clients asking for others "
                                     "are refused): 25 smoother, 10 lower latency. Avatars of the same models share "
                                     "one runtime and its steps."),
            ],
            outputs=[],
            is_output_node=True,
        )

    @classmethod
    def execute(cls, models: ModelHandle, source: SourceInfo, avatar_id: str, steps: int | None = None) -> io.NodeOutput:
        steps = MotionOptions().steps if steps is None else steps
        LIVE_AVATARS.publish(avatar_id, REGISTRY.pipeline(models), source, steps=(steps,))  # checks them first
        options = MotionOptions(steps=steps)
        # Compile the engines and record the graphs now, beside the UI, not when a client
        # connects; until then clients are told to come back (warming_up).
        LIVE_AVATARS.warm_up_in_background(avatar_id, options)
        log.info("Ditto live: avatar %r published at %s (steps %d)", avatar_id, PREFIX, options.steps)
        return io.NodeOutput(ui={"text": [f"live avatar '{avatar_id}': open {PREFIX}?avatar={avatar_id} "
                                          f"(streams use {options.steps} steps)"]})


NODES = [PublishLiveAvatar]
