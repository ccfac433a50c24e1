"""How the long-running commands (``worker``, ``serve``) show their log: INFO and up on stderr,
timestamped, so that their operator sees a warm-up end, a client leave, a job fail."""
from __future__ import annotations

import logging

__all__ = ["log_to_stderr"]


def log_to_stderr() -> None:
    """Send this process's log records of INFO and up to stderr (once; later calls change nothing)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
