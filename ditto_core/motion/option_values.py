"""Values the motion options take that a command line lists before PyTorch loads.

Kept free of torch so ``python -m ditto_core render --help`` and a render handed to a warm
worker (:mod:`ditto_core.worker`) parse their flags without importing it.
"""

NUM_EMOTIONS = 8
EMOTIONS = ("angry", "disgust", "fear", "happy", "neutral", "sad", "surprise", "contempt")
"""Emotion labels in the order of the LMDM's 8-wide emotion condition."""

MAX_STEPS = 1000
"""DDIM steps cannot exceed the 1000-step training schedule."""

MAX_SEED = 2**64 - 1
"""Largest seed: the sampler's generator takes 64-bit seeds."""
