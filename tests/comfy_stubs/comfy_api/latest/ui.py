"""Stand-in for ``comfy_api.latest.ui``: saved-file results as the frontend reads them."""
from __future__ import annotations

from .io import FolderType


class SavedResult(dict):
    def __init__(self, filename: str, subfolder: str, type: FolderType):
        super().__init__(filename=filename, subfolder=subfolder, type=type.value)
