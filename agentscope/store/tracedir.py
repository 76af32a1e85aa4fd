"""Reading a trace directory in pure Python, validating every line.

The reader of our own capture files that needs no database: ``agentscope check`` and the
tests use it; the store loads through DuckDB (:mod:`.loading`), whose per-file fallback
validates each line the same way (``formats/``). Bad lines are collected as
:class:`~agentscope.errors.TraceFormatError` (file, line, span, reason); they never stop the
rest from loading.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..errors import TraceFormatError
from ..formats import samplefile, spanfile
from ..records import SampleRecord, SpanRecord


@dataclasses.dataclass
class FileSummary:
    path: str
    kind: str  # "spans" | "samples"
    records: int = 0
    problems: int = 0
    torn: bool = False


@dataclasses.dataclass
class TraceDir:
    spans: list[SpanRecord]
    samples: list[SampleRecord]
    problems: list[TraceFormatError]
    files: list[FileSummary]
    duplicates: int = 0  # spans seen again with the same (trace_id, span_id); first one kept


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


def capture_files(directory: "str | os.PathLike[str]") -> list[tuple[str, Path]]:
    """Our capture files below ``directory`` (recursively), as (kind, path), sorted by path."""
    root = Path(directory)
    found = []
    for path in sorted(root.rglob("*" + spanfile.FILE_SUFFIX)):
        kind = capture_kind(path.name)
        if kind and not hidden(root, path):
            found.append((kind, path))
    return found


def scan(directory: "str | os.PathLike[str]",
         progress: Optional[Callable[[Path], None]] = None) -> TraceDir:
    """Read every capture file of a trace directory. Raises FileNotFoundError if it is missing."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"no such trace directory: {root}")
    result = TraceDir([], [], [], [])
    seen: set = set()
    for kind, path in capture_files(root):
        if progress is not None:
            progress(path)
        errors: list[TraceFormatError] = []
        summary = FileSummary(str(path), kind)
        reader: Callable[..., Iterable] = spanfile.read if kind == "spans" else samplefile.read
        try:
            for record in reader(str(path), errors):
                summary.records += 1
                if kind == "spans":
                    key = (record.trace_id, record.span_id)
                    if key in seen:
                        result.duplicates += 1
                        continue
                    seen.add(key)
                    result.spans.append(record)
                else:
                    result.samples.append(record)
        except OSError as e:
            errors.append(TraceFormatError(str(path), None, f"cannot read: {e}"))
        summary.problems = len(errors)
        summary.torn = any(e.torn for e in errors)
        result.problems.extend(errors)
        result.files.append(summary)
    return result
