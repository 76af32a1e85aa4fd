"""Counter evidence: the host's, GPU's and model server's counters over each critical-path
section (the series from the store, :meth:`Store.counter_series`; the interval means in numpy,
:func:`section_means`), and how they change a verdict (:func:`adjust`).

Span evidence says how much of a section its thread spent on the CPU; the rest is waiting,
and the span alone cannot say on what. The counters over the same interval can:

* **CPU contention**: the host's CPU was saturated (PSI ``cpu some``, or more runnable tasks
  than cores) and the span's thread was runnable rather than blocked (it was preempted more
  often than it blocked), or it waited on child processes that were (they computed a quarter
  of the span or more and were preempted more often than they blocked, or the agent's
  process tree had threads waiting in the run queue): that waiting is ``cpu``, up to the
  share of time runnable work waited on the host;
* **memory**: PSI ``memory some`` (tasks stalled on reclaim, swap-in, refaults): that share of
  the waiting is ``memory``; a thread that took major faults itself, in a process whose GIL
  was contended while the agent's process tree was paging in, waited behind the others'
  page-ins (a thread faulting on a mapped page holds the GIL): ``memory`` too;
* **GPU**, for an ``inference`` served on its own host (``server.address`` local, or its
  process holds GPU memory): its GPUs (those its process holds memory on, per NVML, where
  known; else the busiest of its host) busy (≥ 50 %) make its waiting ``gpu``, and its
  on-CPU time too (launching kernels and spin-waiting for them: CUDA synchronises by spinning);
  idle (< 10 %) make it ``queue`` when the model server had requests waiting, else ``io``
  (waiting on something that is not this GPU); in between it is split by utilization. A KV
  cache near full (≥ 90 %) with preemptions makes it ``memory``.

A section without counters keeps the span-based verdict. Every change adds its reason, with
the numbers, to the section's evidence.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .. import metric_names as mn
from .evidence import (CHILDREN_BUSY, CLASSES, CPU, GPU, IO, MAJOR_FAULT_NS, MEMORY,
                       PROCESS_COMPUTED, QUEUE)

CORES = mn.SYSTEM_CPU_LOGICAL_COUNT
RUN_QUEUE = mn.SYSTEM_CPU_RUN_QUEUE
PSI_CPU = mn.SYSTEM_PRESSURE_CPU_SOME
PSI_MEMORY = mn.SYSTEM_PRESSURE_MEMORY_SOME
SWAP_IN = mn.SYSTEM_PAGING_SWAP_IN
HOST_FAULTS = mn.SYSTEM_PAGING_MAJOR_FAULTS
TREE_WAIT = mn.AGENTSCOPE_TREE_RUNQUEUE_WAIT
TREE_FAULTS = mn.AGENTSCOPE_TREE_MAJOR_FAULTS  # per second, the agent's process tree
GPU_UTIL = mn.HW_GPU_UTILIZATION
KV_CACHE = mn.MODEL_SERVER_KV_CACHE_USAGE
PREEMPTIONS = mn.MODEL_SERVER_PREEMPTIONS
SERVER_WAITING = mn.MODEL_SERVER_REQUESTS_WAITING
SERVER_RUNNING = mn.MODEL_SERVER_REQUESTS_RUNNING
GIL_WAIT = mn.AGENTSCOPE_PYTHON_GIL_WAIT  # per process: the in-process sampler's GIL probe
# not samples: what section_means adds beside the means. GPU_OF_PROCESS is 1 where the span's
# GPU is known (its process holds memory on it); NO_GPU is 1 where the section's host had a
# collector that found no NVIDIA GPU (its gpu.nvidia source reported absent, never up)
GPU_OF_PROCESS = "gpu_of_process"
NO_GPU = "host_without_gpu"
# joined on the span's own process (host and pid), not on its host
PER_PROCESS = (GIL_WAIT,)
# the counters the rules below read (each one joined to every section: no more than these)
METRICS = (CORES, RUN_QUEUE, PSI_CPU, PSI_MEMORY, SWAP_IN, HOST_FAULTS, TREE_WAIT, GPU_UTIL,
           KV_CACHE, PREEMPTIONS, SERVER_WAITING, GIL_WAIT, TREE_FAULTS, SERVER_RUNNING)
# a sample holds its value back to the previous one of its series at most this long: a longer
# stretch is a hole between collector runs (a folder of several days' recordings)
MAX_HOLD_NS = 60_000_000_000
# what the counter join inside ClickHouse needs of these rules
# (store.clickhouse.critical_paths(URL, counters=COUNTER_JOIN): section_means in SQL)
COUNTER_JOIN = {"metrics": METRICS, "per_process": PER_PROCESS, "max_hold_ns": MAX_HOLD_NS,
                "gpu_util": GPU_UTIL, "gpu_of_process": GPU_OF_PROCESS, "no_gpu": NO_GPU}
GIL_CONTENDED = 0.001  # s late per wake-up (mean): 5x the idle timer slack (0.2 ms here)
GIL_WAITS = 4  # an agent's own time between steps no longer than this many GIL waits

TIMED_SHARE = 0.5  # of the children's CPU their own, from which their measured waits cover them
CONTENTION = 0.2  # share of time runnable work waited for a CPU, from which it counts
FAIR_MARGIN = 3.0  # a runnable thread's wait: up to 3x its fair share's (_fair_wait)
PREEMPTION_WAIT_NS = 20_000_000  # and a scheduler slice per preemption (EEVDF: 3 ms; CFS ≤ 24)
MEMORY_PRESSURE = 0.05
GPU_BUSY, GPU_IDLE = 0.5, 0.1
KV_FULL = 0.9

_K = {c: i for i, c in enumerate(CLASSES)}


def section_means(series: Any, hosts: Any, start: Any, end: Any, pids: Any = None) -> dict:
    """The wanted counters' means over each section: {metric: float array, NaN = none}.
    ``series``: the store's :class:`~agentscope.store.schema.CounterSeries` (None: no
    counters); ``hosts``: the host of each section (None: unknown); ``pids``: the process of
    its span.

    GPU utilization, where it is known which GPUs the span's process uses (NVML's per-process
    memory, ``process.gpu.memory.usage``, on the same host: a model server's own spans), is
    that of those GPUs; elsewhere that of the busiest GPU of the host.

    Each series (host, metric, device, pid) is a step function: a sample holds its value back
    to the previous sample's time (rates and utilizations are measured over that interval).
    With I its running integral, the mean over [a, b] is (I(b) - I(a)) / (b - a), where
    I(t) = I_k - v_k (ts_k - t) for the first sample k at or after t (``searchsorted``).
    A sample more than MAX_HOLD_NS after the previous one describes no time before it (a hole
    between collector runs); the mean is over the time described. Sections are clipped to the
    series; one less than half described gets no value (absent, not zero).
    Several series of a metric on one host give their highest mean. The SQL
    version of the same join (store/sql/section_counters.sql, two ASOF joins) is the
    reference the tests check this against (analyzers/reference.py); this one is several
    times faster."""
    n = len(start)
    out: dict = {}
    if not n or series is None or not series.keys:
        return out
    keys = series.keys
    hosts = np.asarray(hosts, dtype=object)
    by_host: dict = {}
    for i, h in enumerate(hosts.tolist()):
        if h is not None:
            by_host.setdefault(h, []).append(i)
    wanted_hosts = {k.host for k in keys}
    if not wanted_hosts & set(by_host):
        return out
    ts_all, val_all = series.ts_ns, series.value
    a_all = np.asarray(start, dtype=np.int64)
    b_all = np.asarray(end, dtype=np.int64)
    rows = {h: np.asarray(ix, dtype=np.int64) for h, ix in by_host.items()}
    for run in series.no_gpu_runs:
        if run.host in rows:  # the sections within the run of that collector
            sel = rows[run.host]
            sel = sel[(a_all[sel] >= run.first_ns) & (b_all[sel] <= run.last_ns)]
            out.setdefault(NO_GPU, np.zeros(n))[sel] = 1.0
    gpus_of = series.gpus_of if pids is not None else {}
    per_gpu: dict = {}  # (host, device) -> means of that GPU's utilization
    offset = 0
    for key in keys:
        host, metric, count = key.host, key.metric, key.samples
        ts, v = ts_all[offset:offset + count], val_all[offset:offset + count]
        offset += count
        sel = rows.get(host)
        if sel is None or not len(ts):
            continue
        if metric in PER_PROCESS:  # only the sections of that process
            if pids is None:
                continue
            sel = sel[np.asarray(pids)[sel] == key.pid]
            if not len(sel):
                continue
        a0, b0 = a_all[sel], b_all[sel]
        total, span = integrate(ts, v, a0, b0)
        # a section less than half described gets no value (absent, not zero)
        ok = (b0 > a0) & (span > 0) & (span * 2 >= b0 - a0)
        sel, total, span = sel[ok], total[ok], span[ok]
        if not len(sel):
            continue
        col = out.setdefault(metric, np.full(n, np.nan))
        col[sel] = np.fmax(col[sel], total / span)
        if metric == GPU_UTIL and gpus_of:
            mine = per_gpu.setdefault((host, key.device), np.full(n, np.nan))
            mine[sel] = total / span
    if gpus_of and GPU_UTIL in out:
        pids = np.asarray(pids)
        for (host, pid), devices in gpus_of.items():
            sel = rows.get(host)
            if sel is None:
                continue
            sel = sel[pids[sel] == pid]
            if not len(sel):
                continue
            known = np.full(len(sel), np.nan)
            for d in devices:
                if (host, d) in per_gpu:
                    known = np.fmax(known, per_gpu[(host, d)][sel])
            out[GPU_UTIL][sel] = known
            out.setdefault(GPU_OF_PROCESS, np.zeros(n))[sel] = 1.0
    return out


def integrate(ts: Any, v: Any, a: Any, b: Any) -> tuple:
    """The integral of one series (times ``ts``, values ``v``: a step function, each sample
    holding its value back to the previous one) over each interval [a, b], and how much of
    the interval the samples describe (both 0 where none): (value x ns, ns). A sample more
    than MAX_HOLD_NS after the previous one describes no time before it (a hole between
    collector runs). The mean over an interval is the first divided by the second."""
    ts = np.asarray(ts, dtype=np.int64)
    v = np.asarray(v, dtype=np.float64)
    a0, b0 = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if not len(ts):
        return np.zeros(len(a0)), np.zeros(len(a0))
    # a sample describes the time back to the previous one, unless that is longer than
    # MAX_HOLD_NS (another collector run, hours later): such a hole describes nothing
    dt = np.zeros(len(ts))
    dt[1:] = np.diff(ts).astype(np.float64)
    held = dt <= MAX_HOLD_NS  # the first sample: dt 0
    dt_held = np.where(held, dt, 0.0)
    integral = np.cumsum(v * dt_held)  # I(ts_k)
    covered = np.cumsum(dt_held)  # the time described up to ts_k
    a_, b_ = np.maximum(a0, ts[0]), np.minimum(b0, ts[-1])
    ok = b_ > a_
    a_, b_ = np.where(ok, a_, ts[0]), np.where(ok, b_, ts[0])
    ia, ib = np.searchsorted(ts, a_), np.searchsorted(ts, b_)
    at_a = integral[ia] - np.where(held[ia], v[ia] * (ts[ia] - a_), 0.0)
    at_b = integral[ib] - np.where(held[ib], v[ib] * (ts[ib] - b_), 0.0)
    c_a = covered[ia] - np.where(held[ia], ts[ia] - a_, 0)
    c_b = covered[ib] - np.where(held[ib], ts[ib] - b_, 0)
    return np.where(ok, at_b - at_a, 0.0), np.where(ok, np.maximum(c_b - c_a, 0.0), 0.0)


def children_timed(run_delay: Any, own_cpu: Any, child_cpu: Any) -> np.ndarray:
    """Per span: whether the time its child processes waited runnable was measured for most
    of their CPU (schedstat, ``run_delay`` >= 0): the children themselves used at least
    TIMED_SHARE of it (schedstat covers them, not the descendants they waited for, such as a
    compiler driver's ``cc1``)."""
    run_delay, own_cpu, child_cpu = (np.asarray(x, dtype=np.float64)
                                     for x in (run_delay, own_cpu, child_cpu))
    return (run_delay >= 0) & (child_cpu > 0) & (own_cpu >= TIMED_SHARE * child_cpu)


def _fair_wait(contention: Any, ivcsw: Any, vcsw: Any, thread_busy: Any, length_ns: Any,
               runnable_by_thread: Any) -> np.ndarray:
    """The most of a section (a share) its thread can have waited runnable for a CPU, where
    only its own counts said it was runnable (preempted more often than it blocked): counts do
    not measure time, and a thread that waited once on a socket for 0.6 s and was preempted
    three times while it parsed the answer is not a thread that waited 0.6 s for a CPU.

    A fair scheduler gives each of ``r`` runnable threads on ``c`` cores ``c/r`` of a core, so
    a thread that ran ``X`` waited about ``X (r - c) / c``, i.e. ``X p / (1 - p)`` with ``p``
    the host's contention share; each preemption besides costs at most about a scheduler
    slice per runnable thread ahead of it. The bound is FAIR_MARGIN times the first plus
    PREEMPTION_WAIT_NS times the second: generous (a CPU-bound thread on a saturated host is
    never capped: it ran for most of what it waited), tight only for a thread that mostly
    slept. Elsewhere (children, tree counters, no counts): no bound (inf)."""
    n = len(ivcsw)
    cap = np.full(n, np.inf)
    if thread_busy is None or length_ns is None or not n:
        return cap
    p = np.clip(np.nan_to_num(np.asarray(contention, dtype=np.float64)), 0.0, 0.95)
    ratio = p / (1.0 - p)
    counted = np.asarray(runnable_by_thread, dtype=bool) & \
        ((np.asarray(ivcsw) + np.asarray(vcsw)) > 0)  # the counts (and the thread CPU) known
    bound = FAIR_MARGIN * np.asarray(thread_busy, dtype=np.float64) * ratio + \
        np.asarray(ivcsw, dtype=np.float64) * PREEMPTION_WAIT_NS * np.maximum(ratio, 1.0) / \
        np.maximum(np.asarray(length_ns, dtype=np.float64), 1.0)
    return np.where(counted, bound, cap)


def adjust(shares: np.ndarray, confidence: np.ndarray, ev: dict, inference: np.ndarray,
           ivcsw: np.ndarray, vcsw: np.ndarray, child_cpu: np.ndarray,
           server_local: "np.ndarray | None" = None, children: "tuple | None" = None,
           orchestration: "np.ndarray | None" = None,
           length_ns: "np.ndarray | None" = None,
           model_s: "np.ndarray | None" = None, faults: "np.ndarray | None" = None,
           thread_busy: "np.ndarray | None" = None,
           children_timed: "np.ndarray | None" = None,
           tree_busy: "np.ndarray | None" = None) -> tuple:
    """Section shares and confidences changed by the counters ``ev`` (see the module
    docstring); returns (shares, confidence, notes), notes an object array of str or None.
    ``server_local``: the inference's server is on this host (``server.address``); the GPU
    rules apply only there, or where the span's process is known to use the GPU (a remote
    model server's GPU is not this host's). ``children``: (involuntary, voluntary context
    switches of the child processes each span waited for, their CPU per second of the span).
    ``orchestration``: the section is a task's or agent's own time; ``length_ns``: its length;
    ``model_s``: the model time its server reported (0: none); ``faults``: the major faults
    its span took itself (net of its children); ``thread_busy``: the on-CPU share of its
    span's own thread (None: the section's cpu share stands in); ``children_timed``: the time
    its child processes waited runnable was measured (None: nowhere); ``tree_busy``: for a
    span judged by its process tree's counters, the on-CPU share its part of them gave it
    (its tree's threads waiting for a CPU meanwhile were its own, where it computed)."""
    n = len(shares)
    shares = shares.copy()
    confidence = confidence.copy()
    notes: list = [[] for _ in range(n)] if n else []
    nan = np.full(n, np.nan)

    def get(m: str) -> np.ndarray:
        return ev.get(m, nan)

    cpu_k, io_k, gpu_k, mem_k, q_k = _K[CPU], _K[IO], _K[GPU], _K[MEMORY], _K[QUEUE]

    # 1. CPU contention: the waiting part of a runnable thread
    cores, runq, psi, tree = get(CORES), get(RUN_QUEUE), get(PSI_CPU), get(TREE_WAIT)
    with np.errstate(invalid="ignore", divide="ignore"):
        over = np.where((cores > 0) & (runq > cores), (runq - cores) / runq, 0.0)
        over = np.where(np.isnan(runq) | np.isnan(cores), np.nan, over)
    contention = np.fmax(psi, over)  # NaN only where both are unknown
    # child processes whose time runnable was measured (schedstat) were judged by the span's
    # own rule already (evidence.classify): the counters do not guess it again
    untimed = np.ones(n, dtype=bool) if children_timed is None else \
        ~np.asarray(children_timed, dtype=bool)
    by_tree = (child_cpu > 0) & untimed & (np.nan_to_num(tree) >= CONTENTION)
    if tree_busy is not None:  # it computed in its tree while the tree's threads waited
        by_tree = by_tree | ((np.asarray(tree_busy, dtype=np.float64) >= PROCESS_COMPUTED) &
                             (np.nan_to_num(tree) >= CONTENTION))
    # runnable by its own thread's counts alone (no children, no tree): bounded in time below
    by_thread = (ivcsw > vcsw) & ~by_tree & (np.asarray(child_cpu) <= 0)
    runnable = (ivcsw > vcsw) | by_tree
    kids_runnable = np.zeros(n, dtype=bool)
    if children is not None:
        kid_ivcsw, kid_vcsw, kid_busy = (np.asarray(a) for a in children)
        kids_runnable = (kid_busy >= CHILDREN_BUSY) & (kid_ivcsw > kid_vcsw) & ~runnable & \
            untimed
        runnable = runnable | kids_runnable
    waiting = shares[:, io_k]
    move = np.where(runnable & (np.nan_to_num(contention) >= CONTENTION),
                    np.minimum(waiting, np.nan_to_num(contention) * (1 - shares[:, q_k])), 0.0)
    move = np.minimum(move, _fair_wait(contention, ivcsw, vcsw, thread_busy, length_ns,
                                       runnable_by_thread=by_thread))
    for i in np.flatnonzero(move > 1e-6).tolist():
        why = []
        if not np.isnan(psi[i]):
            why.append(f"PSI cpu {psi[i]:.0%}")
        if not np.isnan(runq[i]) and not np.isnan(cores[i]):
            why.append(f"run queue {runq[i]:.1f} on {cores[i]:.0f} cores")
        if ivcsw[i] > vcsw[i]:
            thread = f"thread preempted {int(ivcsw[i])}x, blocked {int(vcsw[i])}x"
        elif kids_runnable[i]:
            thread = (f"its child processes computing, preempted {int(kid_ivcsw[i])}x, "
                      f"blocked {int(kid_vcsw[i])}x")
        else:
            thread = f"agent's processes waiting for a CPU {tree[i]:.2f} threads on average"
        notes[i].append(f"host CPU saturated ({', '.join(why)}; {thread}): its off-CPU time "
                        f"was runnable work waiting for a CPU ({move[i]:.0%} of the section)")
    shares[:, cpu_k] += move
    shares[:, io_k] -= move
    confidence = np.where(move > 1e-6, np.maximum(confidence, 0.7), confidence)

    # 1a. paging in behind the interpreter lock: a thread that took major faults itself, in a
    # process whose GIL was contended while its tree was paging in, waited for the page-ins
    # of the others (a thread faulting on a mapped page holds the GIL)
    gil = get(GIL_WAIT)
    paging = np.minimum(np.nan_to_num(get(TREE_FAULTS)) * MAJOR_FAULT_NS / 1e9, 1.0)
    behind = (np.nan_to_num(gil) >= GIL_CONTENDED) & (paging >= MEMORY_PRESSURE)
    if faults is not None:
        behind &= np.asarray(faults, dtype=np.float64) > 0
    else:
        behind &= False
    move = np.where(behind, np.minimum(shares[:, io_k], paging), 0.0)
    for i in np.flatnonzero(move > 1e-6).tolist():
        notes[i].append(f"its process paging in ({get(TREE_FAULTS)[i]:.0f} major faults/s in "
                        f"the agent's processes) with its interpreter lock contended "
                        f"({gil[i] * 1e3:.1f} ms a wake-up): its waiting was behind other "
                        f"threads' page-ins ({move[i]:.0%} of the section)")
    shares[:, mem_k] += move
    shares[:, io_k] -= move
    confidence = np.where(move > 1e-6, np.maximum(confidence, 0.6), confidence)

    # 1b. Python's interpreter lock: a thread that computed part of the section, in a process
    # whose GIL was contended meanwhile, spent its off-CPU time waiting for the GIL; so did an
    # agent's own code between its steps (a task's or agent's self time) that lasted no more
    # than a few of the waits the probe measured
    contended = np.nan_to_num(gil) >= GIL_CONTENDED
    # its own thread computed (not only its child processes: they hold no GIL of this one)
    own = shares[:, cpu_k] if thread_busy is None else np.asarray(thread_busy, dtype=np.float64)
    gil_bound = contended & (own >= 0.05)
    between = np.zeros(n, dtype=bool)
    if orchestration is not None and length_ns is not None:
        between = contended & ~gil_bound & np.asarray(orchestration, dtype=bool) & (
            np.asarray(length_ns, dtype=np.float64) <= GIL_WAITS * np.nan_to_num(gil) * 1e9)
        gil_bound = gil_bound | between
    move = np.where(gil_bound, shares[:, io_k], 0.0)
    for i in np.flatnonzero(move > 1e-6).tolist():
        what = ("the agent's own code between steps, no longer than "
                f"{GIL_WAITS} such waits: waiting for the GIL" if between[i] else
                "its off-CPU time was waiting for the GIL")
        notes[i].append(f"Python's interpreter lock contended in its process (the agent's "
                        f"sampler thread waited {gil[i] * 1e3:.1f} ms for it per wake-up): "
                        f"{what} ({move[i]:.0%} of the section)")
    shares[:, cpu_k] += move
    shares[:, io_k] -= move
    confidence = np.where(move > 1e-6, np.maximum(confidence, 0.6), confidence)

    # 2. memory pressure: that share of what is still waiting
    psi_mem = get(PSI_MEMORY)
    waiting = shares[:, io_k]
    move = np.where(np.nan_to_num(psi_mem) >= MEMORY_PRESSURE,
                    np.minimum(waiting, np.nan_to_num(psi_mem)), 0.0)
    swap, faults = get(SWAP_IN), get(HOST_FAULTS)
    for i in np.flatnonzero(move > 1e-6).tolist():
        extra = ""
        if not np.isnan(swap[i]) and swap[i] > 0:
            extra += f", {swap[i]:.0f} pages/s swapped in"
        if not np.isnan(faults[i]) and faults[i] > 0:
            extra += f", {faults[i]:.0f} major faults/s"
        notes[i].append(f"memory pressure (PSI memory {psi_mem[i]:.0%}{extra})")
    shares[:, mem_k] += move
    shares[:, io_k] -= move
    confidence = np.where(move > 1e-6, np.maximum(confidence, 0.7), confidence)

    # 3. inferences: what the GPU and the model server were doing while they waited
    util, kv, pre, queued = get(GPU_UTIL), get(KV_CACHE), get(PREEMPTIONS), get(SERVER_WAITING)
    here = np.asarray(server_local, dtype=bool) if server_local is not None else \
        np.ones(n, dtype=bool)
    here = here | (ev.get(GPU_OF_PROCESS, np.zeros(n)) > 0)
    known = inference & here & ~np.isnan(util)
    waiting = shares[:, io_k] + shares[:, gpu_k]
    kv_full = inference & (np.nan_to_num(kv) >= KV_FULL) & (np.nan_to_num(pre) > 0)
    busy = known & (util >= GPU_BUSY) & ~kv_full
    idle = known & (util < GPU_IDLE) & ~kv_full
    mid = known & ~busy & ~idle & ~kv_full
    queued_idle = idle & (np.nan_to_num(queued) > 0)
    new_gpu = np.where(busy, waiting, np.where(mid, waiting * np.nan_to_num(util),
                                               np.where(idle | kv_full, 0.0, shares[:, gpu_k])))
    new_io = np.where(busy | queued_idle | kv_full, 0.0,
                      np.where(mid, waiting - new_gpu,
                               np.where(idle, waiting, shares[:, io_k])))
    # on-CPU time of an inference while its GPU was busy is the host side of GPU work:
    # launching kernels and, mostly, spin-waiting in synchronisation (CUDA's default)
    spun = np.where(busy, shares[:, cpu_k], 0.0)
    shares[:, cpu_k] -= spun
    new_gpu = new_gpu + spun
    shares[:, q_k] += np.where(queued_idle, waiting, 0.0)
    shares[:, mem_k] += np.where(kv_full, waiting, 0.0)
    shares[:, gpu_k] = new_gpu
    shares[:, io_k] = new_io
    # an inference assumed to wait on a local accelerator (no timing from its server, no GPU
    # counters) on a host whose collector found no GPU: it waited on something else
    reported = np.asarray(model_s, dtype=np.float64) > 0 if model_s is not None else \
        np.zeros(n, dtype=bool)
    no_gpu = inference & (ev.get(NO_GPU, np.zeros(n)) > 0) & ~known & ~kv_full & ~reported & \
        (shares[:, gpu_k] > 1e-6)
    moved = np.where(no_gpu, shares[:, gpu_k], 0.0)
    shares[:, io_k] += moved
    shares[:, gpu_k] -= moved
    for i in np.flatnonzero(no_gpu).tolist():
        notes[i].append("no GPU on this host (its collector found no NVIDIA GPU): the "
                        f"waiting ({moved[i]:.0%} of the section) was not on a local GPU")
    # 3b. no GPU counters, but the model server's own (``--model-server``, scraped by the
    # span's host's sidecar): while it had requests running, its waiting was the model's
    # compute, and the share of the requests that waited for a slot was queueing; a server on
    # the span's own host, which has no GPU, computed on its CPU
    running = get(SERVER_RUNNING)
    served = inference & ~known & ~kv_full & ~reported & \
        ~(np.isnan(running) & np.isnan(queued))
    r, w = np.nan_to_num(running), np.nan_to_num(queued)
    busy_server = served & (r + w > 0) & (shares[:, io_k] > 1e-6)
    on_cpu = (ev.get(NO_GPU, np.zeros(n)) > 0) & here
    with np.errstate(invalid="ignore", divide="ignore"):
        q_part = np.where(busy_server, shares[:, io_k] * w / np.where(r + w > 0, r + w, 1), 0.0)
    c_part = np.where(busy_server, shares[:, io_k] - q_part, 0.0)
    shares[:, q_k] += q_part
    shares[:, cpu_k] += np.where(on_cpu, c_part, 0.0)
    shares[:, gpu_k] += np.where(on_cpu, 0.0, c_part)
    shares[:, io_k] -= q_part + c_part
    for i in np.flatnonzero(busy_server).tolist():
        what = ("the model's compute on the CPU (its host has no GPU)" if on_cpu[i] else
                "the model's compute (its accelerator not measured)")
        notes[i].append(f"model server (scraped here): {r[i]:.1f} requests running, {w[i]:.1f} "
                        f"waiting meanwhile: its waiting was {what} ({c_part[i]:.0%} of the "
                        f"section) and the server's queue ({q_part[i]:.0%})")
    confidence = np.where(busy_server, np.maximum(confidence, 0.6), confidence)
    for i in np.flatnonzero(known | kv_full).tolist():
        if kv_full[i]:
            notes[i].append(f"model server KV cache {kv[i]:.0%} full, {pre[i]:.2g} "
                            "preemptions/s")
        elif busy[i]:
            notes[i].append(f"GPU busy {util[i]:.0%} meanwhile" + (
                f"; its on-CPU time ({spun[i]:.0%} of the section) was the host side of the "
                "GPU work (launching, waiting for it)" if spun[i] > 0.05 else ""))
        elif queued_idle[i]:
            notes[i].append(f"GPU idle ({util[i]:.0%}) with {queued[i]:.1f} requests "
                            "waiting at the model server")
        elif idle[i]:
            notes[i].append(f"GPU idle ({util[i]:.0%}) while it waited: not this host's GPU")
        else:
            notes[i].append(f"GPU {util[i]:.0%} busy while it waited")
    confidence = np.where(busy | idle | kv_full, np.maximum(confidence, 0.8),
                          np.where(mid, np.maximum(confidence, 0.6), confidence))
    # 4. waiting that the counters leave unexplained: say that they rule contention out
    io_left = shares[:, io_k]
    calm = (io_left > 0.2) & ~np.isnan(contention) & (np.nan_to_num(contention) < CONTENTION)
    for i in np.flatnonzero(calm).tolist():
        if notes[i]:
            continue
        parts = []
        if not np.isnan(psi[i]):
            parts.append(f"PSI cpu {psi[i]:.0%}")
        if not np.isnan(runq[i]) and not np.isnan(cores[i]):
            parts.append(f"run queue {runq[i]:.1f} on {cores[i]:.0f} cores")
        if not np.isnan(psi_mem[i]):
            parts.append(f"PSI memory {psi_mem[i]:.0%}")
        notes[i].append(f"host not saturated meanwhile ({', '.join(parts)}): waiting outside "
                        "the host's CPU and memory")
    confidence = np.where(calm & ~inference, np.maximum(confidence, 0.8), confidence)

    np.clip(shares, 0.0, 1.0, out=shares)
    out_notes = np.empty(n, dtype=object)
    for i, ns in enumerate(notes):
        out_notes[i] = "; ".join(ns) if ns else None
    return shares, confidence, out_notes


def gpu_summary(rows: list) -> Optional[dict]:
    """Per GPU (``gpuN@host``): busy share over the analysed tasks' time, idle share (< 5 %),
    and what the critical paths were doing while it was idle (share of their time, by stage
    and class), from the store's :meth:`~agentscope.store.duckdb_store.Store.gpu_idle` rows."""
    if not rows:
        return None
    out: dict = {}
    for r in rows:
        d = out.setdefault(f"{r.device}@{r.host}", {
            "busy": round(r.busy, 4), "idle": round(r.idle, 4),
            "measured_s": round(r.measured_s, 3), "idle_while": {}})
        if r.stage is not None or r.cls is not None:
            d["idle_while"][f"{r.stage or 'gap'} {r.cls}"] = round(r.share, 4)
    return out
