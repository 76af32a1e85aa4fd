"""Collectors: sources on recorded /proc files and recorded NVML answers, the model-server
scrape, the sampler's survival, and `agentscope run` / `agentscope collect` with real children."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentscope.collectors import Sampler, SourceUnavailable, default_sources
from agentscope.collectors.gpu import NvidiaGPU
from agentscope.collectors.host import DiskNet, HostCPU, Memory, Pressure, host_sources
from agentscope.collectors.modelserver import PrometheusEndpoint, parse_text
from agentscope.collectors.proctree import ProcessTree
from agentscope.formats import samplefile

S = 1_000_000_000


def _proc(root: Path, files: dict) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))


def _by_metric(readings) -> dict:
    return {(r.metric, r.device): r.value for r in readings}


# ---- host sources on recorded files -----------------------------------------------------------
STAT_1 = """
cpu  100 0 100 700 100 0 0 0 0 0
cpu0 50 0 50 350 50 0 0 0 0 0
cpu1 50 0 50 350 50 0 0 0 0 0
intr 1 2 3
procs_running 5
procs_blocked 1
"""
STAT_2 = """
cpu  250 0 150 800 100 0 0 0 0 0
cpu0 150 0 50 350 50 0 0 0 0 0
cpu1 100 0 100 450 50 0 0 0 0 0
procs_running 3
procs_blocked 0
"""


def test_host_cpu_on_recorded_proc_stat(tmp_path):
    _proc(tmp_path, {"stat": STAT_1, "loadavg": "3.50 2.00 1.00 4/300 999\n"})
    src = HostCPU(str(tmp_path))
    first = _by_metric(src.sample(0))
    assert ("system.cpu.utilization", None) not in first  # a rate needs two samples
    # runnable tasks (procs_running, less the sampler itself)
    assert first[("system.cpu.run_queue", None)] == 4
    assert first[("system.cpu.logical.count", None)] == 2
    assert first[("system.cpu.load_average.1m", None)] == 3.5
    _proc(tmp_path, {"stat": STAT_2})
    second = _by_metric(src.sample(S))
    # all cores: 200 busy + 100 idle jiffies more -> 2/3 busy; cpu0 all busy; cpu1 half
    assert second[("system.cpu.utilization", None)] == pytest.approx(2 / 3)
    assert second[("system.cpu.utilization", "cpu0")] == pytest.approx(1.0)
    assert second[("system.cpu.utilization", "cpu1")] == pytest.approx(0.5)
    assert second[("system.processes.blocked", None)] == 0
    # /proc/stat moves in 10 ms ticks: read at most every 50 ms; in between, the run queue
    # comes from loadavg's "4/300"
    soon = _by_metric(src.sample(S + S // 100))
    assert ("system.cpu.utilization", None) not in soon
    assert soon[("system.cpu.run_queue", None)] == 3
    (tmp_path / "loadavg").unlink()
    assert _by_metric(HostCPU(str(tmp_path)).sample(0))[("system.cpu.run_queue", None)] == 2


def test_pressure_is_computed_per_interval_from_the_totals(tmp_path):
    line = "some avg10=9.99 avg60=0.00 avg300=0.00 total={}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={}\n"
    _proc(tmp_path, {f"pressure/{r}": line.format(1000, 0) for r in ("cpu", "memory", "io")})
    src = Pressure(str(tmp_path))
    assert src.sample(0) == []
    _proc(tmp_path, {"pressure/cpu": line.format(1000 + 250_000, 0),  # 0.25 s stalled in 0.5 s
                     "pressure/memory": line.format(1000, 0),
                     "pressure/io": line.format(1000 + 500_000, 100_000)})
    got = _by_metric(src.sample(S // 2))
    assert got[("system.pressure.cpu.some", None)] == pytest.approx(0.5)  # not avg10's 9.99 %
    assert got[("system.pressure.memory.some", None)] == 0.0
    assert got[("system.pressure.io.some", None)] == pytest.approx(1.0)
    assert got[("system.pressure.io.full", None)] == pytest.approx(0.2)


def test_pressure_absent_where_the_kernel_has_no_psi(tmp_path):
    _proc(tmp_path, {"stat": STAT_1, "meminfo": "MemTotal: 1 kB\n", "diskstats": ""})
    with pytest.raises(SourceUnavailable, match="pressure"):
        Pressure(str(tmp_path))
    made, absent = host_sources(str(tmp_path))
    assert "host.pressure" in [name for name, _ in absent]
    assert "host.cpu" in [s.name for s in made]


def test_memory_and_paging_rates(tmp_path):
    meminfo = "MemTotal:  1000 kB\nMemFree:  100 kB\nMemAvailable:  400 kB\nSwapTotal:  50 kB\nSwapFree:  20 kB\n"
    _proc(tmp_path, {"meminfo": meminfo, "vmstat": "nr_free_pages 1\npswpin 10\npswpout 0\npgmajfault 100\n"})
    src = Memory(str(tmp_path))
    first = _by_metric(src.sample(0))
    assert first[("system.memory.usage", None)] == 600 * 1024
    assert first[("system.memory.available", None)] == 400 * 1024
    assert first[("system.swap.usage", None)] == 30 * 1024
    _proc(tmp_path, {"vmstat": "nr_free_pages 1\npswpin 30\npswpout 5\npgmajfault 300\n"})
    got = _by_metric(src.sample(2 * S))
    assert got[("system.paging.swap_in", None)] == 10  # pages per second
    assert got[("system.paging.swap_out", None)] == 2.5
    assert got[("system.paging.major_faults", None)] == 100


def test_disk_and_network_rates(tmp_path):
    disk = "   8       0 vda {r} 0 {rs} 0 {w} 0 {ws} 0 0 {busy} 0 0 0 0 0 0 0\n   7       0 loop0 1 0 999999 0 1 0 999999 0 0 0 0\n"
    net = ("Inter-| Receive | Transmit\n face |bytes packets\n"
           "    lo: 999999 1 0 0 0 0 0 0 999999 1 0 0 0 0 0 0\n"
           "  eth0: {rx} 1 0 0 0 0 0 0 {tx} 1 0 0 0 0 0 0\n")
    _proc(tmp_path, {"diskstats": disk.format(r=1, rs=0, w=1, ws=0, busy=0),
                     "net/dev": net.format(rx=0, tx=0), "sys/block/vda/size": "1",
                     "sys/block/loop0/size": "1"})
    src = DiskNet(str(tmp_path), str(tmp_path / "sys"))
    assert src.sample(0) == []
    _proc(tmp_path, {"diskstats": disk.format(r=2, rs=2048, w=2, ws=1024, busy=500),
                     "net/dev": net.format(rx=1000, tx=4000)})
    got = _by_metric(src.sample(S))
    assert got[("system.disk.io.read", None)] == 2048 * 512  # loop devices left out
    assert got[("system.disk.io.write", None)] == 1024 * 512
    assert got[("system.disk.utilization", None)] == pytest.approx(0.5)
    assert got[("system.network.io.receive", None)] == 1000  # loopback left out
    assert got[("system.network.io.transmit", None)] == 4000


# ---- the process tree ------------------------------------------------------------------------
def _stat(pid: int, comm: str, utime: int, stime: int, cutime: int = 0, rss: int = 10,
          start: int = 77, ppid: int = 1) -> str:
    f = [pid, f"({comm})", "S", ppid, 1, 1, 0, -1, 0, 0, 0, 2, 0, utime, stime, cutime, 0, 20, 0,
         1, 0, start, 0, rss]
    return " ".join(str(x) for x in f) + " 0 0 0\n"


def test_process_tree_on_recorded_proc(tmp_path):
    tick = os.sysconf("SC_CLK_TCK")
    _proc(tmp_path, {
        "10/stat": _stat(10, "python agent (main)", 100, 0),
        "10/task/10/children": "11\n", "10/task/10/schedstat": "0 0 0\n",
        "10/task/12/children": "", "10/task/12/schedstat": "0 0 0\n",
        "11/stat": _stat(11, "cc1", 0, 0, ppid=10), "11/task/11/children": "",
        "11/task/11/schedstat": "0 0 0\n",
    })
    src = ProcessTree(10, str(tmp_path), discover_interval_s=0, per_process_hz=1e9,
                      stat_interval_s=0)
    src.sample(0)
    assert set(src.members) == {10, 11}
    _proc(tmp_path, {
        # per thread: on-CPU ns, runnable-waiting ns, times switched onto a CPU
        "10/task/10/schedstat": "500000000 100000000 5\n",  # 0.5 s CPU, 0.1 s waiting
        "11/task/11/schedstat": "1000000000 400000000 50\n",  # 1 s CPU, 0.4 s waiting
    })
    got = {(r.metric, r.pid): r.value for r in src.sample(S)}
    assert got[("agentscope.tree.cpu.utilization", 10)] == pytest.approx(1.5)
    assert got[("agentscope.tree.runqueue_wait", 10)] == pytest.approx(0.5)
    assert got[("agentscope.tree.processes", 10)] == 2
    assert got[("agentscope.tree.threads", 10)] == 3
    assert got[("process.cpu.utilization", 11)] == pytest.approx(1.0)
    assert got[("process.runqueue_wait", 11)] == pytest.approx(0.4)
    assert got[("process.context_switches", 10)] == 5
    # the compiler exits and is reaped: its 1.25 s of CPU move into the parent's cutime; the
    # 1 s already counted is not counted again
    (tmp_path / "10" / "task" / "10" / "children").write_text("")
    _proc(tmp_path, {"10/stat": _stat(10, "python agent (main)", 100, 0,
                                      cutime=tick + tick // 4)})
    got = {(r.metric, r.pid): r.value for r in src.sample(2 * S)}
    assert got[("agentscope.tree.cpu.utilization", 10)] == pytest.approx(0.25)
    assert got[("agentscope.tree.processes", 10)] == 1
    assert set(src.members) == {10}


def test_process_tree_follows_real_children_that_come_and_go():
    src = ProcessTree(os.getpid(), discover_interval_s=0, stat_interval_s=0)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        src.sample(time.time_ns())
        assert child.pid in src.members
        child.kill()
        child.wait()
        got = {(r.metric, r.pid): r.value for r in src.sample(time.time_ns())}  # no raise
        assert child.pid not in src.members
        assert got[("agentscope.tree.processes", os.getpid())] >= 1
    finally:
        child.kill()


def test_process_tree_absent_for_a_missing_process(tmp_path):
    with pytest.raises(SourceUnavailable):
        ProcessTree(4242, str(tmp_path))


# ---- NVML on recorded answers ----------------------------------------------------------------
class FakeNVML:
    """Recorded NVML answers for two GPUs: the first supports everything, the second has no
    utilization history and no power reading."""

    NVML_GPU_UTILIZATION_SAMPLES, NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 1, 2
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1

    class NVMLError_NotSupported(Exception):
        pass

    def __init__(self) -> None:
        self.calls = 0

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return 2
    def nvmlDeviceGetHandleByIndex(self, i): return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=[97, 3][h], memory=[60, 1][h])

    def nvmlDeviceGetSamples(self, h, kind, last_seen):
        if h == 1:
            raise self.NVMLError_NotSupported()
        samples = [SimpleNamespace(timeStamp=t, sampleValue=SimpleNamespace(uiVal=v))
                   for t, v in ((1_000_000, 10), (1_166_000, 100), (1_333_000, 90))]
        return 1, [s for s in samples if s.timeStamp > last_seen]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=[70e9, 1e9][h], total=141e9)

    def nvmlDeviceGetPowerUsage(self, h):
        if h == 1:
            raise self.NVMLError_NotSupported()
        return 650_000

    def nvmlDeviceGetClockInfo(self, h, clock): return {1: 1980, 2: 2619}[clock]
    def nvmlDeviceGetPcieThroughput(self, h, counter): return [1000, 2000][counter]
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return [0, 4][h]
    def nvmlDeviceGetTotalEnergyConsumption(self, h): return 5_000_000

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=4242, usedGpuMemory=68e9)] if h == 0 else []


def test_nvml_readings_from_recorded_answers():
    src = NvidiaGPU(FakeNVML())
    got = src.sample(2 * S)
    util0 = [(r.ts_ns, r.value) for r in got
             if r.metric == "hw.gpu.utilization" and r.device == "gpu0"]
    # the driver's own samples, each at its own time (a burst between polls is kept)
    assert util0 == [(1_000_000_000, 0.1), (1_166_000_000, 1.0), (1_333_000_000, 0.9)]
    by = _by_metric(got)
    assert by[("hw.gpu.utilization", "gpu1")] == 0.03  # no history: the polled rate
    assert by[("hw.gpu.memory.utilization", "gpu0")] == 0.6
    assert by[("hw.gpu.memory.usage", "gpu0")] == 70e9
    assert by[("hw.gpu.power", "gpu0")] == 650.0
    assert ("hw.gpu.power", "gpu1") not in by  # not supported: absent, not zero
    assert by[("hw.gpu.clock.sm", "gpu0")] == 1980
    assert by[("hw.gpu.io.receive", "gpu0")] == 2000 * 1024
    assert by[("hw.gpu.throttle_reasons", "gpu1")] == 4
    assert by[("hw.gpu.energy", "gpu0")] == 5000.0
    procs = [r for r in got if r.metric == "process.gpu.memory.usage"]
    assert [(r.pid, r.device, r.value) for r in procs] == [(4242, "gpu0", 68e9)]
    # the next poll returns only new history samples, and the slow calls wait a second
    again = src.sample(2 * S + S // 10)
    assert not [r for r in again if r.metric == "hw.gpu.utilization" and r.device == "gpu0"]
    assert not [r for r in again if r.metric == "hw.gpu.energy"]


def test_nvml_absent_without_a_driver():
    class NoDriver(FakeNVML):
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    with pytest.raises(SourceUnavailable, match="NVML"):
        NvidiaGPU(NoDriver())
    _, absent = default_sources(None, gpus=True, nvml=NoDriver())
    assert any(name == "gpu.nvidia" for name, _ in absent)


# ---- model servers ----------------------------------------------------------------------------
VLLM_1 = """
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 8.0
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.97
vllm:num_preemptions_total{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 20.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 2.0
"""


def test_prometheus_text_parsing_with_escapes():
    text = 'a{x="q\\"uo,te}",y="b"} 1.5\nb 2 1700000000000\n# c 3\nbad{x="1"} nope\n'
    assert list(parse_text(text)) == [("a", {"x": 'q"uo,te}', "y": "b"}, 1.5), ("b", {}, 2.0)]


def test_vllm_metrics_become_model_server_readings():
    src = PrometheusEndpoint("127.0.0.1:8000")
    assert src.url == "http://127.0.0.1:8000/metrics"
    first = _by_metric(src.readings(VLLM_1, 0))
    assert first[("model_server.requests.running", "127.0.0.1:8000")] == 8
    assert first[("model_server.requests.waiting", "127.0.0.1:8000")] == 3
    assert first[("model_server.kv_cache.usage", "127.0.0.1:8000")] == 0.97
    labels = '{engine="0",model_name="m"}'
    later = (VLLM_1.replace(f"_total{labels} 10.0", f"_total{labels} 14.0")
             .replace(f"_sum{labels} 20.0", f"_sum{labels} 26.0")
             .replace(f"_count{labels} 10.0", f"_count{labels} 12.0"))
    got = _by_metric(src.readings(later, 2 * S))
    assert got[("model_server.preemptions", "127.0.0.1:8000")] == 2.0  # per second
    assert got[("model_server.time_to_first_token", "127.0.0.1:8000")] == 3.0  # 6 s / 2


def test_model_server_scraped_over_http():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = VLLM_1.encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        src = PrometheusEndpoint(f"http://127.0.0.1:{server.server_port}")
        got = _by_metric(src.sample(0))
        assert got[("model_server.requests.waiting", f"127.0.0.1:{server.server_port}")] == 3
    finally:
        server.shutdown()


# ---- the sampler ------------------------------------------------------------------------------
class Broken:
    name = "broken"

    def sample(self, now_ns):
        raise OSError("device went away")


class Counting:
    name = "counting"

    def __init__(self):
        self.n = 0

    def sample(self, now_ns):
        from agentscope.collectors import Reading

        self.n += 1
        return [Reading("test.value", float(self.n))]


def test_sampler_survives_a_failing_source_and_reports_absent_ones(tmp_path):
    good = Counting()
    s = Sampler(tmp_path, [Broken(), good], absent=[("gpu.nvidia", "no driver")],
                interval_s=0.01)
    s.start()
    time.sleep(0.2)
    s.stop()
    assert good.n >= 5 and s.errors["broken"] >= 5
    rows = list(samplefile.read(str(s.path)))
    up = {r.source: r.value for r in rows if r.metric == "agentscope.collector.up"}
    assert up == {"broken": 1.0, "counting": 1.0, "gpu.nvidia": 0.0}
    assert not [r for r in rows
                if r.source == "gpu.nvidia" and r.metric != "agentscope.collector.up"]
    errors = [r.value for r in rows if r.metric == "agentscope.collector.errors"]
    assert errors and errors[-1] >= 5
    values = [r.value for r in rows if r.metric == "test.value"]
    assert values == sorted(values) and values[-1] == good.n  # the last round at stop


class Snapping:
    """A source that splits sampling: what it read, and when, must come back parsed in order."""

    name = "snapping"

    def __init__(self, fail_snapshot_at=(), fail_parse_at=()):
        self.taken, self.parsed = [], []
        self.fail_snapshot_at, self.fail_parse_at = fail_snapshot_at, fail_parse_at

    def snapshot(self, now_ns):
        if now_ns in self.fail_snapshot_at:
            raise OSError("gone")
        self.taken.append(now_ns)
        return len(self.taken)

    def parse(self, now_ns, snap):
        from agentscope.collectors import Reading

        if now_ns in self.fail_parse_at:
            raise ValueError("garbled")
        self.parsed.append((now_ns, snap))
        return [Reading("test.snap", float(snap))]

    def sample(self, now_ns):
        return self.parse(now_ns, self.snapshot(now_ns))


def test_snapshots_are_taken_each_round_and_parsed_in_order_at_the_write(tmp_path):
    src = Snapping(fail_snapshot_at={3 * S}, fail_parse_at={4 * S})
    s = Sampler(tmp_path, [src], interval_s=1.0, flush_interval_s=10.0)
    for k in range(1, 6):
        s.tick(k * S)
    assert src.taken == [S, 2 * S, 4 * S, 5 * S] and src.parsed == []  # only the reads
    assert s.errors["snapping"] == 1  # the snapshot that raised
    s.flush()
    assert src.parsed == [(S, 1), (2 * S, 2), (5 * S, 4)]  # in order; 4 S failed to parse
    assert s.errors["snapping"] == 2
    rows = [r for r in samplefile.read(str(s.path)) if r.metric == "test.snap"]
    assert [(r.ts_ns, r.value) for r in rows] == [(S, 1.0), (2 * S, 2.0), (5 * S, 4.0)]
    assert s.samples >= 3


def test_process_tree_snapshots_parsed_after_a_member_has_gone(tmp_path):
    """Snapshots wait up to a second to be parsed: a member that went meanwhile must not
    break the parse of the later ones, nor be counted twice."""
    _proc(tmp_path, {
        "10/stat": _stat(10, "agent", 100, 0),
        "10/task/10/children": "11\n", "10/task/10/schedstat": "0 0 0\n",
        "11/stat": _stat(11, "cc1", 0, 0, ppid=10), "11/task/11/children": "",
        "11/task/11/schedstat": "0 0 0\n",
    })
    src = ProcessTree(10, str(tmp_path), discover_interval_s=0, stat_interval_s=0)
    src.sample(0)
    _proc(tmp_path, {"11/task/11/schedstat": "200000000 0 1\n"})
    first = src.snapshot(S)
    shutil.rmtree(tmp_path / "11")  # the compiler is gone
    (tmp_path / "10" / "task" / "10" / "children").write_text("")
    second = src.snapshot(2 * S)
    third = src.snapshot(3 * S)
    got1 = {(r.metric, r.pid): r.value for r in src.parse(S, first)}
    assert got1[("agentscope.tree.cpu.utilization", 10)] == pytest.approx(0.2)
    src.parse(2 * S, second)
    got3 = {(r.metric, r.pid): r.value for r in src.parse(3 * S, third)}
    assert set(src.members) == {10}
    assert got3[("agentscope.tree.cpu.utilization", 10)] == 0
    assert got3[("agentscope.tree.processes", 10)] == 1


def test_sampler_lines_are_the_sample_file_format(tmp_path):
    """The sampler encodes each series' constant part once; its lines must be exactly what
    samplefile.encode writes."""
    from agentscope.collectors import Reading
    from agentscope.records import SampleRecord

    class Src:
        name = "x"

        def sample(self, now_ns):
            return [Reading("m.a", 1.5, "gpu0", 42), Reading("m.b", float("nan")),
                    Reading("m.c", 3, None, None, 777), Reading('m."q"', -0.0, "d\\e")]

    s = Sampler(tmp_path, [Src()], interval_s=1.0)
    s.tick(123)
    s.flush()
    got = [x + "\n" for x in s.path.read_text().splitlines() if '"m.' in x]
    assert got == [samplefile.encode(SampleRecord(123, s.host, 42, "x", "gpu0", "m.a", 1.5)),
                   samplefile.encode(SampleRecord(123, s.host, None, "x", None, "m.b",
                                                  float("nan"))),
                   samplefile.encode(SampleRecord(777, s.host, None, "x", None, "m.c", 3.0)),
                   samplefile.encode(SampleRecord(123, s.host, None, "x", "d\\e", 'm."q"',
                                                  -0.0))]


def test_in_process_collection_with_init(tmp_path):
    code = textwrap.dedent(f"""
        import time, agentscope
        agentscope.init({str(tmp_path)!r}, collect=20)
        with agentscope.task("t"):
            time.sleep(0.3)
        agentscope.shutdown()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={**os.environ, "AGENTSCOPE_TRACE_DIR": ""}, cwd=tmp_path)
    files = list(tmp_path.glob("samples-*-collector.jsonl"))
    assert len(files) == 1
    metrics = {r.metric for r in samplefile.read(str(files[0]))}
    assert {"system.cpu.utilization", "agentscope.tree.cpu.utilization"} <= metrics


