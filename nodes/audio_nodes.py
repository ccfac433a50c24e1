"""Audio Features: ComfyUI ``AUDIO`` -> ``DITTO_AUDIO_FEATURES`` (HuBERT at 25 fps)."""
from __future__ import annotations

from typing import Optional

from comfy_api.latest import io

from ditto_core.audio.audio_features import AudioFeatures
from ditto_core.errors import InputError
from ditto_core.progress import ProgressCallback

from . import ditto_types as T
from .model_registry import REGISTRY, ModelHandle
from .runtime import comfy_progress, timed_stage


def encode_speech(handle: ModelHandle, audio: dict, progress: Optional[ProgressCallback]) -> AudioFeatures:
    """ComfyUI AUDIO ``{"waveform": (1, C, T) float, "sample_rate": int}`` -> HuBERT features
    on the handle's device."""
    if not isinstance(audio, dict) or "waveform" not in audio or "sample_rate" not in audio:
        raise InputError("audio: expected a ComfyUI AUDIO value (a dict with 'waveform' and 'sample_rate'); "
                         "connect a Load Audio node.")
    return REGISTRY.pipeline(handle).audio_features(audio["waveform"], audio["sample_rate"], name="audio input",
                                                    progress=progress)


class AudioFeaturesNode(io.ComfyNode):
    """Speech encoded by Ditto's streaming HuBERT: one feature row per output video frame."""

    @classmethod
    def define_schema(cls) -> io.Schema:
        return T.schema(
            node_id="DittoAudioFeatures",
            display_name="Audio Features",
            description="Encodes the speech with HuBERT (aux_models/hubert_streaming_fix_kv.onnx). Any sample "
                        "rate and channel count; the video gets 25 frames per second of speech.",
            inputs=[
                T.MODELS.Input("models", tooltip="From Load Ditto Models."),
                io.Audio.Input("audio", tooltip="The speech to lip-sync, e.g. from Load Audio."),
            ],
            outputs=[T.AUDIO_FEATURES.Output(display_name="audio_features", tooltip="25 fps HuBERT features.")],
        )

    @classmethod
    def execute(cls, models: ModelHandle, audio: dict) -> io.NodeOutput:
        with timed_stage("Audio Features", models.torch_device) as timer:
            features = encode_speech(models, audio, comfy_progress())
        return io.NodeOutput(features, ui=timer.ui(features.num_frames))


NODES = [AudioFeaturesNode]
