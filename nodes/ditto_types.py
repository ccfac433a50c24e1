"""The socket types that connect Ditto's stage nodes.

Each carries one ``ditto_core`` object between nodes, unchanged (tensors stay on the compute
device): ``DITTO_MODELS`` a :class:`~nodes.model_registry.ModelHandle`, ``DITTO_SOURCE`` a
``SourceInfo``, ``DITTO_AUDIO_FEATURES`` ``AudioFeatures``, ``DITTO_MOTION_OPTIONS``
``MotionOptions``, ``DITTO_MOTION`` ``MotionSequence``, ``DITTO_RENDERS`` ``RenderedFrames``
and ``DITTO_FRAMES`` ``VideoFrames``.
"""
import inspect

from comfy_api.latest import io

MODELS = io.Custom("DITTO_MODELS")
SOURCE = io.Custom("DITTO_SOURCE")
AUDIO_FEATURES = io.Custom("DITTO_AUDIO_FEATURES")
MOTION_OPTIONS = io.Custom("DITTO_MOTION_OPTIONS")
MOTION = io.Custom("DITTO_MOTION")
RENDERS = io.Custom("DITTO_RENDERS")
FRAMES = io.Custom("DITTO_FRAMES")

CATEGORY = "Ditto"
SEARCH_ALIASES = ["talking head", "lip sync", "avatar", "ditto"]
"""Words that find every Ditto node in the node search (ComfyUI versions whose Schema takes aliases)."""


def schema(**fields) -> io.Schema:
    """A Ditto node's ``io.Schema``: in the Ditto category, with :data:`SEARCH_ALIASES` where the
    running ComfyUI's Schema has ``search_aliases`` (older ones reject unknown fields)."""
    if "search_aliases" in inspect.signature(io.Schema).parameters:
        fields.setdefault("search_aliases", SEARCH_ALIASES)
    return io.Schema(category=CATEGORY, **fields)
