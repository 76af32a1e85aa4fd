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
    document that is not valid JSON is read as lines when some line of it is a request (a
    Collector file whose first line is broken loses that line only); otherwise it is one
    problem (a truncated or broken document), not one per line."""
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
    if "\n" in text and any(_is_request(line) for line in text.split("\n")[:64]):
        yield from otlp_lines(data, path, 0, errors, final=True)
        return
    if isinstance(problem, RecursionError):
        errors.append(TraceFormatError(path, None, "nested too deeply to read as JSON; the "
                                       "document was not loaded"))
        return
    if isinstance(problem, json.JSONDecodeError):
        what = "truncated" if problem.pos >= len(text) - 1 else "not valid JSON"
        errors.append(TraceFormatError(path, problem.lineno, f"{what}: {problem.msg} at line "
                                       f"{problem.lineno} column {problem.colno}; the document "
                                       "was not loaded"))
    else:  # a number of more digits than Python reads
        errors.append(TraceFormatError(path, None, f"not valid JSON: {str(problem)[:120]}; "
                                       "the document was not loaded"))


def _is_request(line: str) -> bool:
    """Whether a line is one whole OTLP request object (of a Collector file)."""
    line = line.strip()
    if not looks_like_otlp(line[:256].encode("utf-8", "replace")):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def otlp_lines(complete: bytes, path: str, lines_before: int, errors: list,
               final: bool = False):
    """The spans of complete lines of a Collector file (each a request), numbered after
    ``lines_before``; each line that is not one is a problem with its number."""
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
            why = (f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError)
                   else str(e)[:120])
            errors.append(TraceFormatError(path, number, ("torn last line; skipped: " if torn
                                                          else "") + f"not valid JSON ({why})",
                                           torn=torn))
            continue
        yield from spans_of_request(request, path, number, errors)
