"""Which files of a source are traces, and in which format: decided by content.

A source is a directory (every file below it, hidden entries such as ``.agentscope/`` left
out) or a single file. Each file is recognised by its first bytes, decompressed first when it
is gzip or zstd: our own span and sample files (also by their names), OTLP/JSON in either
spelling, then each importer of :mod:`agentscope.formats.importers` (OTLP protobuf, Langfuse,
any-agent, Jaeger, Phoenix, TraceLab). A file none of them recognises is *skipped*, with the
reason, and the callers show it: nothing is passed over in silence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from ..formats import compressed, importers, naming, samplefile, spanfile
from . import otlp

HEAD_BYTES = importers.HEAD_BYTES
UNKNOWN = "not a known trace format"
BROKEN = "cannot read: "
RESCAN_LINES = 8  # lines after a first one in no known format that may still name the format
TAIL_BYTES = 4096  # the end of what was loaded of a file, remembered to see it rewritten
RESCAN_BYTES = 1 << 20  # ... looked for this far past the head when the first line is longer


@dataclasses.dataclass
class Source:
    """One file to load: where, its path relative to the source's root, its format (``spans``,
    ``samples``, ``otlp``, ``otlp-lines`` or an importer's name) and its compression.
    ``parquet``: a span or sample file's fields as the columns of a Parquet file, not as
    lines (what agentscope reads a ClickHouse window into; never found in a directory)."""

    path: Path
    rel: str
    format: str
    compression: Optional[str] = None
    parquet: bool = False

    @property
    def incremental(self) -> bool:
        """Read from where the last load stopped (line-delimited, uncompressed); else the whole
        file is read again when it changes (its spans already stored are skipped)."""
        return (self.compression is None and not self.parquet
                and self.format in ("spans", "samples", "otlp-lines"))


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A file that is not loaded, and why. ``quiet``: one that is plainly not a trace (a
    document, agentscope's own scenario labels): ``check`` lists it, ``analyze`` does not warn."""

    rel: str
    reason: str
    quiet: bool = False
    # a file that could not be read at all (a corrupt or cut compressed file, zstd without
    # zstandard, no permission): an input problem as well (exit 1), not just passed over
    broken: bool = False
    path: Optional[Path] = None


# documents that live beside traces (named by ``check``, not warned about by ``analyze``)
DOCUMENT_SUFFIXES = (".md", ".txt", ".rst", ".html", ".pdf", ".png", ".svg")
DOCUMENT_NAMES = ("LICENSE", "NOTICE", "README", "COPYING")


def capture_kind(name: str) -> Optional[str]:
    """``spans`` or ``samples`` for the name of one of our capture files, else None."""
    if name.endswith(spanfile.FILE_SUFFIX):
        if name.startswith(spanfile.FILE_PREFIX):
            return "spans"
        if name.startswith(samplefile.FILE_PREFIX):
            return "samples"
    return None


