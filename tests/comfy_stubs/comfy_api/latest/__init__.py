"""Stand-in for ``comfy_api.latest``: the V3 node API surface the Ditto pack uses."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Optional

from . import io, ui


class ComfyExtension(ABC):
    async def on_load(self) -> None:
        """Called once when the extension is loaded."""

    @abstractmethod
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        """The node classes of the extension."""


@dataclass
class VideoComponents:
    images: Any  # (T, H, W, 3) float IMAGE
    frame_rate: Fraction
    audio: Optional[dict] = None
    metadata: Optional[dict] = None


class VideoFromComponents:
    """A VIDEO built from frames (+ audio); the real class can also encode itself."""

    def __init__(self, components: VideoComponents):
        self._components = components

    def get_components(self) -> VideoComponents:
        return self._components

    def get_dimensions(self) -> tuple[int, int]:
        return self._components.images.shape[2], self._components.images.shape[1]


class VideoFromFile:
    """A VIDEO backed by a file on disk."""

    def __init__(self, file: str):
        self._file = file

    def get_stream_source(self) -> str:
        return self._file


class InputImpl:
    VideoFromComponents = VideoFromComponents
    VideoFromFile = VideoFromFile


class Types:
    VideoComponents = VideoComponents


__all__ = ["ComfyExtension", "InputImpl", "Types", "io", "ui"]
