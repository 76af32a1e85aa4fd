"""Reading line-delimited files that a crashed writer may have left torn."""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, NamedTuple


class NotJSON(ValueError):
    """Text that is not one JSON value, and why (a message without the text itself)."""


def _no_constant(name: str) -> Any:
    raise NotJSON(f"{name} is not JSON")


def strict_loads(text: "str | bytes") -> Any:
    """``json.loads`` that takes JSON only: ``NaN`` and ``Infinity`` (which Python's reader
    accepts and DuckDB's refuses) are not numbers, and a value nested deeper than Python's
    recursion allows is a :class:`NotJSON` like any other, not a RecursionError."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise NotJSON("nested too deeply to read") from None
    except json.JSONDecodeError as e:
        raise NotJSON(f"{e.msg}, column {e.colno}") from None
    except NotJSON:
        raise
    except ValueError as e:  # an integer of more digits than Python converts (4300)
        raise NotJSON(str(e).split(";")[0]) from None


class Line(NamedTuple):
    number: int  # 1-based
    text: str
    terminated: bool  # False only for a last line with no newline (a torn write, or EOF)


def iter_lines(path: "str | os.PathLike[str]") -> Iterator[Line]:
    """Yield the non-empty lines of a file, marking an unterminated last line.

    Bytes that are not UTF-8 are replaced (and will then fail to parse as JSON, which the
    caller reports with the line number) instead of stopping the whole file.
    """
    with open(path, "rb") as f:
        number = 0
        for raw in f:
            number += 1
            terminated = raw.endswith(b"\n")
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if text.strip():
                yield Line(number, text, terminated)


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
