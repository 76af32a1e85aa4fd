"""``analyze()``: load a trace directory into its store, analyse it, save the results, and
return them as one :class:`Analysis`."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import numpy as np

from .. import urls
from .._gc import gc_paused
from ..analyzers import engine
from ..analyzers.counters import MAX_HOLD_NS, METRICS, gpu_summary
from ..analyzers.evidence import BASES, CLASSES
from ..analyzers.results import Fleet, Sections, SpanIds, Summary
from ..analyzers.verdict import breakdown, guess_warning
from ..store import clickhouse
from ..store.duckdb_store import Store
from ..store.inputs import Source
from ..store.loading import LoadReport
from ..store.user_sql import UserSQL, check_statement
from ..store.schema import DEFAULT_DB, MEMORY
from .spilled import SpilledSections, let_go
from .stored import drop_stored, fleet_state, saved_fleet, stored_part

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from ..analyzers.whatif import Prediction

# (bytes read so far, bytes in all): called as the files of a directory are loaded
Progress = Callable[[int, int], None]


def analyze(source: "str | os.PathLike[str]", db: "str | os.PathLike[str] | None" = None, *,
            progress: Optional[Progress] = None, batch: bool = False,
            previous: "Optional[Analysis]" = None,
            analysis_progress: Optional[Progress] = None) -> "Analysis":
    """Load what is new in ``source`` into its store, analyse every task in it, save the
    results there (the ``tasks`` and ``critical_path`` views) and return them.

    ``source``: a trace directory (every trace file below it, in any format agentscope reads,
    detected by content: docs/file-formats.md), a single trace file, or a ClickHouse URL
    (docs/clickhouse.md; with ``?input=clickhouse`` the window is analysed over the input
    ClickHouse computes, and its spans are read into the store only when something asks for
    them).
    ``db``: the DuckDB file [default: ``SOURCE/.agentscope/agentscope.duckdb`` for a directory,
    in memory for a single file, for a directory with no trace file, and, with a warning, for
    one where ``.agentscope/`` cannot be made]; ``":memory:"`` keeps the store in memory (call
    :meth:`Analysis.close` when done with it).
    ``progress(done_bytes, total_bytes)`` is called as files are read, and
    ``analysis_progress(done, batches)`` as a store of more than 250k spans, analysed in
    batches of whole traces, finishes each (over ClickHouse's input: each part). ``batch``:
    tune this process for one large analysis that ends soon (the CLI does): freed memory is
    kept for reuse rather than given back to the OS and faulted in again (glibc), and DuckDB
    keeps up to 1 GB of its freed blocks. ``previous``: an earlier analysis of the same store (a
    file): only the traces that what was loaded since touched (new spans, or new counter
    samples over their time) are analysed again, and merged into it; the same results as a
    fresh analysis (where no trace's analysis reads another's spans; otherwise, or when
    the store changed otherwise, all are analysed). ``agentscope serve`` does this. Without
    ``previous``, the analysis the store saved last is built on the same way (when this
    version of agentscope made it): with nothing loaded since, it is returned as it was,
    and its sections' evidence in words is made again from the store when first read
    (docs/analysis.md). :attr:`Analysis.traces_analysed` says how many traces this call
    analysed.

    Raises FileNotFoundError if ``source`` does not exist, StoreError if the store cannot be
    opened (StoreLockedError: another process still held it after a wait of a few seconds,
    store/connect.py). Bad input never raises: each problem is in :attr:`Analysis.problems`
    with its file and line, files in no known format are named in :attr:`Analysis.warnings`,
    and the rest is analysed.
    """
    remote = urls.parse(source) if urls.is_url(source) else None
    if remote is not None:  # (?input=clickhouse: over ClickHouse's input)
        over_input = remote.input == "clickhouse"
        store, load, notes = _load_clickhouse(remote, db, progress, batch, over_input)
        remote = remote if over_input else None
    else:
        store, load, notes = _load(source, db, progress, batch)
    try:
        analysis = _analyse(store, load, _name(source), notes, previous=previous,
                            remote=remote, analysis_progress=analysis_progress)
    except BaseException:
        _discard(store)
        raise
    if store.path is not None:  # reopened read-only when asked for more
        store.close()
    return analysis


def open_store(source: "str | os.PathLike[str]", db: "str | os.PathLike[str] | None" = None,
               *, progress: Optional[Progress] = None, batch: bool = False,
               analysis_progress: Optional[Progress] = None) -> "StoredAnalysis":
    """The store of ``source`` made current, for SQL (what ``agentscope query`` reads): load
    what is new, and analyse again only when the store holds no current analysis, one saved
    from what it holds now (the same loaded files, read as far; made by this version of
    agentscope). A second query of an unchanged directory reads the saved ``tasks`` and
    ``critical_path`` views instead of analysing every task again. Arguments, defaults and
    errors as :func:`analyze`; returns a :class:`StoredAnalysis` (``.query(sql)``)."""
    store, load, notes = _load(source, db, progress, batch)
    try:
        saved = store.saved_analysis()
        if saved is None:
            analysis = _analyse(store, load, _name(source), notes,
                                analysis_progress=analysis_progress)
            tasks, warnings = len(analysis.task_results), analysis.warnings
            del analysis  # its results are in the store; this needs none of them
        else:
            tasks = saved["tasks"]
            warnings = tuple(notes) + tuple(saved["warnings"]) + tuple(
                _load_warnings(store, load, _name(source), tasks))
    except BaseException:
        _discard(store)
        raise
    ref = _StoreRef(store)
    if store.path is not None:
        store.close()
    return StoredAnalysis(_name(source), tasks, load, warnings, saved is None, ref)


def _name(source: "str | os.PathLike[str]") -> str:
    """What outputs call ``source`` (a ClickHouse URL without its password)."""
    return urls.parse(source).display if urls.is_url(source) else str(source)


def _load(source: "str | os.PathLike[str]", db: "str | os.PathLike[str] | None",
          progress: Optional[Progress], batch: bool) -> tuple:
    """(the store of ``source``, open; what loading what is new did; warnings about the
    store): the first half of :func:`analyze` and :func:`open_store`."""
    if urls.is_url(source):
        return _load_clickhouse(urls.parse(source), db, progress, batch)
    root = Path(source)
    if root.is_file():
        db = MEMORY if db is None else db
    elif not root.is_dir():
        raise FileNotFoundError(f"no such trace directory or file: {source}")
    if batch:
        _keep_freed_memory()
    found = Store.sources(root)
    store, notes = _open_store(root, db, found, batch)
    try:
        update = None
        if progress is not None:
            total = sum(s.path.stat().st_size for s in found[0])
            done = [0]

            def update(n: int) -> None:
                done[0] += n
                progress(done[0], total)

        load = store.load(root, progress=update, found=found)
    except BaseException:
        store.close()
        raise
    return store, load, notes


# spans of a ClickHouse window above which the store that holds them (when no db= names one)
# is a temporary file rather than memory: at 5M spans 2.7 GB instead of 3.8 GB, for up to 10 %
# more time (benchmarks/RESULTS.md); below, memory is the faster
FILE_STORE_SPANS = 1_000_000


def _load_clickhouse(remote: "urls.Remote", db: "str | os.PathLike[str] | None",
                     progress: Optional[Progress], batch: bool,
                     over_input: bool = False) -> tuple:
    """:func:`_load` of a ClickHouse source: its spans (whole traces in its window) and the
    samples over their time, read as Parquet files of the span and sample files' fields
    (``Source.parquet``) and loaded into the store (``db``; default: in memory, or, for a
    window of more than :data:`FILE_STORE_SPANS` spans, a temporary file removed with the last
    analysis that reads it). A problem names the URL and the row (its number in what was
    read). ``over_input``: the spans are not read, only the rows the store refuses (for their
    problems): the analysis is to run over ClickHouse's input (:func:`_analyse`), and the
    store (a temporary file by default) reads the spans when first asked
    (:func:`_read_spans`)."""
    with tempfile.TemporaryDirectory(prefix="agentscope-clickhouse-") as tmp:
        spans, _ = clickhouse.read_into(remote, Path(tmp),
                                        spans="refused" if over_input else "all")
        temporary = None
        if db is None and (spans > FILE_STORE_SPANS or over_input):
            temporary = tempfile.TemporaryDirectory(prefix="agentscope-store-")
            db = Path(temporary.name) / "store.duckdb"
        store = Store(MEMORY if db is None else db, keep_freed_blocks=batch)
        store.temporary = temporary
        # (an empty file: nothing was selected)
        found = [Source(Path(tmp) / name, read.rel, read.format, parquet=True)
                 for name, read in clickhouse.FILES.items()
                 if (Path(tmp) / name).exists() and (Path(tmp) / name).stat().st_size]
        try:
            load = store.load(Path(tmp), progress=None if progress is None else
                              (lambda n: progress(n, n)), found=(found, []),
                              repeats_by=clickhouse.REPEATS_BY)
        except BaseException:
            _discard(store)
            raise
        # a problem names the URL and the row, not the file the rows passed through
        labels = {str(Path(tmp) / name): f"{remote.display} ({read.rows})"
                  for name, read in clickhouse.FILES.items()}
        store.relabel_problems(labels)
        for problem in load.problems:
            problem.path = labels.get(problem.path, problem.path)
    return store, load, []


def _read_spans(remote: "urls.Remote") -> Callable[[Store], None]:
    """What reads ``remote``'s spans into a store that :func:`_load_clickhouse` made for an
    analysis over ClickHouse's input (those rows replace the refused ones read before; the
    samples are there already)."""
    def fill(store: Store) -> None:
        with tempfile.TemporaryDirectory(prefix="agentscope-clickhouse-") as tmp:
            clickhouse.read_into(remote, Path(tmp), samples=False)
            name, read = next(iter(clickhouse.FILES.items()))
            path = Path(tmp) / name
            if not path.exists() or not path.stat().st_size:
                return
            store.load(Path(tmp), found=([Source(path, read.rel, read.format, parquet=True)],
                                         []), repeats_by=clickhouse.REPEATS_BY)
            store.relabel_problems({str(path): f"{remote.display} ({read.rows})"})
    return fill


def _discard(store: Store) -> None:
    """Close ``store`` that no analysis will read (a temporary one removed too)."""
    store.close()
    if store.temporary is not None:
        store.temporary.cleanup()


SKIPPED_NAMED = 5  # skipped files named in the warning (the rest are counted)


def _open_store(root: Path, db: "str | os.PathLike[str] | None", found: tuple,
                batch: bool) -> tuple:
    """(the store, warnings about it). The default store of a directory is its
    ``.agentscope/``; a directory with no trace file (and no store yet) gets none (nothing to
    keep: it is analysed in memory), and one where it cannot be made (read-only, not ours to
    write) is analysed in memory, with a warning naming ``--db``."""
    if db is not None or not root.is_dir():
        return Store.for_trace_dir(root, db, keep_freed_blocks=batch), []
    default = root / DEFAULT_DB
    if not found[0] and not default.exists():
        return Store(MEMORY, keep_freed_blocks=batch), []
    try:
        return Store.for_trace_dir(root, None, keep_freed_blocks=batch), []
    except OSError as e:  # read-only, no permission, a file named .agentscope
        why = e.strerror or str(e)
        return Store(MEMORY, keep_freed_blocks=batch), [
            f"cannot keep the store in {default.parent} ({why}): analysed in memory, so the "
            "next run reads every file again; --db FILE (db= in Python) keeps it elsewhere"]


def source_state(source: "str | os.PathLike[str]") -> tuple:
    """The loadable files of a trace directory and their sizes; of a ClickHouse URL, the
    count and latest time of the rows its window reads (:func:`.clickhouse.window_state`):
    when this has not changed, an analysis of it would find nothing new."""
    if urls.is_url(source):
        return clickhouse.window_state(urls.parse(source))
    found, _ = Store.sources(source)
    return tuple(sorted((str(s.path), s.path.stat().st_size) for s in found))


# spans analysed at a time: a larger store is analysed in batches of whole traces (where no
# trace's analysis reads another's spans), so that memory holds one batch's spans, not all.
# A batch's analysis input (store/sql/analysis_input.sql) takes about 1 GB of DuckDB's and
# Python's memory for 500k spans, in proportion to its spans; each batch is a statement of
# its own (in a store of 2M spans or more, kept in trace-id order, it reads its own row
# groups only), so much smaller batches cost time (measured: the peak
# at 1M / 5M spans 1.44 / 1.99 GB with 500k, 1.19 / 1.73 GB with 250k, in the same time;
# at 20M, `analyze DIR` as fast, the chdb path 9-15 % slower, for 0.25-0.35 GB less; 125k:
# at 20M, `analyze DIR` 8 % slower; benchmarks/RESULTS.md)
BATCH_SPANS = 250_000
# ... with the sections held in files (above STORED_WORDS_SPANS spans, a store in a file),
# where a batch's DuckDB statement is most of what memory holds beside the tasks (about
# 1.7 KB a span while it runs): at 20M spans from ClickHouse, the batches' peak 1.28 GB
# against 1.45 GB with 250k, and 1.25 GB with 125k, 4-6 s (5-8 %) slower
SPILLED_BATCH_SPANS = 175_000
# spans of a part of ClickHouse's input (`input=clickhouse`): ClickHouse computes a part in
# statements of its own, about 1 s for 500k spans here, and smaller parts cost more of them
# (at 5M spans, 250k: 31.8 s against 30.9 s, in the same memory)
INPUT_PART_SPANS = 500_000
# above this many spans, a batched analysis of a store in a file keeps nothing its sections'
# words are made of (about 60 bytes a span: 1.1 GB at 20M) and makes them again from the
# store when read; below, it keeps them: reading every section's words (--format json)
# then costs no second analysis (at 1M spans 6.1 s against 8.1 s)
STORED_WORDS_SPANS = 5_000_000


def _analyse(store: Store, load: LoadReport, source: str,
             notes: Sequence[str] = (), batch_spans: Optional[int] = None,
             previous: "Optional[Analysis]" = None,
             remote: "Optional[urls.Remote]" = None,
             analysis_progress: Optional[Progress] = None) -> "Analysis":
    """The analysis of what ``store`` holds; with ``remote``, of that ClickHouse window, whose
    spans ``store`` does not hold (its samples and the rows it refused only:
    :func:`_load_clickhouse` with ``over_input``): their input is computed in ClickHouse,
    a part at a time, and the spans are read into ``store`` only when something asks for
    them (:class:`_StoreRef`)."""
    series = store.counter_series(METRICS)
    trees = store.process_trees()
    counted = series is not None or trees is not None
    lags = store.loop_lags() if series is not None else None
    # (over ClickHouse's input, its window's rows say whether traces are coupled)
    separate = trees is None and (remote is not None or not store.coupled_traces())
    marks = store.marks()
    touched = fresh = before = ref = None
    if remote is not None:
        pass  # (each analysis of a window reads it whole)
    elif (previous is not None and separate and previous._marks is not None
            and store.path is not None and previous._store.path == store.path
            and store.saved_marks() == previous._marks):
        touched = store.touched_traces(previous._marks, METRICS, MAX_HOLD_NS)
        if touched is not None:
            before = Fleet(previous.task_results, previous.sections, previous.summary,
                           previous._fleet_warnings)
    elif previous is None and separate and store.path is not None:
        before, touched = _saved(store, counted)
    with gc_paused():
        if touched is not None and not touched and store.saved_analysis() is not None:
            fleet = before  # nothing new: the analysis saved is the answer (not saved again)
        elif touched is not None:  # only the traces touched since the previous analysis
            drop_stored(before.sections.evidence, touched)
            if touched:
                fresh = engine.analyze(store.analysis_input(with_counters=counted,
                                                            traces=touched),
                                       series, lags, trees)
                fresh.sections.evidence.settle()  # (or each refresh keeps its spans' figures)
            else:
                fresh = engine.part(before, 0, 0)
            fleet = engine.merged(before, fresh, touched)
        elif remote is not None:
            counts: dict = {}
            fleet = _fleet(clickhouse.analysis_inputs(
                remote, counted, batch_spans or INPUT_PART_SPANS, None if separate else 1, counts),
                series, lags, trees, settle=True, in_order=False,
                empty=lambda: store.analysis_input(with_counters=counted),
                done=None if analysis_progress is None else
                (lambda k: analysis_progress(k, counts.get("parts", k))))
            load = _with_input_counts(load, counts)
        else:
            spilled = separate and store.path is not None and marks[0] > STORED_WORDS_SPANS
            batches = store.trace_batches(batch_spans or (
                SPILLED_BATCH_SPANS if spilled else BATCH_SPANS)) if separate \
                else [(None, None)]
            several = len(batches) > 1
            stored = spill = None
            if several and spilled:
                # each batch's evidence in words made again from the store when read, rather
                # than its spans' figures kept (a store in memory is not read again: settled),
                # and its sections' arrays written to files beside the store
                ref = _StoreRef(store)
                ends = iter([hi for _, hi in batches])
                spill = SpilledSections(store.path.parent)

                def stored(part: Fleet) -> Fleet:
                    return stored_part(part, ref, marks, counted, next(ends))
            # (once every batch is read, DuckDB's cache of the store's file goes: at 20M
            # spans 1.5 GB held while the batches are joined and saved. Held to 1 GB while
            # the batches are read (a trial), DuckDB saved 0.13 GB there and took 8 s more at
            # 20M spans: each batch's statement then spills)
            def inputs() -> Iterator:
                for traces in batches:
                    if spill is not None:  # (what the batches before read: none reads it again)
                        store.release_cache()
                    yield store.analysis_input(with_counters=counted, traces=traces)

            try:
                fleet = _fleet(inputs(), series, lags, trees, several,
                               read=store.release_cache if several else None, stored=stored,
                               done=None if analysis_progress is None or not several else
                               (lambda k: analysis_progress(k, len(batches))), spill=spill)
            finally:
                if spill is not None:
                    spill.close()
        own = list(fleet.warnings)
        guessed = guess_warning(fleet.summary)
        if guessed:
            own.append(guessed)
        if fleet is not before:  # (else the analysis saved is this one)
            # an incremental analysis saves only the rows of the traces analysed again
            redone, rows = (touched, fresh) if fresh is not None else (None, fleet)
            store.save_analysis(_task_chunks(rows), _section_chunks(rows), own, redone,
                                marks, fleet_state(fleet))
    gpu = gpu_summary(store.gpu_idle()) if series is not None else None
    problems = tuple(store.problems())
    summary = dataclasses.replace(
        fleet.summary, gpu=gpu, input_problems=len(problems),
        load={"files_loaded": load.files_loaded, "files_unchanged": load.files_unchanged,
              "spans_added": load.spans_added, "duplicates": load.duplicates})
    warnings = list(notes) + own + _load_warnings(store, load, source, len(fleet.tasks))
    analysed = len(fleet.tasks) if touched is None else len(touched)
    if ref is None:
        ref = _StoreRef(store, None if remote is None else _read_spans(remote))
    return Analysis(source, fleet.tasks, fleet.sections, summary, problems, load,
                    tuple(warnings), ref, marks, fleet.warnings, analysed)


def _saved(store: Store, counted: bool) -> tuple:
    """(the analysis the store saved, restored; the traces touched since it was made), or
    (None, None) when there is none to build on."""
    marks = store.saved_marks()
    touched = None if marks is None else store.touched_traces(marks, METRICS, MAX_HOLD_NS)
    saved = None if touched is None else saved_fleet(store, _StoreRef(store), counted, marks)
    return (None, None) if saved is None else (saved, touched)


def _fleet(inputs: Any, series: Any, lags: Any, trees: Any, settle: bool,
           in_order: bool = True, empty: Any = None, read: Any = None,
           stored: Any = None, done: Any = None,
           spill: "Optional[SpilledSections]" = None) -> Fleet:
    """Every trace of ``inputs`` (AnalysisInputs: batches of traces in trace order, or, not
    ``in_order``, parts in any order) analysed a part at a time, and the parts joined.
    ``settle`` (where there are several parts, or may be): each part's evidence made and its
    spans let go before the next is read; ``stored``, instead: a part -> the same with its
    evidence made again from the store (:func:`.stored.stored_part`). ``empty``: the input
    to analyse where ``inputs`` yields none. ``read``: called once every input is read
    (before the parts are joined). ``done(k)``: called as the k-th part is analysed.
    ``spill`` (parts in order): each part's sections written there as it is made, and the
    analysis' sections read from it (:mod:`.spilled`)."""
    parts = []
    for inp in inputs:
        part = engine.analyze(inp, series, lags, trees)
        del inp
        if stored is not None:
            part = stored(part)  # (the old sections, and every span of the part, let go)
        elif settle:
            part.sections.evidence.settle()  # (what holds every span of the part)
        if spill is not None:
            spill.add(part.sections, len(part.tasks))
            part = dataclasses.replace(part, tasks=engine.repointed(part.tasks, None),
                                       sections=None)
        parts.append(part)
        if done is not None:
            done(len(parts))
    if read is not None:
        read()
    if not parts:
        return engine.analyze(empty(), series, lags, trees)
    if spill is not None:
        return _from_files(parts, spill.sections())
    if len(parts) == 1:
        return parts[0]
    return engine.joined(parts) if in_order else engine.in_trace_order(parts)


