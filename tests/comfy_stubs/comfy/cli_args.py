"""Stand-in for ``comfy.cli_args``: the parsed command line, with ComfyUI's defaults."""
from types import SimpleNamespace

args = SimpleNamespace(disable_metadata=False)
"""Tests flip ``disable_metadata`` as ``--disable-metadata`` would."""
