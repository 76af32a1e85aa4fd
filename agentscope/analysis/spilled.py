"""The sections of a large analysis in batches held in files rather than in memory.

At 20M spans the results of an analysis hold 7.7M sections: about 0.7 GB of arrays, most of
the memory the analysis takes once a batch's own spans are let go. Above
``core.STORED_WORDS_SPANS`` spans, a store in a file analysed in batches writes each batch's
section arrays to files beside the store as the batch is analysed (:class:`SpilledSections`),
and the analysis' sections are those files mapped into memory (``numpy.memmap``: arrays like
any other, read from the file by the pages that are read). What is read stays in memory
only until :func:`let_go` gives those pages back (after the summary, and after each chunk
the save writes): a report that reads a few tasks' sections reads those pages only.

The files are anonymous (``tempfile.TemporaryFile``: unlinked from the start), so nothing is
left beside the store, whatever ends the process; the disk they take is given back when the
analysis is let go. The names and stages of the sections (Python objects) and what their
words are made from stay in memory, as do the tasks.
"""

from __future__ import annotations

import mmap
import tempfile
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from ..analyzers.evidence import CLASSES
from ..analyzers.results import CODE, JoinedEvidence, Sections, Shares, SpanIds

# the columns written to files: (name, dtype); shares as Shares packs them
_COLUMNS = (("task", np.int64), ("seq", np.int64), ("start_ns", np.int64),
            ("end_ns", np.int64), ("cls", CODE), ("confidence", np.float64), ("basis", CODE),
            ("assumed", np.float64), ("assumed_cls", np.int8))
_PAGE = mmap.PAGESIZE