def _from_files(parts: list, sections: Sections) -> Fleet:
    """The parts (their sections written to files: ``sections``, mapped; their tasks'
    segments pointed at none) as one fleet; the pages of the files its summary read given
    back."""
    fleet = engine.over(parts, sections)
    let_go(sections)
    return fleet


def _with_input_counts(load: LoadReport, counts: dict) -> LoadReport:
    """The load report of a window analysed over ClickHouse's input, as reading its spans
    into the store would have made it: its spans added, and the rows of a span id already
    seen counted as duplicates (``counts``, as :func:`.clickhouse.analysis_inputs` fills
    it). The file of span rows is counted already: its refused rows were loaded."""
    spans, rows = counts.get("spans", 0), counts.get("rows", 0)
    return dataclasses.replace(load, spans_added=load.spans_added + spans,
                               duplicates=load.duplicates + rows - spans)


def _load_warnings(store: Store, load: LoadReport, source: str, tasks: int) -> list:
    """What a load says besides its problems: files skipped, no trace files, samples but no
    spans."""
    warnings = []
    loud = [s for s in load.skipped if not s.quiet and not s.broken]  # broken: a problem
    if loud:
        named = ", ".join(f"{s.rel} ({s.reason})" for s in loud[:SKIPPED_NAMED])
        more = len(loud) - SKIPPED_NAMED
        warnings.append(f"skipped {len(loud)} file{'s' if len(loud) > 1 else ''} in no trace "
                        f"format agentscope reads: {named}"
                        + (f" and {more} more" if more > 0 else "")
                        + "; agentscope check lists them")
    if load.files_seen == 0:
        warnings.append(f"no trace files in {source} (agentscope reads its own capture files, "
                        "OTLP JSON/protobuf, Jaeger, Langfuse, any-agent, Phoenix and TraceLab "
                        "traces, gzip/zstd of any: docs/file-formats.md); record some with "
                        "agentscope.init(...)")
    elif not tasks:
        samples = store.sample_count()
        if samples:
            warnings.append(f"{source} has {samples} counter samples but no spans: run the "
                            "agent with agentscope.init() (or under `agentscope run`) to "
                            "record its tasks")
    return warnings


