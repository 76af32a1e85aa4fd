"""Reading line-delimited files that a crashed writer may have left torn."""

from __future__ import annotations

import os
from typing import Iterator, NamedTuple


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
