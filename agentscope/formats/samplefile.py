"""Sample files, format version 1: one counter reading per line.

File names: ``samples-<host>-<pid>-<unix ms>[-<tag>].jsonl`` (:func:`file_name`). Keys are
the fields of :class:`agentscope.records.SampleRecord`. Counters that only grow (``*_total``
style, e.g. the span writer's drop count) are written cumulatively: the latest value is the
total.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii as _q
from typing import Iterator

from ..errors import TraceFormatError
from ..records import SampleRecord, sample_problem
from .lines import NotJSON, iter_lines, strict_loads
from .naming import stem

FILE_PREFIX = "samples-"
FILE_SUFFIX = ".jsonl"


def file_name(host: str, pid: int, ms: int, tag: str | None = None) -> str:
    """``samples-<host>-<pid>-<ms>[-<tag>].jsonl``: process ``pid``'s sample file on ``host``,
    started at ``ms`` (Unix ms); ``tag`` tells apart the writers of one process (the span
    writer: none; a sampler: ``collector``, ``gil``)."""
    return f"{FILE_PREFIX}{stem(host, pid, ms)}{'' if tag is None else f'-{tag}'}{FILE_SUFFIX}"


def _s(value: "str | None") -> str:
    return "null" if value is None else _q(value)


def encode(r: SampleRecord) -> str:
    value = float(r.value)
    v = repr(value) if math.isfinite(value) else "null"
    pid = "null" if r.pid is None else str(int(r.pid))
    return (f'{{"ts_ns":{int(r.ts_ns)},"host":{_s(r.host)},"pid":{pid},"source":{_q(r.source)},'
            f'"device":{_s(r.device)},"metric":{_q(r.metric)},"value":{v}}}\n')


def decode(text: str, path: str = "<string>", line: "int | None" = None) -> SampleRecord:
    """Parse and validate one line; raise :class:`TraceFormatError` naming file, line and why
    (records.sample_problem: a time past its column, a pid past 32 bits, text where a number
    belongs, a number too large for a double)."""
    try:
        obj = strict_loads(text)
    except NotJSON as e:
        raise TraceFormatError(path, line, f"not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(path, line, "expected a JSON object")
    ts, metric = obj.get("ts_ns"), obj.get("metric")
    source, value = obj.get("source"), obj.get("value")
    if type(ts) is not int or ts < 0:
        raise TraceFormatError(path, line,
                               f"ts_ns must be a non-negative integer; got {_show(ts)}")
    if not isinstance(metric, str) or not metric:
        raise TraceFormatError(path, line,
                               f"metric must be a non-empty string; got {_show(metric)}")
    if not isinstance(source, str):
        raise TraceFormatError(path, line, f"source must be a string; got {_show(source)}")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TraceFormatError(path, line, f"value must be a number or null; got {_show(value)}")
    try:
        number = float("nan") if value is None else float(value)
    except OverflowError:
        raise TraceFormatError(path, line, f"value {_show(value)} is too large for a number "
                               "(a double)") from None
    pid = obj.get("pid")
    record = SampleRecord(ts, obj.get("host"), pid if type(pid) is int else None, source,
                          obj.get("device"), metric, number)
    problem = sample_problem(record)
    if problem:
        raise TraceFormatError(path, line, problem)
    return record


def _show(value: object) -> str:
    """A value in a problem's reason, short (see spanfile)."""
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read(path: str, errors: "list[TraceFormatError] | None" = None) -> Iterator[SampleRecord]:
    """Yield the valid samples of one file; bad lines go to ``errors`` (or raise)."""
    for ln in iter_lines(path):
        try:
            yield decode(ln.text, str(path), ln.number)
        except TraceFormatError as e:
            if not ln.terminated:
                e = TraceFormatError(e.path, e.line, "torn last line; skipped: " + e.reason,
                                     torn=True)
            if errors is None:
                raise e from None
            errors.append(e)