class _StoreRef:
    """How an analysis reaches its store again: its file, opened read-only for each use, or,
    for a store in memory, the open store itself (until closed; a temporary file is removed
    then)."""

    def __init__(self, store: Store, fill: "Optional[Callable[[Store], None]]" = None) -> None:
        self.path = store.path
        self.store = store if store.path is None else None
        # a temporary store's directory: removed at close(), or when the last analysis that
        # reads it is let go
        self.temporary = store.temporary
        # what puts the spans into a store that holds none yet (an analysis over ClickHouse's
        # input): run once, before the store is first read
        self._fill = fill
        self._filling = threading.Lock()

    def _filled(self) -> None:
        with self._filling:
            if self._fill is None:
                return
            if self.path is None:
                if self.store is None:
                    raise ValueError("this analysis' store was closed (Analysis.close())")
                self._fill(self.store)
            else:
                store = Store(self.path)
                try:
                    self._fill(store)
                finally:
                    store.close()
            self._fill = None

    @contextlib.contextmanager
    def open(self, spans: bool = True) -> Iterator[Store]:
        """The store, to read (``spans``: its spans too, which are read into it first where
        it holds none yet; without: its samples and results only)."""
        if spans:
            self._filled()
        if self.path is None:
            if self.store is None:
                raise ValueError("this analysis' store was closed (Analysis.close())")
            yield self.store
            return
        store = Store(self.path, read_only=True)
        try:
            yield store
        finally:
            store.close()

    def read(self, statement: str, frame: bool) -> object:
        """A user's statement (:meth:`Store.read`): a store in a file is opened for it alone,
        read-only and locked down (store/user_sql.py); one in memory reads its copy."""
        self._filled()
        if self.path is None:
            if self.store is None:
                raise ValueError("this analysis' store was closed (Analysis.close())")
            return self.store.read(statement, frame)
        check_statement(statement)  # before the file is opened (or waited for)
        with UserSQL.on_file(self.path) as user:
            return user.read(statement, frame)

    def close(self) -> None:
        # (after a fill under way: it writes into the store this removes)
        with self._filling:
            if self.store is not None:
                self.store.close()
                self.store = None
            if self.temporary is not None:
                self.temporary.cleanup()
                self.path = None  # (reading it now: "closed", as a store in memory)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Analysis:
    """One analysis of a trace directory (see :func:`analyze`).

    * :attr:`tasks`, :attr:`critical_path`: pandas DataFrames, one row per task and per
      critical-path section (the JSON report's fields; columns in docs/analysis.md);
    * :attr:`summary`: the fleet figures (:class:`~agentscope.analyzers.results.Summary`);
    * :attr:`problems`: input problems, each with its file and line;
    * :meth:`query`: read-only SQL over the store; :meth:`to_json`: the
      ``agentscope.analysis/v1`` document, as ``agentscope analyze --format json`` prints it;
    * :attr:`task_results`, :attr:`sections`: the same results as records and arrays, for
      code that walks them (the exporters).
    """

    source: str
    task_results: tuple  # of TaskResult, in trace order
    sections: Sections  # every critical-path section, tasks' sections contiguous
    summary: Summary
    problems: tuple  # of agentscope.errors.TraceFormatError
    load: Optional[LoadReport]  # what this analysis' load did
    warnings: tuple  # why there is nothing to report, when there is nothing
    _store: _StoreRef = dataclasses.field(repr=False)
    # where the store stood when this was made (Store.marks): what analyze(previous=) reads
    _marks: Optional[tuple] = dataclasses.field(default=None, repr=False)
    # the engine's own warnings (a part of warnings), for analyze(previous=)
    _fleet_warnings: tuple = dataclasses.field(default=(), repr=False)
    # how many traces this analysis analysed (the rest were restored or kept from the
    # analysis it built on: all of them for a whole analysis, 0 when nothing was new)
    traces_analysed: Optional[int] = None

    def __repr__(self) -> str:
        return (f"<Analysis of {self.source!r}: {self.summary.tasks} tasks, "
                f"{self.summary.spans} spans, {len(self.problems)} input problems>")

    # ---- the results as DataFrames and as the JSON document ----------------------------------
    @functools.cached_property
    def tasks(self) -> "pd.DataFrame":
        """One row per task (pandas DataFrame; made once and shared: ``.copy()`` it to
        change it)."""
        from .frames import tasks_frame

        return tasks_frame(self)

    @functools.cached_property
    def critical_path(self) -> "pd.DataFrame":
        """One row per critical-path section (pandas DataFrame; made once and shared)."""
        from .frames import critical_path_frame

        return critical_path_frame(self)

    def to_dict(self, detail: str = "sections") -> dict:
        """The ``agentscope.analysis/v1`` document (ARCHITECTURE §7). ``detail="tasks"``
        leaves out each task's ``critical_path`` (for those who need only the task level: a
        fraction of the size and of the time)."""
        from .document import document

        return document(self, detail)

    def to_json(self, indent: Optional[int] = None, detail: str = "sections") -> str:
        """:meth:`to_dict` as JSON text: what ``agentscope analyze --format json`` prints.
        Strict JSON: a figure that is not a finite number is null, never ``NaN``."""
        from .document import strict_json

        with gc_paused():
            return strict_json(self.to_dict(detail), indent=indent)

    def write_json(self, out: Any, detail: str = "sections") -> None:
        """Write :meth:`to_json` (compact) to the text stream ``out``, a chunk of tasks at a
        time: the same document, without ever holding all of its text (what
        ``agentscope analyze --format json`` does into a pipe or a file)."""
        from .document import write_document

        with gc_paused():
            write_document(self, out.write, detail)

    def breakdown(self, by: str, assumed: bool = False) -> dict:
        """Critical-path seconds per class by the ``"stage"`` of the span holding the path
        (``(gap)`` between roots, ``(none)`` without a stage) or by the task's ``"lane"``:
        {label: {class: seconds}}. With ``assumed``, only the seconds whose class rests on a
        stage label or an assumption (not on measurement)."""
        return breakdown(self.sections, self.section_labels(by), assumed)

    def section_labels(self, by: str) -> list:
        """Each critical-path section's label as :meth:`breakdown` groups them: the
        ``"stage"`` of the span holding the path (``(gap)`` between roots, ``(none)`` without
        a stage) or its task's ``"lane"`` (``(none)`` without one)."""
        sec = self.sections
        if by == "stage":
            codes, labels = self.stage_codes()
            return np.asarray(labels, dtype=object)[codes].tolist()
        if by == "lane":
            lanes = np.asarray([t.lane or "(none)" for t in self.task_results], dtype=object)
            return lanes[np.asarray(sec.task, dtype=np.int64)].tolist() if len(lanes) else []
        raise ValueError(f"breakdown by 'stage' or 'lane', not {by!r}")

    def stage_codes(self) -> tuple:
        """(each critical-path section's stage label as a code (int64 array), the labels):
        :meth:`section_labels` ``("stage")`` without a string per section."""
        import pandas as pd

        sec = self.sections
        codes, stages = pd.factorize(np.asarray(sec.stage, dtype=object), use_na_sentinel=False)
        place: dict = {}  # each label once (None and "" are both "(none)")
        label_of = np.asarray([place.setdefault(s if isinstance(s, str) and s else "(none)",
                                                len(place)) for s in stages.tolist()],
                              dtype=np.int64)
        codes = label_of[codes] if len(codes) else codes.astype(np.int64)
        gap = SpanIds.of(sec.span_id).is_none()
        if gap.any():
            codes = np.where(gap, place.setdefault("(gap)", len(place)), codes)
        return codes, list(place)

    # ---- what a change would buy ------------------------------------------------------------
    def whatif(self, speedup: "Sequence[str] | str" = (), cpus: Optional[int] = None,
               slots: Optional[dict] = None) -> "Prediction":
        """Predict the tasks' latency and throughput if some work got faster or capacity
        changed: ``speedup``: ``"KIND:VALUE=FACTOR"`` strings (kinds stage, name, class,
        service; ``"stage:tool=2"`` makes tool spans' own time twice as fast); ``cpus``: every
        host's cores; ``slots``: {server (its spans' service): slots}. Each trace is re-timed
        and its critical path walked again (a faster branch can hand the path to another);
        with ``cpus``/``slots`` the tasks are replayed on that capacity over their recorded
        arrivals. Returns a :class:`~agentscope.analyzers.whatif.Prediction` (``to_dict()``:
        the ``agentscope.whatif/v1`` document). Rules and assumptions: docs/whatif.md.
        Raises ValueError for a malformed speedup or capacity."""
        from .whatif import whatif

        if isinstance(speedup, str):
            speedup = [speedup]
        return whatif(self, speedup, cpus, slots)

    @functools.cached_property
    def suggestions(self) -> tuple:
        """What would help most: the three changes with the largest predicted gain in mean
        task latency (a stage, span name or class holding much of the critical paths twice as
        fast, one more slot at a server whose requests queued, twice the cores where the
        paths computed), best first, as :class:`~agentscope.analyzers.whatif.Prediction`
        objects (the reports' "what would help" section). Made once per analysis; judged on
        a sample of the tasks above 20k spans, left out (empty) above 100k."""
        from .._log import log
        from ..analyzers.whatif import proposals_left_out, what_would_help
        from .whatif import spans_for_prediction

        if not self.task_results or proposals_left_out(self.summary.spans):
            return ()
        try:
            with self._store.open() as store:
                spans, capacity, _ = spans_for_prediction(store)
            return tuple(what_would_help(spans, capacity))
        except Exception as e:  # an optional section: the report goes on without it
            log.warning("agentscope: could not predict what would help: %s", e)
            return ()

    def plan(self, prices: "Sequence[str] | dict | None" = None,
             gpu_target: float = 0.8) -> dict:
        """The capacity view: orchestration and tool share of the critical paths with the
        background articles' CPU:GPU rule of thumb, the GPU's ceiling (Amdahl) beside its
        measured busy share, CPU core-seconds per GPU-busy second and the cores per GPU that
        keep a GPU ``gpu_target`` busy, resource-seconds, energy and (with ``prices``:
        ``["gpu=2.5", "cpu=0.04", "mem=0.005"]`` or a dict, USD per GPU-hour, core-hour,
        GB-hour) cost per task and per lane, each lane's latency, and the time online tasks
        waited behind batch work at a server. Returns the ``agentscope.plan/v1`` document
        (docs/whatif.md); figures that need a GPU are None and named in ``needs_gpu``."""
        from .plan import capacity_plan

        return capacity_plan(self, prices, gpu_target)

    # ---- the store behind it ------------------------------------------------------------------
    def query(self, statement: str) -> "pd.DataFrame":
        """Run one read-only SQL statement over the store (tables ``spans``, ``samples``;
        views ``tasks``, ``critical_path``); returns a pandas DataFrame. It runs on a
        connection of its own that reads the store and nothing else: no files, URLs or
        extensions, settings locked, nothing written (store/user_sql.py; docs/cli.md#query).
        Raises QueryError (bad SQL, a statement that would write or reach outside the store,
        several statements) or StoreError (the store is locked by another process). The
        views hold the store's latest analysis: this one, unless another was saved into the
        same store since."""
        return self._store.read(statement, frame=True)

    def query_rows(self, statement: str) -> tuple:
        """:meth:`query` as (column names, row tuples)."""
        return self._store.read(statement, frame=False)

    def spans_of(self, trace_ids: list) -> dict:
        """Every span of these traces: trace_id -> [SpanRow]."""
        with self._store.open() as store:
            return store.spans_of(trace_ids)

    def table_rows(self, table: str, columns: Sequence[str], page: int = 50_000,
                   by_trace: Optional[int] = None) -> Iterator[dict]:
        """Every row of the store's ``spans`` or ``samples`` table (see :meth:`query`) as
        a dict of ``columns``, read ``page`` rows at a time: in one statement, in no
        particular order, or, with ``by_trace`` (spans), in (trace_id, span_id) order, a
        batch of traces of about that many spans at a time: what an export of every span
        or sample reads (:meth:`Store.table_rows`)."""
        with self._store.open(spans=table == "spans") as store:
            yield from store.table_rows(table, columns, page, by_trace)

    def span_parents(self) -> dict:
        """{(trace_id, span_id): parent_span_id} of every span in the store."""
        with self._store.open() as store:
            return store.span_parents()

    def counters_in_windows(self, windows: list, metrics: list) -> list:
        """The samples of ``metrics`` on each window's host over it: windows are (key, host,
        start_ns, end_ns); [WindowSample]."""
        with self._store.open(spans=False) as store:
            return store.counters_in_windows(windows, metrics)

    def latest_samples(self, metrics: list) -> list:
        """The latest value of each series of ``metrics``: [LatestSample]."""
        with self._store.open(spans=False) as store:
            return store.latest_samples(metrics)

    def close(self) -> None:
        """Close an in-memory store, or remove a temporary one (a ClickHouse window of more
        than :data:`FILE_STORE_SPANS` spans); a store in a file of yours needs no closing."""
        self._store.close()

    def __enter__(self) -> "Analysis":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class StoredAnalysis:
    """A store made current for SQL (see :func:`open_store`): :meth:`query` and
    :meth:`query_rows` as :class:`Analysis` has them, over its tables and its saved analysis.

    * :attr:`tasks_saved`: tasks in the saved analysis (the ``tasks`` view);
    * :attr:`analysed`: whether opening it analysed again (something was new, or no current
      analysis was saved), or read the saved one as it was;
    * :attr:`load`: what loading what was new did; :attr:`warnings`: the store's, the
      load's and the saved analysis' own; :attr:`problems`: every input problem on record.
    """

    source: str
    tasks_saved: int
    load: LoadReport
    warnings: tuple
    analysed: bool
    _store: _StoreRef = dataclasses.field(repr=False)

    def __repr__(self) -> str:
        return (f"<StoredAnalysis of {self.source!r}: {self.tasks_saved} tasks, "
                f"{'analysed now' if self.analysed else 'saved analysis'}>")

    @property
    def problems(self) -> tuple:
        """Input problems of every load, each with its file and line (TraceFormatError)."""
        with self._store.open() as store:
            return tuple(store.problems())

    def query(self, statement: str) -> "pd.DataFrame":
        """See :meth:`Analysis.query`."""
        return self._store.read(statement, frame=True)

    def query_rows(self, statement: str) -> tuple:
        """:meth:`query` as (column names, row tuples)."""
        return self._store.read(statement, frame=False)

    def close(self) -> None:
        """Close an in-memory store, or remove a temporary one (as :meth:`Analysis.close`)."""
        self._store.close()

    def __enter__(self) -> "StoredAnalysis":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# tasks saved at a time: the columns made for the store (their evidence as JSON text, about
