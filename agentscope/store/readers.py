"""Reading a whole trace file, of any format agentscope reads, into records.

The one place that knows which reader reads which format (store/inputs.py decides the
format): the loader uses it for the files it does not stream into DuckDB, and
``agentscope check`` for every file.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from ..errors import TraceFormatError
from ..formats import compressed, importers, samplefile, spanfile
from ..formats.importers import otlp_proto
from ..formats.lines import numbered_lines
from ..records import SpanRecord, span_problem
from .inputs import Source
from .otlp import otlp_records


def read_whole(src: Source, errors: list) -> tuple:
    """(span records, sample records) of a whole file; problems go to ``errors``."""
    path = str(src.path)
    try:
        data = compressed.read_all(src.path, src.compression)
    except (OSError, compressed.CompressedError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        errors.append(TraceFormatError(path, None, f"cannot read: {reason}"))
        return [], []
    records: list = []
    try:
        if src.format in ("spans", "samples"):  # our own lines (compressed, or for check)
            return _ours(src.format, data, path, errors)
        if src.format in ("otlp", "otlp-lines"):
            reader = otlp_records(data, path, errors)  # (checked: otlp_common.record)
        elif src.format == otlp_proto.IMPORTER.name:
            reader = otlp_proto.read(data, path, errors)  # (likewise)
        else:
            reader = checked(importers.by_name(src.format).read(data, path, errors), path,
                             errors)
        for record in reader:
            records.append(record)
    except RecursionError:  # a reader walking nesting deeper than Python allows
        errors.append(TraceFormatError(path, None, f"{_label(src.format)}: nested too deeply "
                                       f"to read; stopped after {len(records)} spans"))
    except Exception as e:  # a reader must not raise; if one does, say so and go on
        errors.append(TraceFormatError(path, None, f"{_label(src.format)}: stopped reading "
                                       f"after {len(records)} spans ({type(e).__name__}: {e})"))
    return records, []


def checked(records: Iterable[SpanRecord], path: str, errors: list) -> Iterator[SpanRecord]:
    """The records a reader gave that the store can take (records.span_problem); each other
    one is a problem naming the file and the span. Readers check what they can with its line
    or record first; this is the same rule for all of them, and so for ``check`` and the
    store alike (a span is loaded exactly when ``check`` does not name it)."""
    for r in records:
        problem = span_problem(r)
        if problem is None:
            yield r
            continue
        name = r.name if isinstance(r.name, str) else ""
        sid = r.span_id if isinstance(r.span_id, str) and len(r.span_id) <= 64 else None
        errors.append(TraceFormatError(path, None, f"span {name[:60]!r}: {problem}",
                                       span_id=sid))


def _label(fmt: str) -> str:
    try:
        return importers.by_name(fmt).label
    except KeyError:
        return fmt


def _ours(fmt: str, data: bytes, path: str, errors: list) -> tuple:
    """Our span or sample lines, from a file read whole."""
    reader = spanfile if fmt == "spans" else samplefile
    out = []
    cut = data.rfind(b"\n") + 1
    if data[cut:].strip():
        errors.append(TraceFormatError(
            path, data.count(b"\n") + 1, "torn last line (no newline: the writer stopped "
            "mid-write or is writing); not loaded", torn=True))
    for number, text in numbered_lines(data[:cut], 0):
        try:
            out.append(reader.decode(text, path, number))
        except TraceFormatError as e:
            errors.append(e)
    return (out, []) if fmt == "spans" else ([], out)
