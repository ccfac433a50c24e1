"""The socket types that connect Ditto's stage nodes.

Each carries one ``ditto_core`` object between nodes, unchanged (tensors stay on the compute
device): ``DITTO_MODELS`` a :class:`~nodes.model_registry.ModelHandle`, ``DITTO_SOURCE`` a
``SourceInfo``, ``DITTO_AUDIO_FEATURES`` ``AudioFeatures``, ``DITTO_MOTION_OPTIONS``
``MotionOptions``, ``DITTO_MOTION`` ``MotionSequence``, ``DITTO_RENDERS`` ``RenderedFrames``
and ``DITTO_FRAMES`` ``VideoFrames``.
"""
from comfy_api.latest import io

MODELS = io.Custom("DITTO_MODELS")
SOURCE = io.Custom("DITTO_SOURCE")
AUDIO_FEATURES = io.Custom("DITTO_AUDIO_FEATURES")
MOTION_OPTIONS = io.Custom("DITTO_MOTION_OPTIONS")
MOTION = io.Custom("DITTO_MOTION")
RENDERS = io.Custom("DITTO_RENDERS")
FRAMES = io.Custom("DITTO_FRAMES")

CATEGORY = "Ditto"