# 0.7 KB a task) of a large analysis are not all made at once (at 20M spans, 206k tasks:
# 145 MB held at once while the save began)
SAVE_TASKS = 25_000


def _task_chunks(fleet: Fleet) -> Iterator[dict]:
    """The task_results table, as columns, :data:`SAVE_TASKS` rows at a time."""
    for lo in range(0, len(fleet.tasks), SAVE_TASKS):
        yield _task_columns(fleet, lo, lo + SAVE_TASKS)


def _task_columns(fleet: Fleet, lo: int = 0, hi: Optional[int] = None) -> dict:
    """The task_results table, as columns: tasks ``lo`` .. ``hi`` - 1."""
    tasks = fleet.tasks[lo:hi]
    cols = {
        "trace_id": [t.trace_id for t in tasks], "name": [t.name for t in tasks],
        "lane": [t.lane for t in tasks], "service": [t.service for t in tasks],
        "start_ns": [t.start_ns for t in tasks], "duration_ns": [t.duration_ns for t in tasks],
        "bottleneck": [t.bottleneck for t in tasks],
        "confidence": [t.confidence for t in tasks],
        "measured_share": [t.measured_share for t in tasks],
    }
    for c in CLASSES:
        cols[f"share_{c}"] = [t.shares.get(c, 0.0) for t in tasks]
    cols["orchestration_ns"] = [t.orchestration_ns for t in tasks]
    cols["spans"] = [t.spans for t in tasks]
    cols["evidence"] = [json.dumps(t.evidence) for t in tasks]
    for name in ("duplicates", "off_path", "orphans", "root_span_id"):
        cols[name] = [getattr(t, name) for t in tasks]
    for c in CLASSES:
        cols[f"assumed_{c}"] = [t.assumed.get(c, 0.0) for t in tasks]
    for name in ("timeout_ns", "retry_ns", "orphan_roots"):
        cols[name] = [getattr(t, name) for t in tasks]
    return cols


