"""Exceptions that reach users.

Every message names the input at fault and says what to do about it: these strings show up
verbatim in ComfyUI's error panel, in ``/history`` and on the CLI.
"""


class DittoError(RuntimeError):
    """Base class: an error the user can act on (as opposed to a bug in the pack)."""


class MissingModelError(DittoError, FileNotFoundError):
    """A model file is not where we looked for it."""


class CheckpointError(DittoError):
    """A model file exists but is not the network it claims to be (wrong, truncated, tampered)."""


class InputError(DittoError, ValueError):
    """An image, audio track or option that cannot produce a sensible result."""


class Interrupted(DittoError):
    """The user cancelled the run; nothing half-written is left behind."""
