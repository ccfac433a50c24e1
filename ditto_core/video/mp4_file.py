"""An MP4 being written: under a temporary name beside its target, published whole or discarded."""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Mapping, Optional, Union

import av

from ..atomic_files import Writeback, discard, disk_full_error, publish, temp_sibling

PathLike = Union[str, os.PathLike]


MUX_BUFFER_BYTES = 256 << 10
"""The muxer's write buffer: each fill is one call into Python and one write."""

WRITEBACK_BYTES = 8 << 20
"""A published MP4's bytes are sent to the disk each time this many more have been written
(:class:`~ditto_core.atomic_files.Writeback`); 0: only by the sync before its rename.
Benchmarks switch it."""


class Mp4File:
    """An MP4 being written under a temporary name beside ``target``; published or discarded.

    A ``scratch`` file is never renamed: it stays under its temporary name (so a later run
    reaps it if this process dies) and its owner deletes it once used.

    The file is opened here and handed to the muxer as a Python file object, so closing it is
    ours: FFmpeg, given a name, opens the file itself and never closes it when writing the
    header fails (a full disk), leaving a deleted temporary holding its space for the life of
    the process.
    """

    def __init__(self, target: PathLike, suffix: str, scratch: bool = False,
                 metadata: Optional[Mapping[str, str]] = None) -> None:
        self.target = Path(target)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.temp = temp_sibling(self.target, suffix=suffix)
        self.scratch = scratch
        self._handle: Optional[BinaryIO] = None
        try:
            # A buffered file: its write() never returns short (the muxer would drop the rest).
            self._handle = open(self.temp, "wb")
            # use_metadata_tags: keep tags under their own names (by default the muxer drops
            # every key outside its fixed iTunes set).
            self.container = av.open(self._handle, mode="w", format="mp4", buffer_size=MUX_BUFFER_BYTES,
                                     options={"movflags": "use_metadata_tags"} if metadata else None)
            self.container.metadata.update(metadata or {})
        except BaseException:
            self._close_handle(quiet=True)
            discard(self.temp)
            raise
        self._open = True
        # A file to publish has its bytes sent to the disk as it grows, so the sync before the
        # rename (after the last frame, while the user waits) is short; a scratch file is
        # deleted once joined and never needs to reach the disk.
        self._writeback = None if scratch or not WRITEBACK_BYTES else Writeback(self.temp, WRITEBACK_BYTES)
        self._muxed = 0

    def mux(self, packet: av.Packet) -> None:
        """Write one video packet (its bytes counted towards the writeback)."""
        self.container.mux(packet)
        self._muxed += packet.size
        if self._writeback is not None:
            self._writeback.grown(self._muxed)

    def bytes_written(self) -> int:
        try:
            return self.temp.stat().st_size
        except OSError:
            return 0

    def publish(self) -> Path:
        """Write the trailer and rename the file over its target (a scratch file: no rename);
        returns where the file now is."""
        self.container.close()
        self._open = False
        self._close_handle(quiet=False)  # its last bytes reach the file here: a full disk raises
        if self.scratch:
            return self.temp
        if self._writeback is not None:
            self._writeback.close()
        publish(self.temp, self.target)
        return self.target

    def discard(self) -> None:
        if self._writeback is not None:
            self._writeback.close()
        if self._open:
            self._open = False
            try:
                self.container.close()
            except (av.FFmpegError, OSError):
                pass  # the file is being thrown away; a failed trailer write changes nothing
        self._close_handle(quiet=True)
        discard(self.temp)

    def _close_handle(self, quiet: bool) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        try:
            handle.close()  # closes the descriptor even when flushing its last bytes fails
        except OSError:
            if not quiet:
                raise

    def raise_if_disk_full(self, error: BaseException, needed: Optional[int]) -> None:
        """Raise ``error`` as a DiskFullError naming this file's folder and ``needed`` bytes if
        it is one (ENOSPC, EDQUOT); return otherwise, for the caller to re-raise it."""
        full = disk_full_error(error, self.target, needed)
        if full is not None and full is not error:
            raise full from error