# ---- agentscope run / collect ----------------------------------------------------------------
def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "agentscope.cli", *args], capture_output=True,
                          text=True, timeout=60, **kw)


def _run_until_ready(tmp_path, code: str, ready, **popen):
    """`agentscope run` of a Python program that writes ``ready`` once it is set up."""
    p = subprocess.Popen([sys.executable, "-m", "agentscope.cli", "run", "--trace-dir",
                          str(tmp_path), "--", sys.executable, "-c", code], **popen)
    deadline = time.time() + 30
    while not ready.exists() and time.time() < deadline:
        time.sleep(0.05)
    return p


def test_run_passes_the_exit_code_and_the_trace_dir(tmp_path):
    code = ("import os, sys, pathlib; pathlib.Path(os.environ['AGENTSCOPE_TRACE_DIR'], "
            "'seen').write_text(os.environ['AGENTSCOPE_COLLECT']); sys.exit(7)")
    r = _cli("run", "--trace-dir", str(tmp_path), "--", sys.executable, "-c", code)
    assert r.returncode == 7, r.stderr
    assert (tmp_path / "seen").read_text() == "gil"  # sampled by run; the program probes its GIL
    files = list(tmp_path.glob("samples-*-collector.jsonl"))
    assert len(files) == 1 and files[0].read_text().endswith("\n")