# sections saved at a time: the columns made for the store (their text as objects) of a
# large analysis are not all made at once (about 200 bytes a section while it is saved: at
# 20M spans, 250k against 1M took the save's peak from 1.71 to 1.59 GB in the same time)
SAVE_SECTIONS = 250_000


def _section_chunks(fleet: Fleet) -> Iterator[dict]:
    """The cp_sections table, as columns, :data:`SAVE_SECTIONS` rows at a time."""
    trace_ids = np.asarray([t.trace_id for t in fleet.tasks], dtype=object)
    for lo in range(0, len(fleet.sections), SAVE_SECTIONS):
        yield _section_columns(fleet, lo, lo + SAVE_SECTIONS, trace_ids)
        let_go(fleet.sections, lo, lo + SAVE_SECTIONS)  # (sections in files: pages read)


def _section_columns(fleet: Fleet, lo: int = 0, hi: Optional[int] = None,
                     trace_ids: Any = None) -> dict:
    """The cp_sections table, as columns (numpy arrays): sections ``lo`` .. ``hi`` - 1."""
    sec = fleet.sections
    hi = len(sec) if hi is None else min(hi, len(sec))
    if hi <= lo:
        return {}
    if trace_ids is None:
        trace_ids = np.asarray([t.trace_id for t in fleet.tasks], dtype=object)
    cut = slice(lo, hi)
    out = {"trace_id": trace_ids[sec.task[cut]], "seq": sec.seq[cut],
           "span_id": np.asarray(sec.span_id[cut], dtype=object),
           "name": sec.name[cut], "stage": sec.stage[cut],
           "start_ns": sec.start_ns[cut], "end_ns": sec.end_ns[cut],
           "class": np.asarray(CLASSES, dtype=object)[sec.cls[cut]],
           "confidence": sec.confidence[cut],
           "basis": np.asarray(BASES, dtype=object)[sec.basis[cut]]}
    shares = sec.shares[cut]
    for k, c in enumerate(CLASSES):
        out[f"share_{c}"] = shares.column(k)
    n = hi - lo
    out["assumed"] = sec.assumed[cut] if sec.assumed is not None else np.zeros(n)
    out["assumed_cls"] = sec.assumed_cls[cut] if sec.assumed_cls is not None else \
        np.zeros(n, dtype=np.int8)
    return out


def _keep_freed_memory() -> None:
    """Let this batch process keep and reuse the memory it frees: on this kind of VM a page
    fault costs microseconds, and an analysis of 1M spans otherwise faults in ~2.5 GB (glibc
    gives arrays of a few MB back to the OS when freed, then faults fresh pages for the next).
    The same as MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_/MALLOC_TOP_PAD_; glibc only."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed value
        libc.mallopt(m_trim_threshold, 1 << 30)
        libc.mallopt(m_top_pad, 256 << 20)
    except (OSError, AttributeError):
        pass  # not glibc: the defaults are fine, only slower here


__all__ = ["Analysis", "MEMORY", "Progress", "StoredAnalysis", "analyze", "open_store",
           "source_state"]
