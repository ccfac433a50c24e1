"""Stand-in for ``comfy_api.latest.ui``: saved-file results as the frontend reads them."""
from __future__ import annotations

from .io import FolderType


class SavedResult(dict):
    def __init__(self, filename: str, subfolder: str, type: FolderType):
        super().__init__(filename=filename, subfolder=subfolder, type=type.value)


class PreviewVideo:
    """Saved videos, shown by the frontend's own video preview."""

    def __init__(self, values: list[SavedResult | dict], **kwargs):
        self.values = values

    def as_dict(self) -> dict:
        return {"images": self.values, "animated": (True,)}
