"""OTLP/JSON trace files: a single ExportTraceServiceRequest, or the OpenTelemetry Collector
file exporter's one-request-per-line files. Parsed into :class:`SpanRecord`.

The mapping of a request to records (field names in camelCase or snake_case, hex or base64
ids, agentscope's accounting attributes back into columns, ``agentscope.analysis.*`` dropped)
is :mod:`agentscope.formats.otlp_common`'s, shared with the protobuf importer and the live
receiver; this module reads the files.
"""

from __future__ import annotations

import json
import re
from typing import Iterator

from ..errors import TraceFormatError
from ..formats.lines import numbered_lines
from ..formats.otlp_common import attributes, spans_of_request, value_of
from ..records import SpanRecord

__all__ = ["attributes", "looks_like_otlp", "read", "spans_of_request", "value_of"]


# an ExportTraceServiceRequest (or TracesData) has one field: it is the first key (another
# tool's export that holds an OTLP request somewhere inside is not one)
_OTLP_START = re.compile(rb'\A\s*(?:\xef\xbb\xbf)?\{\s*"resource(?:Spans|_spans)"\s*:')


def looks_like_otlp(head: bytes) -> bool:
    """Whether the first bytes of a file are an OTLP/JSON traces request."""
    return _OTLP_START.match(head) is not None


def read(path: str, errors: list) -> Iterator[SpanRecord]:
    """Spans of an OTLP/JSON file: one request, or one request per line."""
    with open(path, "rb") as f:
        data = f.read()
    yield from otlp_records(data, path, errors)


def otlp_records(data: bytes, path: str, errors: list):
    """The spans of an OTLP/JSON file's content: one request, or one request per line. A
    document that is not valid JSON and whose first line is not a complete request either is
    one problem (a truncated or broken document), not one per line."""
    text = data.decode("utf-8", errors="replace").strip().lstrip("\ufeff")
    if not text:
        return
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError) as e:
        whole, problem = None, e
    if whole is not None:
        yield from spans_of_request(whole, path, None, errors)
        return
    if isinstance(problem, RecursionError):
        errors.append(TraceFormatError(path, None, "nested too deeply to read as JSON; the "
                                       "document was not loaded"))
        return
    first = text.split("\n", 1)[0].strip()
    try:
        json.loads(first)
    except (ValueError, RecursionError):
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
        except RecursionError:
            errors.append(TraceFormatError(path, number, "nested too deeply to read as JSON"))
            continue
        except ValueError as e:
            torn = unterminated and number == last
            errors.append(TraceFormatError(path, number, ("torn last line; skipped: " if torn
                                                          else "") + f"not valid JSON ({e.msg} "
                                           f"at column {e.colno})", torn=torn))
            continue
        yield from spans_of_request(request, path, number, errors)