def hidden(root: Path, path: Path) -> bool:
    """Whether ``path`` is, or is inside, a hidden entry below ``root`` (e.g. .agentscope/)."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def find(source: "str | os.PathLike[str]") -> tuple:
    """(the loadable :class:`Source` s, the :class:`Skipped` files) of a directory or a single
    file, sorted by path. Raises FileNotFoundError if ``source`` does not exist."""
    # absolute, so that a file is named alike however the source was spelled (its problems
    # are kept by that name from one load to the next)
    path = Path(source).absolute()
    if path.is_file():
        return _classify([path], path.parent)
    if not path.is_dir():
        raise FileNotFoundError(f"no such trace directory or file: {source}")
    files = [p for p in sorted(path.rglob("*")) if not hidden(path, p) and p.is_file()]
    return _classify(files, path)


def _classify(files: list, root: Path) -> tuple:
    found, skipped = [], []
    for path in files:
        rel = str(path.relative_to(root))
        if naming.is_label_file(path.name):
            skipped.append(Skipped(rel, "agentscope scenario labels, not traces", True))
            continue
        fmt, kind, reason = detect(path)
        if fmt is None:
            broken = reason.startswith(BROKEN)
            quiet = not broken and (path.suffix.lower() in DOCUMENT_SUFFIXES
                                    or path.name in DOCUMENT_NAMES)
            skipped.append(Skipped(rel, "a document, not traces" if quiet and reason == UNKNOWN
                                   else reason, quiet, broken, path))
        else:
            found.append(Source(path, rel, fmt, kind))
    return found, skipped


def _first_line_is_a_request(head: bytes, path: Path) -> bool:
    line, newline, _ = head.lstrip().partition(b"\n")
    if not newline:
        # the whole file on one line, or a first line longer than the head: lines (the
        # Collector's, or one compact document, which reads the same way) when the file ends
        # with a newline; else one document (json.dump writes none)
        return len(head) >= HEAD_BYTES and ends_with_newline(path)
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def _after_first_line(path: Path, head: bytes) -> bytes:
    """The head of a file from its first line on (``head`` when that line runs past
    RESCAN_BYTES): for a file whose first line is too long to see past in its head."""
    try:
        _, more = compressed.read_head(path, HEAD_BYTES + RESCAN_BYTES)
    except (OSError, compressed.CompressedError):
        return head
    cut = more.find(b"\n")
    return head if cut < 0 else more[:cut + 1 + HEAD_BYTES]


def rewritten(src: Source, loaded: int, before: "list | tuple", st: os.stat_result) -> bool:
    """Whether a file loaded up to ``loaded`` bytes was rewritten rather than appended to:
    it is shorter, or the same size with a new modification time, or the end of what was
    loaded changed (``before``: the size, mtime and tail hash the last load saw; None where
    a store from before they were kept has none)."""
    size, mtime, tail = before
    if st.st_size < loaded:
        return True
    if size is not None and mtime is not None and st.st_size == size \
            and st.st_mtime_ns != mtime:
        return True
    if tail is not None and src.incremental and st.st_size > loaded:
        try:
            return tail_hash(src.path, loaded) != tail
        except OSError:
            return False
    return False


def tail_hash(path: "str | os.PathLike[str]", end: int) -> str:
    """A hash of the TAIL_BYTES of a file before ``end``."""
    start = max(0, end - TAIL_BYTES)
    with open(path, "rb") as f:
        f.seek(start)
        return hashlib.blake2b(f.read(end - start), digest_size=8).hexdigest()


def ends_with_newline(path: Path) -> bool:
    """Whether the file's last byte is a newline (False for an empty or unreadable file)."""
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:
        return False


def detect(path: Path) -> tuple:
    """(format or None, compression, why it was not recognised)."""
    name = path.name
    kind = capture_kind(name)
    if kind:
        return kind, None, ""
    try:
        comp, head = compressed.read_head(path, HEAD_BYTES)
    except compressed.CompressedError as e:
        return None, None, f"{BROKEN}{e}"
    except OSError as e:
        return None, None, f"{BROKEN}{e.strerror or e}"
    if not head.strip():
        return None, comp, "empty file"
    inner = name
    if comp:  # the name without its compression suffix, for our own files and tie-breaks
        for suffix in (".gz", ".gzip", ".zst", ".zstd"):
            if inner.endswith(suffix):
                inner = inner[: -len(suffix)]
        kind = capture_kind(inner)
        if kind:
            return kind, comp, ""
    if otlp.looks_like_otlp(head):
        # one request per line (read incrementally, as it grows) when the first line is a
        # whole request; otherwise one document, whatever the file is called
        if comp is None and _first_line_is_a_request(head, path):
            return "otlp-lines", None, ""
        return "otlp", comp, ""
    importer = importers.detect(head, inner)
    if importer is not None:
        return importer.name, comp, ""
    # a line-delimited file whose first lines are broken (cut, overwritten, not records of
    # the format) is still known by a line after them: the bad lines are then problems with
    # their numbers, and the rest loads
    rest = head.lstrip()
    document = path.suffix.lower() in DOCUMENT_SUFFIXES or path.name in DOCUMENT_NAMES
    if not document and b"\n" not in rest and len(head) >= HEAD_BYTES:
        rest = _after_first_line(path, rest)
    for _ in range(0 if document else RESCAN_LINES):
        _, newline, rest = rest.partition(b"\n")
        rest = rest.lstrip()
        if not newline or not rest:
            break
        if otlp.looks_like_otlp(rest):
            return ("otlp-lines" if comp is None else "otlp"), comp, ""
        importer = importers.detect(rest, inner)
        if importer is not None:
            return importer.name, comp, ""
    stripped = head.lstrip()[:4096]
    for marker, what in ((b'"resourceMetrics"', "OTLP metrics"), (b'"resource_metrics"',
                         "OTLP metrics"), (b'"resourceLogs"', "OTLP logs"),
                         (b'"resource_logs"', "OTLP logs")):
        if marker in head:
            return None, comp, f"{what}, not traces"
    if b"\x00" in stripped:
        return None, comp, UNKNOWN + " (binary)"
    return None, comp, UNKNOWN
