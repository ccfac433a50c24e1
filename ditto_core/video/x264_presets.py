"""libx264's speed/size presets, in a module of their own so a command line lists them without
importing PyTorch or PyAV."""

X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
"""Fastest first."""
