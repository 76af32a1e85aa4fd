"""Counter evidence: the DuckDB join of counters to sections, the rules that use them, the GPU
idle attribution, and real runs where the bottleneck is known by construction."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import sys
from pathlib import Path

import numpy as np
import pytest

import agentscope
from agentscope.analyzers.counters import (CONTENTION, CORES, GPU_UTIL, METRICS, PSI_CPU,
                                           RUN_QUEUE, adjust, gpu_summary, section_means)
from agentscope.analyzers.evidence import CLASSES
from agentscope.analyzers.reference import section_means_sql
from agentscope.formats import samplefile, spanfile
from agentscope.records import SampleRecord, SpanRecord
from agentscope.store.duckdb_store import Store

S = 1_000_000_000
T0 = 1_800_000_000 * S
WORKLOAD = Path(__file__).parent / "workloads" / "contend.py"


def _samples(store, rows):
    store.con.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, 0)", rows)


def section_counters(store, hosts, start, end, pids=None):
    """The analysis' join: the store's counter series, their means over the sections."""
    return section_means(store.counter_series(METRICS), hosts, start, end, pids)


def test_section_means_are_time_weighted_over_each_interval():
    store = Store()
    # one sample per second; each value covers the second before it
    _samples(store, [(T0 + k * S, "h", None, "host.pressure", None, PSI_CPU, v)
                     for k, v in enumerate([0.0, 1.0, 0.0, 0.5, 0.5])])
    start = np.array([T0, T0 + S // 2, T0 + 3 * S, T0 + 3 * S + S // 4, T0 - 10 * S, T0])
    end = np.array([T0 + 2 * S, T0 + S, T0 + 4 * S, T0 + 3 * S + S // 2, T0 - 9 * S, T0 + 2 * S])
    hosts = np.array(["h", "h", "h", "h", "h", "other"], dtype=object)
    got = section_counters(store, hosts, start, end)[PSI_CPU]
    assert got[0] == pytest.approx(0.5)  # (1.0 * 1 s + 0.0 * 1 s) / 2 s
    assert got[1] == pytest.approx(1.0)  # inside the interval held by the second sample
    assert got[2] == pytest.approx(0.5)
    assert got[3] == pytest.approx(0.5)  # shorter than the sampling interval
    assert np.isnan(got[4])  # before the samples: absent, not zero
    assert np.isnan(got[5])  # another host


def test_the_numpy_join_equals_the_sql_reference():
    """Random series (several hosts, GPUs with two devices, irregular times) against random
    sections: the analysis's numpy join and the SQL of store/sql/section_counters.sql agree."""
    rng = np.random.default_rng(5)
    store = Store()
    rows = []
    for host in ("h1", "h2"):
        for metric, device in ((PSI_CPU, None), ("system.cpu.run_queue", None),
                               (GPU_UTIL, "gpu0"), (GPU_UTIL, "gpu1")):
            ts = np.sort(rng.choice(np.arange(0, 60 * S, S // 20), 400, replace=False))
            # and a second collector run of the same series 3 minutes later (a hole between)
            ts = np.concatenate([ts, ts + 240 * S])
            rows += [(T0 + int(t), host, None, "src", device, metric, float(rng.random()))
                     for t in ts]
    _samples(store, rows)
    a = T0 + rng.integers(-5 * S, 310 * S, 2000)
    b = a + rng.integers(0, 120 * S, 2000)
    hosts = rng.choice(np.array(["h1", "h2", "h3", None], dtype=object), 2000)
    fast = section_counters(store, hosts, a, b)
    ref = section_means_sql(store, hosts, a, b)
    assert set(fast) == set(ref) == {PSI_CPU, "system.cpu.run_queue", GPU_UTIL}
    for m in ref:
        np.testing.assert_allclose(fast[m], ref[m], rtol=1e-9, atol=1e-12, equal_nan=True)


def test_a_hole_between_collector_runs_describes_nothing():
    """A sample hours after the previous one of its series (two recordings in one folder)
    does not hold its value back over the hole: a section inside it gets no value, one half
    in it the mean of the part described."""
    store = Store()
    _samples(store, [(T0 + k * S, "h", None, "host.pressure", None, PSI_CPU, 0.2)
                     for k in range(5)] +
             [(T0 + 3600 * S + k * S, "h", None, "host.pressure", None, PSI_CPU, 0.9)
              for k in range(5)])
    start = np.array([T0 + 100 * S, T0 + 3 * S, T0 + 3599 * S])
    end = np.array([T0 + 200 * S, T0 + 5 * S, T0 + 3603 * S])
    hosts = np.array(["h"] * 3, dtype=object)
    got = section_counters(store, hosts, start, end)[PSI_CPU]
    ref = section_means_sql(store, hosts, start, end)[PSI_CPU]
    assert np.isnan(got[0])  # inside the hole: absent (it was 0.9 from a sample an hour on)
    assert got[1] == pytest.approx(0.2)  # half described, by the first run
    assert got[2] == pytest.approx(0.9)  # 3 of its 4 s described by the second run
    np.testing.assert_allclose(got, ref, equal_nan=True)


def test_no_counters_no_join():
    store = Store()
    assert section_counters(store, np.array(["h"], dtype=object), np.array([T0]),
                            np.array([T0 + S])) == {}


def _ev(n, **metrics):
    return {m: np.full(n, v, dtype=float) for m, v in metrics.items()}


def _shares(*rows):
    return np.array([[r.get(c, 0.0) for c in CLASSES] for r in rows])


def test_contention_turns_a_runnable_threads_waiting_into_cpu_but_not_a_sleepers():
    shares = _shares({"cpu": 0.5, "io": 0.5}, {"cpu": 0.05, "io": 0.95})
    ev = _ev(2, **{PSI_CPU: 0.95, "system.cpu.run_queue": 4.0, "system.cpu.logical.count": 2})
    out, conf, notes = adjust(shares, np.full(2, 0.8), ev, np.zeros(2, bool),
                              ivcsw=np.array([500, 0]), vcsw=np.array([1, 40]),
                              child_cpu=np.zeros(2))
    assert out[0, CLASSES.index("cpu")] == pytest.approx(1.0)
    assert "PSI cpu 95%" in notes[0] and "run queue 4.0 on 2 cores" in notes[0]
    assert out[1, CLASSES.index("io")] == pytest.approx(0.95)  # it blocked: still io
    assert notes[1] is None


def test_a_thread_that_mostly_slept_waited_no_longer_for_a_cpu_than_it_computed_allows():
    """Counts do not measure time (the whatif-branches flake): a tool waiting 0.6 s on a
    socket that computed 6 ms and was preempted 3x while it parsed the answer, blocked once,
    on a saturated host, waited at most a few of its fair shares and slices for a CPU: io
    stays io. A thread that computed half its span under the same counts is not capped."""
    shares = _shares({"cpu": 0.01, "io": 0.99}, {"cpu": 0.5, "io": 0.5})
    ev = _ev(2, **{PSI_CPU: 0.5, "system.cpu.run_queue": 4.0, "system.cpu.logical.count": 2})
    out, _, notes = adjust(shares, np.full(2, 0.8), ev, np.zeros(2, bool),
                           ivcsw=np.array([3, 3]), vcsw=np.array([1, 1]),
                           child_cpu=np.zeros(2), thread_busy=np.array([0.01, 0.5]),
                           length_ns=np.full(2, 0.6 * S))
    io, cpu = CLASSES.index("io"), CLASSES.index("cpu")
    # at most 3 x 6 ms (fair share at p = 0.5) + 3 x 20 ms (slices): 78 ms of the 600
    assert out[0, cpu] <= 0.01 + 0.078 / 0.6 + 1e-9
    assert out[0, io] > 0.8
    assert out[1, cpu] == pytest.approx(1.0)  # 0.5 s computed: its 0.3 s wait is plausible
    assert "was runnable work waiting for a CPU" in notes[1]


def test_contention_over_child_processes_that_computed_and_were_preempted_is_cpu():
    """A tool waiting on its compiler (child CPU half the span) on a saturated host: the
    children were preempted far more than they blocked, so they were runnable: cpu. A tool
    whose child mostly blocked (a network client), or computed little, stays io."""
    shares = _shares(*[{"cpu": 0.5, "io": 0.5}] * 2, {"cpu": 0.1, "io": 0.9})
    ev = _ev(3, **{PSI_CPU: 0.9, "system.cpu.run_queue": 4.0, "system.cpu.logical.count": 2})
    out, _, notes = adjust(shares, np.full(3, 0.8), ev, np.zeros(3, bool),
                           ivcsw=np.zeros(3), vcsw=np.full(3, 4), child_cpu=np.full(3, 1e8),
                           children=(np.array([120, 3, 40]), np.array([6, 9, 5]),
                                     np.array([0.5, 0.5, 0.1])))
    assert out[0, CLASSES.index("cpu")] == pytest.approx(1.0)
    assert "child processes computing, preempted 120x, blocked 6x" in notes[0]
    assert out[1, CLASSES.index("io")] == pytest.approx(0.5)  # the children blocked
    assert out[2, CLASSES.index("io")] == pytest.approx(0.9)  # they computed little


def test_gpu_counters_decide_an_inference_wait():
    shares = _shares(*[{"gpu": 1.0}] * 4)
    ev = _ev(4, **{GPU_UTIL: 0.0})
    ev[GPU_UTIL][:] = [0.95, 0.02, 0.02, 0.95]
    ev["model_server.requests.waiting"] = np.array([0.0, 0.0, 6.0, 0.0])
    ev["model_server.kv_cache.usage"] = np.array([0.5, 0.5, 0.5, 0.98])
    ev["model_server.preemptions"] = np.array([0.0, 0.0, 0.0, 3.0])
    out, conf, notes = adjust(shares, np.full(4, 0.4), ev, np.ones(4, bool), np.zeros(4),
                              np.zeros(4), np.zeros(4))
    cls = [CLASSES[k] for k in np.argmax(out, axis=1)]
    assert cls == ["gpu", "io", "queue", "memory"]
    assert "GPU busy 95%" in notes[0] and "KV cache 98% full" in notes[3]
    assert conf[0] == 0.8


def test_gpu_idle_and_what_the_critical_paths_did_meanwhile(tmp_path):
    d = tmp_path / "t"
    d.mkdir()
    tid = "ab" * 16
    spans = [SpanRecord(tid, "1" * 16, None, "task", "task", "internal", T0, T0 + 4 * S, "unset",
                        None, "svc", "h", 1, 1, None, None, None, None, None, None, None, None,
                        {}, (), ()),
             SpanRecord(tid, "2" * 16, "1" * 16, "compile", "tool", "internal", T0, T0 + 2 * S,
                        "unset", None, "svc", "h", 1, 1, 2 * S, 0, 0, 0, 0, 0, 0, 0, {}, (), ()),
             SpanRecord(tid, "3" * 16, "1" * 16, "llm", "inference", "client", T0 + 2 * S,
                        T0 + 4 * S, "unset", None, "svc", "h", 1, 1, 0, 0, 0, 0, 0, 0, 0, 0,
                        {"server.address": "127.0.0.1"}, (), ())]
    (d / "spans-h-1-1.jsonl").write_text("".join(spanfile.encode(s) for s in spans))
    util = [0.0, 0.0, 0.0, 0.9, 0.9]  # idle while compiling, busy during the inference
    (d / "samples-h-2-1-collector.jsonl").write_text("".join(
        samplefile.encode(SampleRecord(T0 + k * S, "h", None, "gpu.nvidia", "gpu0",
                                       "hw.gpu.utilization", v)) for k, v in enumerate(util)))
    analysis = agentscope.analyze(d, db=tmp_path / "db")
    gpu = analysis.summary.gpu["gpu0@h"]
    assert gpu["idle"] == pytest.approx(0.5) and gpu["busy"] == pytest.approx(0.45)
    assert gpu["idle_while"] == {"tool cpu": 1.0}
    task = analysis.task_results[0]
    assert [s.cls for s in task.segments] == ["cpu", "gpu"]
    assert "GPU busy 90%" in task.segments[1].evidence
    with Store(tmp_path / "db", read_only=True) as store:
        assert gpu_summary(store.gpu_idle()) == analysis.summary.gpu
    # its intervals pass through a temporary table (gpu_idle.sql), dropped after, whether
    # the query worked or failed, never a table of the user's of the same name
    with Store(tmp_path / "db") as store:
        store.con.execute("CREATE TABLE gpu_intervals AS SELECT 42 AS mine")
        assert gpu_summary(store.gpu_idle()) == analysis.summary.gpu
        store.con.execute("ALTER TABLE task_results RENAME TO gone")
        with pytest.raises(Exception, match="task_results"):
            store.gpu_idle()
        assert store.con.execute("SELECT mine FROM main.gpu_intervals").fetchall() == [(42,)]
        assert not store.con.execute("SELECT * FROM duckdb_tables() WHERE temporary").fetchall()
        store.con.execute("ALTER TABLE gone RENAME TO task_results")
    from agentscope.exporters.table import markdown

    md = markdown(analysis)
    assert "GPU gpu0@h: busy 45%, idle 50% of 4.0 s" in md and "tool cpu 100%" in md


# ---- real runs, bottleneck known by construction ---------------------------------------------
def _run_and_analyze(tmp_path, *args, work_s="0.6", cpus=None, collector=True):
    env = {**os.environ, "CONTEND_WORK_S": work_s}
    env.pop("AGENTSCOPE_COLLECT", None)
    if cpus:
        env["CONTEND_CPUS"] = ",".join(str(c) for c in cpus)
    under = [sys.executable, "-m", "agentscope.cli", "run", "--trace-dir", str(tmp_path),
             "--hz", "20", "--"] if collector else []
    if not collector:  # spans only: the agents write their spans, nothing samples counters
        env["AGENTSCOPE_TRACE_DIR"] = str(tmp_path)
    r = subprocess.run([*under, sys.executable, str(WORKLOAD), *args], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "agentscope.cli", "analyze", str(tmp_path),
                        "--format", "json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["inline", "child"])
def test_agents_contending_for_the_cpu_read_as_cpu(tmp_path, mode):
    """Twice as many agents as cores, each with a CPU-bound tool (in its thread, or in a
    child process): each tool gets about half a core, and is runnable and waiting the rest of
    the time. The span alone sees half on-CPU, half waiting; the counters say on what."""
    available = sorted(os.sched_getaffinity(0))
    cpus = available[:4]  # at most 4 CPUs, twice as many agents, wherever this runs
    if len(cpus) < len(available) and not os.path.exists("/proc/pressure/cpu"):
        pytest.skip("agents confined to some CPUs of a larger machine: only PSI shows that")
    agents = 2 * len(cpus)
    report = _run_and_analyze(tmp_path, str(agents), mode, cpus=cpus)
    assert len(report["tasks"]) == agents
    for t in report["tasks"]:
        assert t["bottleneck"] == "cpu", t["evidence"]
        assert t["shares"]["cpu"] >= 0.85, t["evidence"]
        # the counters say so, or the span's own counts did first (issue 15)
        assert "host CPU saturated" in t["evidence"][0] or \
            "runnable, waiting for a CPU" in t["evidence"][0], t["evidence"]


@pytest.mark.slow
def test_contention_reads_as_cpu_from_the_spans_alone(tmp_path):
    """The same contended agents with no collector at all (``agentscope.init`` only, issue 15
    case 1): each tool's child process computed and was preempted, never blocked, so its
    span's waiting was runnable time, and the span's own counts say so."""
    available = sorted(os.sched_getaffinity(0))
    cpus = available[:2]
    agents = 2 * len(cpus)
    report = _run_and_analyze(tmp_path, str(agents), "child", cpus=cpus, collector=False)
    assert not list(tmp_path.glob("samples-*-collector.jsonl"))  # no counters sampled
    assert len(report["tasks"]) == agents
    for t in report["tasks"]:
        assert t["bottleneck"] == "cpu", t["evidence"]
        assert t["shares"]["cpu"] >= 0.85, t["evidence"]
        assert "its child processes were runnable, waiting for a CPU" in t["evidence"][0]


@pytest.mark.slow
def test_a_tool_waiting_on_io_on_an_idle_host_reads_as_io(tmp_path):
    report = _run_and_analyze(tmp_path, "sleep", work_s="0.5")
    (t,) = report["tasks"]
    assert t["bottleneck"] == "io" and t["shares"]["io"] >= 0.9
    # the evidence rules contention out where the host was calm meanwhile; on a busy machine
    # (other jobs saturating the CPUs) it says nothing of the host, and never that the
    # sleeping thread waited for a CPU
    a = agentscope.analyze(tmp_path, db=":memory:")
    (start_ns, end_ns), = a.query_rows(
        "SELECT start_ns, end_ns FROM spans WHERE name = 'fetch'")[1]

    def mean(metric, during=True):
        when = f" AND ts_ns BETWEEN {start_ns} AND {end_ns}" if during else ""
        return a.query_rows(f"SELECT avg(value) FROM samples WHERE metric = '{metric}'"
                            + when)[1][0][0]

    psi, runq, cores = mean(PSI_CPU), mean(RUN_QUEUE), mean(CORES, during=False)
    if None not in (psi, runq, cores) and psi < CONTENTION / 2 and runq < cores:
        assert "host not saturated" in t["evidence"][0]
    assert "waiting for a CPU" not in t["evidence"][0]


def test_gpu_of_the_serving_process_where_known():
    """Two GPUs: gpu0 busy with another job, gpu1 (used by the model server, pid 77) idle. A
    section of the server's own span gets gpu1's utilization; a section of a process whose
    GPU is unknown gets the busiest GPU of its host."""
    store = Store()
    rows = []
    for k in range(11):
        rows.append((T0 + k * S // 10, "h", None, "gpu.nvidia", "gpu0", GPU_UTIL, 0.97))
        rows.append((T0 + k * S // 10, "h", None, "gpu.nvidia", "gpu1", GPU_UTIL, 0.02))
    rows.append((T0, "h", 77, "gpu.nvidia", "gpu1", "process.gpu.memory.usage", 4e10))
    _samples(store, rows)
    got = section_counters(store, np.array(["h", "h"], dtype=object),
                           np.array([T0 + S // 5] * 2), np.array([T0 + 4 * S // 5] * 2),
                           np.array([77, 5]))[GPU_UTIL]
    assert got[0] == pytest.approx(0.02) and got[1] == pytest.approx(0.97)


def test_memory_pressure_takes_its_share_of_the_waiting():
    shares = _shares({"cpu": 0.2, "io": 0.8}, {"cpu": 0.2, "io": 0.8})
    ev = _ev(2, **{"system.pressure.memory.some": 0.0, "system.paging.swap_in": 0.0,
                   PSI_CPU: 0.0, "system.cpu.run_queue": 0.5, "system.cpu.logical.count": 2})
    ev["system.pressure.memory.some"][:] = [0.6, 0.01]
    ev["system.paging.swap_in"][:] = [1200.0, 0.0]
    out, conf, notes = adjust(shares, np.full(2, 0.8), ev, np.zeros(2, bool), np.zeros(2),
                              np.ones(2), np.zeros(2))
    assert out[0, CLASSES.index("memory")] == pytest.approx(0.6)
    assert out[0, CLASSES.index("io")] == pytest.approx(0.2)
    assert "PSI memory 60%" in notes[0] and "1200 pages/s swapped in" in notes[0]
    assert out[1, CLASSES.index("io")] == pytest.approx(0.8)  # 1 %: below the threshold
    assert "host not saturated" in notes[1]


def test_a_remote_model_servers_inference_is_not_judged_by_this_hosts_gpu():
    """This host's GPU is idle, but the inference went to a server elsewhere: its verdict stays
    what the span says (server-reported model time: gpu), not 'the GPU was idle'."""
    shares = _shares({"gpu": 1.0}, {"gpu": 1.0})
    ev = _ev(2, **{GPU_UTIL: 0.01})
    out, conf, notes = adjust(shares, np.full(2, 0.8), ev, np.ones(2, bool), np.zeros(2),
                              np.zeros(2), np.zeros(2), server_local=np.array([False, True]))
    assert [CLASSES[k] for k in np.argmax(out, axis=1)] == ["gpu", "io"]
    assert notes[0] is None and "GPU idle" in notes[1]


def test_an_inference_spinning_on_a_busy_gpu_is_gpu_and_one_on_an_idle_gpu_is_cpu():
    """CUDA synchronises by spinning: an inference waiting for its GPU shows ~100 % on-CPU.
    With the GPU busy meanwhile that is GPU work; with it idle (a model run on the CPU) it
    stays cpu."""
    shares = _shares({"cpu": 0.97, "io": 0.03}, {"cpu": 0.97, "io": 0.03})
    ev = _ev(2, **{GPU_UTIL: 0.0})
    ev[GPU_UTIL][:] = [0.99, 0.0]
    out, conf, notes = adjust(shares, np.full(2, 0.8), ev, np.ones(2, bool), np.zeros(2),
                              np.zeros(2), np.zeros(2), server_local=np.ones(2, bool))
    assert out[0, CLASSES.index("gpu")] == pytest.approx(1.0)
    assert "host side of the GPU work" in notes[0]
    assert out[1, CLASSES.index("cpu")] == pytest.approx(0.97)


@pytest.mark.slow
def test_the_prepared_gpu_device_check_runs_its_cpu_path(tmp_path):
    """benchmarks/gpu_device_check.py is the script to run when a GPU machine is lent; here,
    without a GPU, its CPU path must run and pass its own checks."""
    script = Path(__file__).parents[1] / "benchmarks" / "gpu_device_check.py"
    r = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "g"),
                        "--tasks", "1"], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checks passed" in r.stdout
    assert json.loads((tmp_path / "g" / "report.json").read_text())["tasks"]


def test_gil_contention_turns_a_computing_threads_waiting_into_cpu():
    from agentscope.analyzers.counters import GIL_WAIT

    shares = _shares({"cpu": 0.2, "io": 0.8}, {"cpu": 0.0, "io": 1.0}, {"cpu": 0.2, "io": 0.8})
    ev = _ev(3, **{GIL_WAIT: 0.0})
    ev[GIL_WAIT][:] = [0.0055, 0.0055, 0.0002]
    out, conf, notes = adjust(shares, np.full(3, 0.8), ev, np.zeros(3, bool), np.zeros(3),
                              np.full(3, 30), np.zeros(3))
    assert out[0, CLASSES.index("cpu")] == pytest.approx(1.0)
    assert "interpreter lock contended" in notes[0] and "5.5 ms" in notes[0]
    assert out[1, CLASSES.index("io")] == pytest.approx(1.0)  # it never computed: I/O
    assert out[2, CLASSES.index("io")] == pytest.approx(0.8)  # GIL free (0.2 ms: timer slack)


def test_an_agents_own_short_wait_between_steps_in_a_gil_contended_process_is_cpu():
    """A task's own time between two steps, off-CPU, in a process whose GIL probe waited 6 ms
    a wake-up: 20 ms is a few GIL waits (cpu); 200 ms is something else (io); a tool's 20 ms
    off-CPU is its own waiting (io)."""
    from agentscope.analyzers.counters import GIL_WAIT

    shares = _shares(*[{"cpu": 0.01, "io": 0.99}] * 3)
    ev = _ev(3, **{GIL_WAIT: 0.006})
    out, _, notes = adjust(shares, np.full(3, 0.8), ev, np.zeros(3, bool), np.zeros(3),
                           np.full(3, 2), np.zeros(3), orchestration=np.array([1, 1, 0], bool),
                           length_ns=np.array([20e6, 200e6, 20e6]))
    assert out[0, CLASSES.index("cpu")] == pytest.approx(1.0)
    assert "own code between steps" in notes[0]
    assert out[1, CLASSES.index("io")] == pytest.approx(0.99)
    assert out[2, CLASSES.index("io")] == pytest.approx(0.99)


def test_no_gpu_on_the_host_means_a_local_inference_did_not_wait_on_one():
    """Host "h" had a collector that found no NVIDIA GPU; host "g" had one that did. An
    inference assumed to wait on a local accelerator (no server timing) on "h" waited on
    something else: io. Where its server reported model time, or on "g", it stays gpu."""
    from agentscope.analyzers.counters import NO_GPU

    store = Store()
    _samples(store, [(T0 + k * S, h, None, "gpu.nvidia", None, "agentscope.collector.up", v)
                     for k in range(3) for h, v in (("h", 0.0), ("g", 1.0 if k else 0.0))]
             + [(T0 + k * S, h, None, "host.pressure", None, PSI_CPU, 0.0)
                for k in range(3) for h in "hg"])
    hosts = np.array(["h", "h", "g", "h"], dtype=object)
    ev = section_counters(store, hosts, np.array([T0, T0, T0, T0 + 5 * S]),
                          np.array([T0 + 2 * S] * 3 + [T0 + 6 * S]))
    # the last section is on "h" too, but after its collector's run: not known
    assert ev[NO_GPU].tolist() == [1.0, 1.0, 0.0, 0.0]
    ev = {m: v[:3] for m, v in ev.items()}
    shares = _shares(*[{"cpu": 0.1, "gpu": 0.9}] * 3)
    out, _, notes = adjust(shares, np.full(3, 0.4), ev, np.ones(3, bool), np.zeros(3),
                           np.full(3, 3), np.zeros(3), server_local=np.ones(3, bool),
                           model_s=np.array([0.0, 0.5, 0.0]))
    assert out[0, CLASSES.index("io")] == pytest.approx(0.9)
    assert "no GPU on this host" in notes[0]
    assert out[1, CLASSES.index("gpu")] == pytest.approx(0.9)  # the server said: model time
    assert out[2, CLASSES.index("gpu")] == pytest.approx(0.9)  # this host has a GPU


def test_threads_paging_in_behind_the_gil_wait_for_memory():
    """Four threads of one process read an evicted mapped file at once: each faults while
    holding the GIL, so the others wait. A section that took faults itself, with the GIL
    contended and the tree paging in (8,000 major faults/s), waited for memory; one that took
    none (an I/O wait in the same process), or with the GIL free, keeps its verdict."""
    from agentscope.analyzers.counters import GIL_WAIT, TREE_FAULTS

    shares = _shares(*[{"memory": 0.3, "io": 0.7}] * 3)
    ev = _ev(3, **{GIL_WAIT: 0.02, TREE_FAULTS: 8000.0})
    ev[GIL_WAIT][2] = 0.0002
    out, _, notes = adjust(shares, np.full(3, 0.8), ev, np.zeros(3, bool), np.zeros(3),
                           np.full(3, 30), np.zeros(3), faults=np.array([6000.0, 0.0, 6000.0]))
    assert out[0, CLASSES.index("memory")] == pytest.approx(1.0)
    assert "behind other threads' page-ins" in notes[0] and "8000 major faults/s" in notes[0]
    assert out[1, CLASSES.index("io")] == pytest.approx(0.7)
    assert out[2, CLASSES.index("io")] == pytest.approx(0.7)


def test_per_process_counters_join_only_that_process():
    from agentscope.analyzers.counters import GIL_WAIT

    store = Store()
    _samples(store, [(T0 + k * S // 10, "h", 41, "python", None, GIL_WAIT, 0.006)
                     for k in range(11)])
    got = section_counters(store, np.array(["h", "h"], dtype=object),
                           np.array([T0 + S // 5] * 2), np.array([T0 + 4 * S // 5] * 2),
                           np.array([41, 42]))[GIL_WAIT]
    assert got[0] == pytest.approx(0.006) and np.isnan(got[1])


@pytest.mark.slow
def test_threads_contending_for_the_gil_read_as_cpu_and_a_sleeper_as_io(tmp_path):
    """Four threads of one process run Python for 0.4 s of CPU each: each holds the GIL a
    quarter of the time and waits for it the rest, which span data reads as off-CPU. The
    in-process sampler's GIL probe says what the wait was. A fifth thread sleeps: io."""
    code = textwrap.dedent(f"""
        import threading, time, agentscope
        agentscope.init({str(tmp_path)!r}, collect=50)

        def crunch(k):
            with agentscope.task(f"crunch-{{k}}", new_trace=True):
                with agentscope.stage("context", name="assemble"):
                    end = time.thread_time() + 0.4
                    while time.thread_time() < end:
                        sum(range(200))

        def nap():
            with agentscope.task("nap", new_trace=True):
                with agentscope.stage("tool", name="fetch"):
                    time.sleep(1.0)

        threads = [threading.Thread(target=crunch, args=(k,)) for k in range(4)]
        threads.append(threading.Thread(target=nap))
        for t in threads: t.start()
        for t in threads: t.join()
        agentscope.shutdown()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env={**os.environ, "AGENTSCOPE_TRACE_DIR": "", "AGENTSCOPE_COLLECT": ""},
                   cwd=tmp_path)
    r = subprocess.run([sys.executable, "-m", "agentscope.cli", "analyze", str(tmp_path),
                        "--format", "json"], capture_output=True, text=True, timeout=120)
    tasks = {t["name"]: t for t in json.loads(r.stdout)["tasks"]}
    assert tasks["nap"]["bottleneck"] == "io"
    for k in range(4):
        t = tasks[f"crunch-{k}"]
        assert t["bottleneck"] == "cpu" and t["shares"]["cpu"] >= 0.85, t["evidence"]
    assert any("interpreter lock" in tasks[f"crunch-{k}"]["evidence"][0] for k in range(4))


def test_model_server_metrics_alone_settle_an_inferences_wait():
    """No GPU counters, but the model server's (--model-server): an inference waiting on its
    endpoint (io) while the server had requests running was the model's compute; the share
    of requests that waited for a slot was its queue; a server on this host, which has no
    GPU, computed on the CPU; an idle server says nothing."""
    shares = _shares(*[{"io": 0.9, "cpu": 0.1}] * 4)
    ev = _ev(4, **{"model_server.requests.running": 1.0})
    ev["model_server.requests.waiting"] = np.array([0.0, 3.0, 0.0, 0.0])
    ev["model_server.requests.running"][3] = 0.0
    ev["host_without_gpu"] = np.array([0.0, 0.0, 1.0, 0.0])
    out, conf, notes = adjust(shares, np.full(4, 0.8), ev, np.ones(4, bool), np.zeros(4),
                              np.zeros(4), np.zeros(4), server_local=np.ones(4, bool))
    k = {c: CLASSES.index(c) for c in CLASSES}
    assert out[0, k["gpu"]] == pytest.approx(0.9) and out[0, k["io"]] == pytest.approx(0)
    assert out[1, k["queue"]] == pytest.approx(0.9 * 3 / 4)
    assert out[1, k["gpu"]] == pytest.approx(0.9 / 4)
    assert out[2, k["cpu"]] == pytest.approx(1.0)  # its host has no GPU: computed on the CPU
    assert "1.0 requests running, 0.0 waiting" in notes[0]
    assert "on the CPU (its host has no GPU)" in notes[2]
    assert out[3, k["io"]] == pytest.approx(0.9) and notes[3] is None  # the server was idle
    assert conf[0] == 0.8
