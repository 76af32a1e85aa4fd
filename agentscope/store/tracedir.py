"""Reading a trace directory (or one trace file) in pure Python, validating every record.

The reader that needs no database: ``agentscope check`` and the tests use it. It reads every
format the store loads (store/inputs.py finds the files, store/readers.py reads the ones
that are not our own plain capture files), so ``check`` covers what ``analyze`` reads. The
store loads through DuckDB (:mod:`.loading`), whose per-file fallback validates each line the
same way (``formats/``). Bad lines are collected as
:class:`~agentscope.errors.TraceFormatError` (file, line, span, reason); they never stop the
rest from loading.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..errors import TraceFormatError, message_of
from ..formats import samplefile, spanfile
from ..records import SampleRecord, SpanRecord
from .inputs import capture_kind, find, hidden  # noqa: F401  (capture_kind: part of this module's API)


@dataclasses.dataclass
class FileSummary:
    path: str
    kind: str  # "spans" | "samples" | another format's name (store/inputs.py)
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
    skipped: list = dataclasses.field(default_factory=list)  # of inputs.Skipped


def scan(source: "str | os.PathLike[str]",
         progress: Optional[Callable[[Path], None]] = None) -> TraceDir:
    """Read every trace file of a directory, or one file. Raises FileNotFoundError if it is
    missing."""
    from .readers import read_whole

    found, skipped = find(source)
    result = TraceDir([], [], [], [], skipped=list(skipped))
    result.problems.extend(TraceFormatError(str(s.path), None, s.reason) for s in skipped
                           if s.broken)
    seen: set = set()
    for src in found:
        path = src.path
        if progress is not None:
            progress(path)
        errors: list[TraceFormatError] = []
        summary = FileSummary(str(path), src.format)
        try:
            if src.format in ("spans", "samples") and src.compression is None:
                reader: Callable[..., Iterable] = (spanfile.read if src.format == "spans"
                                                   else samplefile.read)
                records = list(reader(str(path), errors))
            else:
                spans, samples = read_whole(src, errors)
                records = spans + samples
        except OSError as e:
            records = []
            errors.append(TraceFormatError(str(path), None, f"cannot read: {e}"))
        except Exception as e:  # noqa: BLE001 - a reader's own failure: named, the rest read
            records = []
            errors.append(TraceFormatError(str(path), None,
                                           f"could not be read ({message_of(e)})"))
        for record in records:
            summary.records += 1
            if isinstance(record, SpanRecord):
                key = (record.trace_id, record.span_id)
                if key in seen:
                    result.duplicates += 1
                    continue
                seen.add(key)
                result.spans.append(record)
            else:
                result.samples.append(record)
        summary.problems = len(errors)
        summary.torn = any(e.torn for e in errors)
        result.problems.extend(errors)
        result.files.append(summary)
    return result
