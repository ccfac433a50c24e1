"""Avatar registration: a portrait or video -> :class:`SourceInfo` on the device, with an on-disk cache."""
from .aux_models import AUX_FILES, AuxModels, load_aux_models
from .cache import AvatarCache, cache_key
from .image_io import load_source, to_rgb_uint8
from .options import RegistrationOptions
from .registrar import register_avatar, smooth_motion
from .source_info import SourceInfo

__all__ = [
    "AUX_FILES",
    "AuxModels",
    "AvatarCache",
    "RegistrationOptions",
    "SourceInfo",
    "cache_key",
    "load_aux_models",
    "load_source",
    "register_avatar",
    "smooth_motion",
    "to_rgb_uint8",
]
