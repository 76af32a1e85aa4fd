"""One append-only line file of this process: whole lines reach it, or nothing does.

Used by the span writer for its span and sample files. Two faults are handled here:

* **a partial write** (disk full, quota): the lines that reached the file whole stay, the
  torn rest is cut off again (``ftruncate`` to the end of the last whole line), so the next
  write does not append to half a line. If it cannot be cut, the next write starts with a
  newline: the torn piece is then one bad line, not the start of a good one;
* **a removed file** (its trace directory deleted while the program runs): after each write
  the file's link count is read; at 0 the directory is made again, the file opened anew and
  the same lines written there, so spans are never counted written into a deleted file.

:meth:`AppendFile.append` returns how many bytes of the data are on disk: always a prefix
that ends with a newline. The caller counts the lines in it as written and the rest as lost.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


class AppendFile:
    """Appends whole lines to ``path`` (opened on first use, created with its directory)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: Optional[int] = None
        self.size = 0  # bytes in the file: where the next write lands
        self.error: Optional[OSError] = None  # the last write's failure, if it had one
        self.reopened = 0  # times the file was found removed and made again
        self._torn = False  # a torn piece could not be cut off: start the next write anew

    def append(self, data: bytes) -> int:
        """Append ``data`` (whole lines); return how many of its bytes are on disk, a prefix
        ending with a newline. On a failure :attr:`error` says why. Never raises."""
        self.error = None
        for attempt in range(2):
            done = self._append_once(data)
            if done < len(data) or not self._removed():
                return done
            # written into a file that no longer has a name (its directory was removed):
            # lost with it. Make the file again and write the lines there once more.
            self.reopened += 1
            self.close()
            if attempt:
                self.error = OSError(errno.ENOENT, "the file was removed while being written")
        return 0

    def _append_once(self, data: bytes) -> int:
        try:
            if self.fd is None:
                self._open()
        except OSError as e:
            self.error = e
            return 0
        prefix = b"\n" if self._torn else b""
        start = self.size
        try:
            _write_all(self.fd, prefix + data if prefix else data)
        except OSError as e:
            self.error = e
            return self._cut_torn(data, start, len(prefix))
        self._torn = False
        self.size = start + len(prefix) + len(data)
        return len(data)

    def _cut_torn(self, data: bytes, start: int, prefix: int) -> int:
        """After a failed write: keep the whole lines that reached the file, cut the rest."""
        try:
            end = os.fstat(self.fd).st_size
        except OSError:  # cannot tell what arrived: count nothing, and start the next anew
            self._torn = True
            return 0
        if end - start < prefix:  # not even the newline that ends an earlier torn piece
            self.size = end
            return 0
        arrived = min(end - start - prefix, len(data))
        keep = data.rfind(b"\n", 0, arrived) + 1  # 0 when no whole line arrived
        cut_at = start + prefix + keep
        if end > cut_at:
            try:
                os.ftruncate(self.fd, cut_at)
                end = cut_at
            except OSError:
                pass
        self._torn = end > cut_at
        self.size = end
        return keep

    def _removed(self) -> bool:
        try:
            return os.fstat(self.fd).st_nlink == 0
        except OSError:
            return False

    def _open(self) -> None:
        try:
            fd = os.open(self.path, _FLAGS, 0o644)
        except FileNotFoundError:  # the directory went away: make it again
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, _FLAGS, 0o644)
        try:
            self.size = os.fstat(fd).st_size
        except OSError:
            self.size = 0
        self.fd = fd
        self._torn = False

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[n:]
