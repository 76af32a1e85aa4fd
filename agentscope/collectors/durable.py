"""A span file that is durable line by line: what the live receiver writes.

:class:`SpanFile` appends whole lines of our span format (``spans-<host>-<pid>-<ms>[-<n>].jsonl``,
agentscope.formats.spanfile) under one lock and ``fsync``s them (and, for a new part, the
directory) before :meth:`SpanFile.append` returns, so a caller acknowledges only what is on
disk. A write that fails is cut back off the file, which is then left to the next part.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Optional

from ..formats import spanfile


class SpanFile:
    """The receiver's span file: whole lines appended and ``fsync``'ed under one lock."""

    def __init__(self, directory: Path, max_file_bytes: int = 256 << 20) -> None:
        self.directory, self.max_file_bytes = directory, max_file_bytes
        self.host, self.pid, self.ms = socket.gethostname(), os.getpid(), int(time.time() * 1000)
        self.paths: list[Path] = []
        self._fd: Optional[int] = None
        self._size = 0
        self._closed = False
        self._lock = threading.Lock()

    def append(self, data: bytes) -> None:
        """Write ``data`` (whole lines) and make it durable; raises OSError if it could not."""
        with self._lock:
            if self._closed:
                raise OSError("the span file is closed")
            try:
                if self._fd is None or 0 < self._size and self._size + len(data) > \
                        self.max_file_bytes:
                    self._next_file()
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]
                os.fsync(self._fd)
            except OSError:
                self._give_up()
                raise
            self._size += len(data)

    def _next_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / spanfile.file_name(self.host, self.pid, self.ms, len(self.paths))
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.paths.append(path)
        dir_fd = os.open(self.directory, os.O_RDONLY)  # the new name is durable too
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _give_up(self) -> None:
        """After a failed write: cut what it wrote, and leave the file to the next part."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            pass  # a torn last line then ends this file: readers skip it
        try:
            os.close(self._fd)
        except OSError:
            pass
        self._fd = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)  # every append was fsync'ed already
                self._fd = None
