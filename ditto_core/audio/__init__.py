"""Speech -> 25 fps HuBERT features: decoding, 16 kHz mono conversion, streaming HuBERT."""
from .audio_features import FPS, SAMPLE_RATE, SAMPLES_PER_FRAME, AudioFeatures
from .chunking import StreamingWindow, num_video_frames
from .hubert import HUBERT_DIM, HUBERT_ONNX_NAME, MIN_DURATION_S, HubertFeatureExtractor
from .loading import load_audio, to_mono_16k

__all__ = [
    "FPS",
    "SAMPLE_RATE",
    "SAMPLES_PER_FRAME",
    "AudioFeatures",
    "StreamingWindow",
    "num_video_frames",
    "HUBERT_DIM",
    "HUBERT_ONNX_NAME",
    "MIN_DURATION_S",
    "HubertFeatureExtractor",
    "load_audio",
    "to_mono_16k",
]
