"""Reading a whole trace file, of any format agentscope reads, into records.

The one place that knows which reader reads which format (store/inputs.py decides the
format): the loader uses it for the files it does not stream into DuckDB, and
``agentscope check`` for every file.
"""

from __future__ import annotations

import json
from ..errors import TraceFormatError
from ..formats import compressed, importers, samplefile, spanfile
from . import otlp
from .inputs import Source


def read_whole(src: Source, errors: list) -> tuple:
    """(span records, sample records) of a whole file; problems go to ``errors``."""
    path = str(src.path)
    try:
        data = compressed.read_all(src.path, src.compression)
    except (OSError, compressed.CompressedError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        errors.append(TraceFormatError(path, None, f"cannot read: {reason}"))
        return [], []
    if src.format in ("spans", "samples"):  # our own lines (compressed, or for check)
        fmt = spanfile if src.format == "spans" else samplefile
        out = []
        cut = data.rfind(b"\n") + 1
        if data[cut:].strip():
            errors.append(TraceFormatError(
                path, data.count(b"\n") + 1, "torn last line (no newline: the writer stopped "
                "mid-write or is writing); not loaded", torn=True))
        for number, text in numbered_lines(data[:cut], 0):
            try:
                out.append(fmt.decode(text, path, number))
            except TraceFormatError as e:
                errors.append(e)
        return (out, []) if src.format == "spans" else ([], out)
    if src.format in ("otlp", "otlp-lines"):
        return list(otlp_records(data, path, errors)), []
    importer = importers.by_name(src.format)
    records: list = []
    try:
        for record in importer.read(data, path, errors):
            records.append(record)
    except Exception as e:  # an importer must not raise; if one does, say so and go on
        errors.append(TraceFormatError(path, None, f"{importer.label}: stopped reading after "
                                       f"{len(records)} spans ({type(e).__name__}: {e})"))
    return records, []


def numbered_lines(complete: bytes, lines_before: int, final: bool = False):
    """(line number, text) of the non-blank lines of ``complete`` (whole lines), numbered
    after the ``lines_before`` lines already loaded from the same file; ``final``: the last
    line counts even without its newline (a file read whole)."""
    parts = complete.split(b"\n")
    if not final or not parts[-1].strip():
        parts = parts[:-1]
    for number, raw in enumerate(parts, start=lines_before + 1):
        text = raw.decode("utf-8", errors="replace").strip()
        if text:
            yield number, text


def otlp_records(data: bytes, path: str, errors: list):
    """The spans of an OTLP/JSON file's content: one request, or one request per line. A
    document that is not valid JSON and whose first line is not a complete request either is
    one problem (a truncated or broken document), not one per line."""
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return
    try:
        whole = json.loads(text)
    except ValueError as e:
        whole, problem = None, e
    if whole is not None:
        yield from otlp.spans_of_request(whole, path, None, errors)
        return
    first = text.split("\n", 1)[0].strip()
    try:
        json.loads(first)
    except ValueError:
        what = "truncated" if problem.pos >= len(text) - 1 else "not valid JSON"
        errors.append(TraceFormatError(path, problem.lineno, f"{what}: {problem.msg} at line "
                                       f"{problem.lineno} column {problem.colno}; the document "
                                       "was not loaded"))
        return
    yield from otlp_lines(data, path, 0, errors, final=True)


def otlp_lines(complete: bytes, path: str, lines_before: int, errors: list,
                final: bool = False):
    numbered = list(numbered_lines(complete, lines_before, final))
    last = numbered[-1][0] if numbered else -1
    unterminated = final and not complete.endswith(b"\n")
    for number, text in numbered:
        try:
            request = json.loads(text)
        except ValueError as e:
            torn = unterminated and number == last
            errors.append(TraceFormatError(path, number, ("torn last line; skipped: " if torn
                                                          else "") + f"not valid JSON ({e.msg} "
                                           f"at column {e.colno})", torn=torn))
            continue
        yield from otlp.spans_of_request(request, path, number, errors)
