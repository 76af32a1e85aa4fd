"""The shapes of the store: its tables' columns, its SQL files, and the typed results of the
queries the analysis reads (:class:`AnalysisInput`, :class:`CounterSeries`).

Every module of the store imports from here; nothing here imports the rest of the store (so
the store's modules form no import circle).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple, Optional

SQL_DIR = Path(__file__).with_name("sql")
DEFAULT_DB = Path(".agentscope") / "agentscope.duckdb"
MEMORY = ":memory:"  # the ``db`` that keeps the store in memory (as DuckDB spells it)

# the columns of the `spans` table that capture files and importers fill (schema.sql adds
# stage_from and file_id), in order, with their DuckDB types
SPAN_COLUMNS = {
    "trace_id": "VARCHAR", "span_id": "VARCHAR", "parent_span_id": "VARCHAR", "name": "VARCHAR",
    "stage": "VARCHAR", "kind": "VARCHAR", "start_ns": "BIGINT", "end_ns": "BIGINT",
    "status": "VARCHAR", "status_message": "VARCHAR", "service": "VARCHAR", "host": "VARCHAR",
    "pid": "INTEGER", "tid": "BIGINT", "thread_cpu_ns": "BIGINT", "child_cpu_ns": "BIGINT",
    "children": "INTEGER", "vcsw": "BIGINT", "ivcsw": "BIGINT", "minflt": "BIGINT",
    "majflt": "BIGINT", "child_majflt": "BIGINT", "attrs": "VARCHAR", "events": "VARCHAR",
    "links": "VARCHAR",
}
# ... and of the `samples` table (schema.sql adds file_id)
SAMPLE_COLUMNS = {"ts_ns": "BIGINT", "host": "VARCHAR", "pid": "INTEGER", "source": "VARCHAR",
                  "device": "VARCHAR", "metric": "VARCHAR", "value": "DOUBLE"}
# the span columns whose text is JSON (an object, or lists of objects)
JSON_COLUMNS = ("attrs", "events", "links")


def sql(name: str) -> str:
    """The text of ``store/sql/<name>``."""
    return (SQL_DIR / name).read_text()


@dataclasses.dataclass(frozen=True)
class AnalysisInput:
    """What the analysis reads of every span (``store/sql/analysis_input.sql``): one numpy
    array per column, in trace order (each trace one contiguous run of rows, numbered by
    ``trace_no``). Numbers are never missing (0 = none, ``own_cpu`` < 0 = not measured);
    strings are object arrays with None for NULL. ``trace_id``, ``lane`` and ``service`` are
    set on roots and task spans only. ``host`` is None unless the store had counter samples to
    join (``with_counters``)."""

    trace_no: Any  # int64: the trace's number, ascending
    trace_id: Any  # object
    span_id: Any  # object
    name: Any  # object
    stage_code: Any  # int64: 1-based position in agentscope.vocab.Stage order, 0 for none
    stage: Any  # object: the stage's value, or None
    kind: Any  # object: 'producer' | 'consumer' | None (the other kinds do not matter)
    start_ns: Any  # int64
    end_ns: Any  # int64
    parent_idx: Any  # int64: row of the parent in the same trace, -1 for none
    orphan: Any  # bool: its parent is not in the data (it was adopted, or is a root)
    own_cpu: Any  # float64: CPU of its thread and child processes net of its children's
    own_wall: Any  # float64: its duration less the time its same-thread children ran
    own_faults: Any  # float64: major faults net of its children's
    child_cpu_ns: Any  # float64: CPU of the child processes it waited for
    queue_s: Any  # float64: server-reported queue time (gen_ai.latency.time_in_queue)
    model_s: Any  # float64: server-reported prefill + decode time
    server_local: Any  # bool: server.address (else url.full's host) is this machine
    # object: an inference's model endpoint, server.address[:server.port] or url.full's
    # host[:port] (None: none named, or not an inference)
    endpoint: Any
    loop: Any  # bool: its CPU was measured on an event loop
    sys_cpu: Any  # float64: kernel CPU of its thread (recorded where it took major faults)
    lane: Any  # object
    service: Any  # object
    pid: Any  # int64, -1 for none
    tid: Any  # int64, -1 for none
    host_hash: Any  # int64: its host as a number (spans of one process share host_hash, pid)
    vcsw: Any  # int64: voluntary context switches of its thread
    ivcsw: Any  # int64: involuntary ones
    child_vcsw: Any  # int64: of the child processes it waited for
    child_ivcsw: Any  # int64
    other_cpu: Any  # float64: CPU of its process's other threads while it ran (0: not recorded)
    child_run_delay: Any  # float64: its children's time runnable, waiting for a CPU (-1: none)
    child_own_cpu: Any  # float64: their own CPU, without their descendants' (-1: none)
    workers_cpu: Any  # float64: CPU of the jobs it handed to worker threads, net of children's
    thread_cpu: Any  # int64: CPU of its thread over the whole span (-1: not measured)
    error: Any  # bool: its status is error
    # bool: it ended in a timeout: error, and its status message, an exception event's
    # exception.type or its error.type attribute names one (analyzers/reliability.py)
    timeout: Any
    host: Optional[Any] = None  # object: only with counters

    def __len__(self) -> int:
        return len(self.trace_no)

    @property
    def with_counters(self) -> bool:
        return self.host is not None


def input_of_columns(arrays: dict, hosts: Optional[list] = None) -> AnalysisInput:
    """The :class:`AnalysisInput` of the columns of an analysis_input query (``arrays``:
    name -> numpy array, masked where NULL, as DuckDB's ``fetchnumpy`` gives them), in any
    row order: put in ``idx`` order (each trace one contiguous run), NULL strings as None,
    the stage from its code. The host: ``host_code``, a 1-based position in ``hosts`` (the
    embedded store's query), or ``host`` as text (ClickHouse's); neither: no host (the
    input has no counter columns)."""
    import numpy as np

    from ..vocab import Stage

    idx = np.asarray(arrays.pop("idx"), dtype=np.int64)
    where = np.empty_like(idx)
    where[idx] = np.arange(len(idx))
    cols: dict = {}
    for name, a in arrays.items():
        data = np.ma.getdata(a)[where]
        if np.ma.isMaskedArray(a):
            mask = np.ma.getmaskarray(a)[where]
            if mask.any():
                data = data.astype(object)
                data[mask] = None
        cols[name] = data
    # stages come as codes: one shared string object per stage instead of one per span
    cols["stage_code"] = np.asarray(cols["stage_code"], dtype=np.int64)
    cols["stage"] = np.array([None] + [s.value for s in Stage], dtype=object)[
        cols["stage_code"]]
    if "host_code" in cols:  # hosts likewise
        cols["host"] = np.array([None] + list(hosts or ()), dtype=object)[
            np.asarray(cols.pop("host_code"), dtype=np.int64)]
    elif "host" in cols:
        cols["host"] = np.asarray(cols["host"], dtype=object)
    return AnalysisInput(**cols)


class LoopLags(NamedTuple):
    """The event-loop lags the in-process samplers measured (``agentscope.python.loop_lag``):
    per sample the host, process, the loop's thread, the span whose task held it (None: not
    seen), when the late callback ran and how late (seconds). One array each."""

    host: Any  # object
    pid: Any  # int64
    tid: Any  # int64
    span_id: Any  # object
    ts_ns: Any  # int64
    lag_s: Any  # float64


class SeriesKey(NamedTuple):
    """One counter series: a metric's samples on one host (and device, process)."""

    host: str
    metric: str
    device: str  # '' for none
    pid: int  # -1 for none
    samples: int  # how many (its stretch of CounterSeries.ts_ns / .value)