class SpilledSections:
    """Sections added a batch at a time (:meth:`add`), written to anonymous files in
    ``directory``; :meth:`sections` maps them as one :class:`Sections`. Where a batch's span
    ids are not the fixed-width bytes the others' are (ids of another length, or not ASCII),
    the span ids are held in memory instead, as joining the batches would hold them."""

    def __init__(self, directory: "str | Path") -> None:
        self._dir = str(directory)
        self._files: dict = {}  # name -> (file, dtype, row shape)
        self._n = 0  # sections added
        self._tasks = 0  # tasks added
        self._names: list = []
        self._stages: list = []
        self._more: list = []  # Shares' rows kept whole, by batch
        self._more_rows: list = []
        self._evidence: list = []
        self._ids: Optional[list] = None  # span ids in memory (None: in the file)
        self._assumed = False  # whether any batch assumed anything

    def _write(self, name: str, values: Any, dtype: Any = None) -> None:
        values = np.ascontiguousarray(values, dtype=dtype)
        if name not in self._files:
            self._files[name] = (tempfile.TemporaryFile(dir=self._dir, prefix=".agentscope-"),
                                 values.dtype, values.shape[1:])
        f, kind, shape = self._files[name]
        if values.dtype != kind or values.shape[1:] != shape:
            raise ValueError(f"sections column {name}: {values.dtype}{values.shape[1:]} "
                             f"after {kind}{shape}")
        f.write(values.tobytes())

    def add(self, sections: Sections, tasks: int) -> None:
        """The sections of the next batch (its ``tasks`` tasks: those after the tasks of the
        batches before)."""
        n = len(sections)
        columns = {"task": np.asarray(sections.task, dtype=np.int64) + self._tasks}
        if sections.assumed is not None:
            self._assumed = True
        else:  # (a batch that assumed nothing: none)
            columns["assumed"] = np.zeros(n)
            columns["assumed_cls"] = np.zeros(n, dtype=np.int8)
        for name, dtype in _COLUMNS:
            self._write(name, columns[name] if name in columns else getattr(sections, name),
                        dtype)
        shares = Shares.of(sections.shares)
        self._write("shares_cls", shares.cls, np.int8)
        self._write("shares_val", shares.val, np.float64)
        self._more.append(np.asarray(shares.more, dtype=np.int64) + self._n)
        self._more_rows.append(shares.more_rows)
        self._add_ids(SpanIds.of(sections.span_id))
        self._names.append(np.asarray(sections.name, dtype=object))
        self._stages.append(np.asarray(sections.stage, dtype=object))
        self._evidence.append(sections.evidence)
        self._n += n
        self._tasks += tasks

    def _add_ids(self, ids: SpanIds) -> None:
        values = ids._v
        held = self._files.get("span_id")
        if self._ids is None and values.dtype.kind == "S" and (
                held is None or held[1] == values.dtype):
            self._write("span_id", values)
            return
        if self._ids is None:  # those written so far, back into memory
            self._ids = [SpanIds(self._read("span_id"))] if held is not None else []
        self._ids.append(ids)

    def _read(self, name: str) -> np.ndarray:
        f, kind, shape = self._files.pop(name)
        with f:
            f.seek(0)
            return np.frombuffer(f.read(), dtype=kind).reshape((-1, *shape)).copy()

    def sections(self) -> Sections:
        """Every section added, its arrays read from the files (mapped; the files are closed
        here, and their disk given back once the arrays are let go)."""
        mapped = {name: self._mapped(name) for name in list(self._files)}
        if "span_id" in mapped:
            ids = SpanIds(mapped.pop("span_id"))
        else:
            ids = SpanIds.joined(self._ids or [])
        shares = Shares(mapped.pop("shares_cls", np.zeros((0, 2), dtype=np.int8)),
                        mapped.pop("shares_val", np.zeros((0, 2))),
                        _joined(self._more, np.int64),
                        _joined(self._more_rows, np.float64, (0, len(CLASSES))))
        empty = {name: np.zeros(0, dtype=dtype) for name, dtype in _COLUMNS}
        col = {name: mapped.get(name, empty[name]) for name, _ in _COLUMNS}
        # (each batch's names and stages let go once joined: else held twice while the
        # analysis lasts, at 20M spans 116 MB)
        names, self._names = _joined(self._names, object), []
        stages, self._stages = _joined(self._stages, object), []
        return Sections(col["task"], col["seq"], ids, names, stages, col["start_ns"], col["end_ns"],
                        col["cls"], col["confidence"], shares, JoinedEvidence(self._evidence),
                        col["basis"], *((col["assumed"], col["assumed_cls"]) if self._assumed
                                        else (None, None)))

    def _mapped(self, name: str) -> np.ndarray:
        f, kind, shape = self._files.pop(name)
        with f:
            f.flush()
            if not self._n:
                return np.zeros((0, *shape), dtype=kind)
            return np.memmap(f, dtype=kind, mode="r", shape=(self._n, *shape))

    def close(self) -> None:
        """Close the files not mapped (an analysis that stopped part way)."""
        for f, _, _ in self._files.values():
            f.close()
        self._files.clear()


def _joined(parts: list, dtype: Any, empty_shape: tuple = (0,)) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(empty_shape, dtype=dtype)


def _maps(sections: Sections) -> Iterator[np.ndarray]:
    """The arrays of ``sections`` that are files mapped (:class:`SpilledSections`)."""
    values = [getattr(sections, name, None) for name, _ in _COLUMNS]
    values += [getattr(sections.span_id, "_v", None), getattr(sections.shares, "cls", None),
               getattr(sections.shares, "val", None)]
    for value in values:
        if isinstance(value, np.memmap) and getattr(value, "_mmap", None) is not None:
            yield value


def let_go(sections: Sections, lo: int = 0, hi: Optional[int] = None) -> None:
    """Give back the pages of sections ``lo`` .. ``hi`` - 1 read from their files (they are
    read from the file again when needed); nothing for sections held in memory."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    for array in _maps(sections):
        row = array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
        size = len(array._mmap)
        start = (lo * row) // _PAGE * _PAGE
        end = size if hi is None else min(size, hi * row)
        if end > start:
            array._mmap.madvise(mmap.MADV_DONTNEED, start, end - start)