def test_run_forwards_signals_and_reports_death_by_signal(tmp_path):
    ready = tmp_path / "ready"
    code = textwrap.dedent(f"""
        import pathlib, signal, sys, time
        def on_term(signum, frame):
            pathlib.Path({str(tmp_path / 'got')!r}).write_text(str(signum))
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        pathlib.Path({str(ready)!r}).write_text("1")
        time.sleep(30)
    """)
    p = _run_until_ready(tmp_path, code, ready, stderr=subprocess.PIPE, text=True)
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    assert (tmp_path / "got").read_text() == str(int(signal.SIGTERM))
    # killed by a signal: 128 + N, as a shell reports it
    r = _cli("run", "--trace-dir", str(tmp_path), "--", sys.executable, "-c",
             "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert r.returncode == 128 + int(signal.SIGKILL)


def test_run_reports_a_missing_program(tmp_path):
    r = _cli("run", "--trace-dir", str(tmp_path), "--", "no-such-program-xyz")
    assert r.returncode == 127 and "cannot start" in r.stderr


def test_collect_sidecar_stops_when_the_watched_process_exits(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    r = _cli("collect", "--out", str(tmp_path), "--pid", str(child.pid), "--hz", "20")
    child.wait()
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for f in tmp_path.glob("samples-*.jsonl")
            for x in f.read_text().splitlines()]
    assert any(x["metric"] == "agentscope.tree.processes" and x["pid"] == child.pid for x in rows)


def test_collect_stops_on_sigterm_and_flushes(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "agentscope.cli", "collect", "--out",
                          str(tmp_path), "--hz", "20", "--no-gpu"],
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not list(tmp_path.glob("samples-*.jsonl")) and time.time() < deadline:
        time.sleep(0.1)  # the first write comes after a second of samples
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0
    rows = [json.loads(x) for f in tmp_path.glob("samples-*.jsonl")
            for x in f.read_text().splitlines()]
    assert any(r["metric"] == "agentscope.collector.cpu" for r in rows)  # the final round
    assert "samples in" in p.stderr.read()


def test_sampler_keeps_going_when_it_cannot_write(tmp_path, caplog):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    s = Sampler(blocked / "traces", [Counting()], interval_s=0.01)
    s.tick(0, final=True)  # must not raise
    assert s.write_errors == 1 and s.rounds == 1
    assert "cannot write" in caplog.text


def test_a_forked_child_does_not_write_the_parents_samples(tmp_path):
    code = textwrap.dedent(f"""
        import os, time, agentscope
        agentscope.init({str(tmp_path)!r}, collect=20)
        time.sleep(0.3)  # rounds buffered (written once a second)
        pid = os.fork()
        if pid == 0:
            agentscope.shutdown()  # as a worker's atexit would
            os._exit(0)
        os.waitpid(pid, 0)
        agentscope.shutdown()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={**os.environ, "AGENTSCOPE_TRACE_DIR": ""}, cwd=tmp_path)
    (f,) = tmp_path.glob("samples-*-collector.jsonl")
    rows = list(samplefile.read(str(f)))
    up = [r for r in rows if r.metric == "agentscope.collector.up"]
    assert len(up) == len({r.source for r in up})  # the start lines once, not twice
    keys = [(r.ts_ns, r.source, r.metric, r.device, r.pid) for r in rows]
    assert len(keys) == len(set(keys))


def test_an_instrumented_child_of_a_sampling_process_does_not_sample_again(tmp_path):
    # the child runs a second thread for a few of the probe's periods (with one thread the
    # probe idles: there is no lock to wait for), so a loaded machine still lets it measure
    child = ("import threading, time, agentscope; agentscope.init(); "
             "t = threading.Thread(target=time.sleep, args=(0.6,)); t.start(); t.join(); "
             "agentscope.shutdown()")
    code = textwrap.dedent(f"""
        import subprocess, sys, agentscope
        agentscope.init({str(tmp_path)!r})
        subprocess.run([sys.executable, "-c", {child!r}], check=True)
        agentscope.shutdown()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env={**os.environ, "AGENTSCOPE_TRACE_DIR": "", "AGENTSCOPE_COLLECT": "1"},
                   cwd=tmp_path)
    assert len(list(tmp_path.glob("samples-*-collector.jsonl"))) == 1
    # the child found the parent's directory (an empty AGENTSCOPE_TRACE_DIR counts as unset)
    # and probes only its own interpreter lock there
    (gil,) = tmp_path.glob("samples-*-gil.jsonl")
    assert {r.metric for r in samplefile.read(str(gil))} >= {"agentscope.python.gil_wait"}
    assert not (tmp_path / "traces").exists()


def test_a_blocking_source_does_not_delay_the_others(tmp_path):
    class Slow:
        name = "slow"
        background = True
        min_interval_s = 0.05

        def sample(self, now_ns):
            time.sleep(0.3)  # an unreachable server, say
            from agentscope.collectors import Reading
            return [Reading("slow.value", 1.0)]

    good = Counting()
    s = Sampler(tmp_path, [Slow(), good], interval_s=0.02)
    stop = threading.Event()
    threading.Timer(0.7, stop.set).start()
    s.run(stop)
    s.stop()
    assert good.n >= 20  # ~35 rounds in 0.7 s; a blocked loop would have done ~3
    rows = list(samplefile.read(str(s.path)))
    assert any(r.metric == "slow.value" for r in rows)
    assert {r.source for r in rows if r.metric == "agentscope.collector.up"} >= {"slow"}


def _sigint_as_by_default() -> None:
    # (a suite started in the background, `pytest &`, ignores SIGINT, and an ignored signal
    # is inherited: the program `run` starts would ignore the SIGINT it forwards, as it would
    # if started in the background without agentscope)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_run_forwards_sigint_sent_to_it_alone(tmp_path):
    """`kill -INT <agentscope run>` (not a Ctrl-C at a terminal) reaches the program."""
    ready = tmp_path / "ready"
    code = textwrap.dedent(f"""
        import pathlib, sys, time
        pathlib.Path({str(ready)!r}).write_text("1")
        try:
            time.sleep(30)
        except KeyboardInterrupt:
            pathlib.Path({str(tmp_path / 'got')!r}).write_text("int")
            sys.exit(3)
    """)
    p = _run_until_ready(tmp_path, code, ready, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, preexec_fn=_sigint_as_by_default)
    p.send_signal(signal.SIGINT)
    assert p.wait(30) == 3
    assert (tmp_path / "got").read_text() == "int"


def test_the_gil_probe_slows_down_while_there_is_no_other_thread(tmp_path, monkeypatch):
    probe = Sampler(tmp_path, [], interval_s=0.1, in_process=True, tag="gil")
    full = Sampler(tmp_path, [Counting()], interval_s=0.1, in_process=True)
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # main + the probe
    assert probe._period(0.1) == 1.0 and full._period(0.1) == 0.1
    monkeypatch.setattr(threading, "active_count", lambda: 5)
    assert probe._period(0.1) == 0.1


def test_the_idle_gil_probe_wakes_when_a_thread_starts(tmp_path):
    """A single-threaded process probes its GIL once a second; the thread it starts makes it
    probe at its rate at once, not a second later (a short run would get no probe at all)."""
    code = textwrap.dedent("""
        import threading, time
        import agentscope
        agentscope.init(collect=True)  # AGENTSCOPE_COLLECT=gil below: the probe only
        time.sleep(0.1)  # one thread: the probe idles

        def spin(seconds):
            end = time.thread_time() + seconds
            while time.thread_time() < end:
                sum(range(1000))

        t = threading.Thread(target=spin, args=(0.4,))
        t.start()
        spin(0.4)
        t.join()
        agentscope.shutdown()
    """)
    env = {**os.environ, "AGENTSCOPE_TRACE_DIR": str(tmp_path), "AGENTSCOPE_COLLECT": "gil"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    (gil,) = tmp_path.glob("samples-*-gil.jsonl")
    waits = [r.value for r in samplefile.read(str(gil)) if r.metric == "agentscope.python.gil_wait"]
    # ~0.8 s of two threads contending, within the probe's idle second: about 8 probes at
    # 10 Hz; idling on, it would take its first and its last only
    assert len(waits) >= 4, waits
    assert max(waits) >= 0.001  # and they saw the contention


def test_a_later_init_without_collect_starts_no_probe(tmp_path, monkeypatch):
    # the sampler sets AGENTSCOPE_COLLECT=gil for its children; shutdown() puts it back, or a
    # later init() in the same process started a GIL probe nobody asked for
    import agentscope

    monkeypatch.delenv("AGENTSCOPE_COLLECT", raising=False)
    agentscope.init(tmp_path / "a", flush_interval_s=0.1, collect=True)
    agentscope.shutdown()
    assert "AGENTSCOPE_COLLECT" not in os.environ
    agentscope.init(tmp_path / "b", flush_interval_s=0.1)
    with agentscope.stage("tool"):
        pass
    agentscope.shutdown()
    assert not list((tmp_path / "b").glob("samples-*-gil.jsonl"))
    assert not list((tmp_path / "b").glob("samples-*-collector.jsonl"))


def test_a_thread_gone_before_its_snapshots_are_parsed_keeps_its_cpu():
    """The sampler takes a snapshot each round and parses them in a batch about once a
    second. A thread that computed and ended between two batches is forgotten by the
    snapshot that finds it gone; the snapshots taken while it ran still count its CPU (they
    were dropped before: a framework's tool thread, computing 1.5 s and ending, left its tree
    at zero CPU for its last half second)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import sys, threading, time
        def burn():
            end = time.thread_time() + 0.5
            while time.thread_time() < end:
                pass
        time.sleep(0.2)
        for _ in range(2):  # a thread computes, ends; another does
            t = threading.Thread(target=burn)
            t.start()
            t.join()
        time.sleep(0.5)
        """)
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        src = ProcessTree(child.pid)
        snaps = []
        deadline = time.monotonic() + 10
        while child.poll() is None and time.monotonic() < deadline:
            now = time.time_ns()
            snaps.append((now, src.snapshot(now)))
            time.sleep(0.05)
        used = 0.0
        last = None
        for now, snap in snaps:  # one batch, in order, after the threads are gone
            for r in src.parse(now, snap):
                if r.metric == "agentscope.tree.cpu.utilization":
                    used += r.value * (now - last) / 1e9
            last = now
    finally:
        child.kill()
        child.wait()
    # 1 s of the threads' CPU (and the interpreter's start), at most one round of each
    # thread's last CPU unseen
    assert 0.85 <= used <= 1.6, used