class CollectorRun(NamedTuple):
    """The samples one collector run (one sample file) wrote on a host, first to last."""

    host: str
    first_ns: int
    last_ns: int


@dataclasses.dataclass(frozen=True)
class CounterSeries:
    """The counter samples the analysis joins to critical-path sections: every sample of the
    wanted metrics, grouped into series by (host, metric, device, pid), each in time order
    (``store/sql/counter_series.sql``), and what the GPU rules need besides."""

    keys: tuple  # of SeriesKey, in the order of their samples
    ts_ns: Any  # int64: the samples' times, series after series
    value: Any  # float64: their values
    no_gpu_runs: tuple  # of CollectorRun: collectors that found no NVIDIA GPU on their host
    gpus_of: dict  # {(host, pid): {device}}: the GPUs a process holds memory on (NVML)


@dataclasses.dataclass(frozen=True)
class ProcessTrees:
    """The process trees the sidecars sampled (``store/sql/process_trees.sql``): per tree its
    host, root pid, first and last sample time, member pids, and its CPU series (cores, the
    whole tree): tree ``k``'s samples are ``ts_ns[offsets[k]:offsets[k + 1]]``."""

    host: tuple  # of str
    root: Any  # int64
    first_ns: Any  # int64
    last_ns: Any  # int64
    members: tuple  # of frozenset of pids (the root included)
    offsets: Any  # int64, one more than there are trees
    ts_ns: Any  # int64
    value: Any  # float64: cores the tree used over the interval ending at ts_ns
    # float64: its threads waiting for a CPU meanwhile, on average (runnable; 0: none known)
    wait: Any = None

    def __len__(self) -> int:
        return len(self.host)


class GpuIdle(NamedTuple):
    """A GPU's busy and idle shares over the analysed tasks' time, and one (stage, class) of
    what the critical paths did while it sat idle (store/sql/gpu_idle.sql)."""

    host: str
    device: str
    busy: float
    idle: float
    measured_s: float
    stage: Optional[str]  # None with cls None: no critical path overlapped its idle time
    cls: Optional[str]
    share: Optional[float]


class SpanRow(NamedTuple):
    """A span as a timeline draws it (store/sql/spans_of_traces.sql)."""

    span_id: str
    parent_span_id: Optional[str]
    name: str
    stage: Optional[str]
    start_ns: int
    end_ns: int
    host: Optional[str]
    status: str


class WindowSample(NamedTuple):
    """A sample in a window of time on a host (store/sql/counters_in_windows.sql)."""

    key: int  # the window's
    metric: str
    device: str  # '' for none
    ts_ns: int
    value: float


class LatestSample(NamedTuple):
    """The latest sample of a series (store/sql/latest_samples.sql)."""

    metric: str
    host: Optional[str]
    device: Optional[str]
    pid: Optional[int]
    value: float
    ts_ns: int
