"""Sample files, format version 1: one counter reading per line.

File names: ``samples-<host>-<pid>-<unix ms>[-<tag>].jsonl`` (:func:`file_name`). Keys are
the fields of :class:`agentscope.records.SampleRecord`. Counters that only grow (``*_total``
style, e.g. the span writer's drop count) are written cumulatively: the latest value is the
total.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _q
from typing import Iterator

from ..errors import TraceFormatError
from ..records import SampleRecord
from .lines import iter_lines
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
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise TraceFormatError(path, line, f"not valid JSON ({e.msg}, column {e.colno})") from None
    if not isinstance(obj, dict):
        raise TraceFormatError(path, line, "expected a JSON object")
    ts, metric, source, value = obj.get("ts_ns"), obj.get("metric"), obj.get("source"), obj.get("value")
    if type(ts) is not int or ts < 0:
        raise TraceFormatError(path, line, f"ts_ns must be a non-negative integer; got {ts!r}")
    if not isinstance(metric, str) or not metric:
        raise TraceFormatError(path, line, f"metric must be a non-empty string; got {metric!r}")
    if not isinstance(source, str):
        raise TraceFormatError(path, line, f"source must be a string; got {source!r}")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TraceFormatError(path, line, f"value must be a number or null; got {value!r}")
    pid = obj.get("pid")
    return SampleRecord(ts, obj.get("host"), pid if type(pid) is int else None, source,
                        obj.get("device"), metric, float("nan") if value is None else float(value))


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
