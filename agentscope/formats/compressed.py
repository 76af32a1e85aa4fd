"""Compressed trace files (gzip, zstd), recognised by their magic bytes, not their names.

zstd needs the ``zstandard`` package (``pip install zstandard``, or the ``[zstd]`` extra);
without it a zstd file is reported as a problem naming the package, and everything else still
loads.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from typing import Optional

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_BYTES = 4 << 30  # a decompressed file larger than this is refused (a zip bomb, or a mistake)
CHUNK = 1 << 20


class CompressedError(ValueError):
    """A compressed file that cannot be decompressed, and why."""


def compression(head: bytes) -> Optional[str]:
    """``"gzip"``, ``"zstd"`` or None, from a file's first bytes."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def _zstd():
    try:
        import zstandard
    except ImportError:
        raise CompressedError("zstd-compressed: reading it needs the zstandard package "
                              "(pip install zstandard)") from None
    return zstandard


def read_head(path: "str | os.PathLike[str]", n: int) -> tuple:
    """(compression, the first ``n`` bytes of the decompressed content). A compressed file cut
    short still gives what could be decompressed. Raises OSError, CompressedError."""
    with open(path, "rb") as f:
        raw = f.read(n)
        kind = compression(raw)
        if kind is None:
            return None, raw
        f.seek(0)
        if kind == "gzip":
            d = zlib.decompressobj(wbits=31)
            out = b""
            while len(out) < n:
                chunk = f.read(65536)
                if not chunk:
                    break
                try:
                    out += d.decompress(chunk, n - len(out))
                except zlib.error as e:
                    if out:
                        break
                    raise CompressedError(f"not a valid gzip file: {e}") from None
                if d.unconsumed_tail:
                    break
            return kind, out[:n]
        reader = _zstd().ZstdDecompressor().stream_reader(f)
        try:
            return kind, reader.read(n)
        except Exception as e:  # zstandard.ZstdError
            raise CompressedError(f"not a valid zstd file: {e}") from None


def read_all(path: "str | os.PathLike[str]", kind: Optional[str]) -> bytes:
    """The whole decompressed content of a file (``kind`` from :func:`compression`). Raises
    OSError, and CompressedError for a corrupt or truncated compressed file (the message says
    which) or one that decompresses past :data:`MAX_BYTES` (read a chunk at a time: memory
    grows with what the file holds, not with the limit)."""
    with open(path, "rb") as f:
        if kind is None:
            return f.read()
        if kind == "gzip":
            try:
                with gzip.GzipFile(fileobj=f) as g:
                    return _bounded(g.read)
            except EOFError:
                raise CompressedError("truncated gzip file (it ends before the compressed "
                                      "stream does)") from None
            except (OSError, zlib.error) as e:
                raise CompressedError(f"not a valid gzip file: {e}") from None
        zstandard = _zstd()
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BufferedReader(f),
                                                                read_across_frames=True)
            return _bounded(reader.read)
        except zstandard.ZstdError as e:
            raise CompressedError(f"not a valid zstd file: {e}") from None


def _bounded(read) -> bytes:
    """What ``read(n)`` gives until it is exhausted, at most :data:`MAX_BYTES`."""
    parts, total = [], 0
    while True:
        chunk = read(CHUNK)
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if total > MAX_BYTES:
            raise CompressedError(f"decompresses to more than {MAX_BYTES >> 30} GiB; not read")
        parts.append(chunk)
