"""Names and units of every counter the collectors and the span writer write."""

from __future__ import annotations

# Each metric constant is its name upper-cased with dots as underscores; units follow
# OpenTelemetry (UCUM, ``{thing}`` for counts); docs/collectors.md describes each metric.

# ---- sources: the ``source`` field of a sample ------------------------------------------------
SOURCE_HOST_CPU = "host.cpu"
SOURCE_HOST_PRESSURE = "host.pressure"
SOURCE_HOST_MEMORY = "host.memory"
SOURCE_HOST_IO = "host.io"
SOURCE_HOST_ENERGY = "host.energy"  # RAPL through /sys/class/powercap (collectors/rapl.py)
SOURCE_PROCESS_TREE = "process.tree"
SOURCE_GPU_NVIDIA = "gpu.nvidia"
SOURCE_MODEL_SERVER = "model_server"
SOURCE_COLLECTOR = "agentscope.collector"  # the sampler's own figures
SOURCE_PYTHON = "python"  # the in-process sampler's GIL probe
SOURCE_CAPTURE = "agentscope.capture"  # the span writer's counts

# ---- host.cpu: /proc/stat, /proc/loadavg ------------------------------------------------------
SYSTEM_CPU_UTILIZATION = "system.cpu.utilization"
SYSTEM_CPU_RUN_QUEUE = "system.cpu.run_queue"
SYSTEM_PROCESSES_BLOCKED = "system.processes.blocked"
SYSTEM_CPU_LOGICAL_COUNT = "system.cpu.logical.count"
SYSTEM_CPU_LOAD_AVERAGE_1M = "system.cpu.load_average.1m"

# ---- host.pressure: Linux PSI, share of the interval stalled (no cpu "full": undefined) -------
SYSTEM_PRESSURE_CPU_SOME = "system.pressure.cpu.some"
SYSTEM_PRESSURE_MEMORY_SOME = "system.pressure.memory.some"
SYSTEM_PRESSURE_MEMORY_FULL = "system.pressure.memory.full"
SYSTEM_PRESSURE_IO_SOME = "system.pressure.io.some"
SYSTEM_PRESSURE_IO_FULL = "system.pressure.io.full"

# ---- host.memory: /proc/meminfo, /proc/vmstat -------------------------------------------------
SYSTEM_MEMORY_LIMIT = "system.memory.limit"
SYSTEM_MEMORY_USAGE = "system.memory.usage"
SYSTEM_MEMORY_AVAILABLE = "system.memory.available"
SYSTEM_SWAP_USAGE = "system.swap.usage"
SYSTEM_PAGING_SWAP_IN = "system.paging.swap_in"
SYSTEM_PAGING_SWAP_OUT = "system.paging.swap_out"
SYSTEM_PAGING_MAJOR_FAULTS = "system.paging.major_faults"

# ---- host.io: /proc/diskstats, /proc/net/dev --------------------------------------------------
SYSTEM_DISK_IO_READ = "system.disk.io.read"
SYSTEM_DISK_IO_WRITE = "system.disk.io.write"
SYSTEM_DISK_UTILIZATION = "system.disk.utilization"
SYSTEM_NETWORK_IO_RECEIVE = "system.network.io.receive"
SYSTEM_NETWORK_IO_TRANSMIT = "system.network.io.transmit"

# ---- host.energy: RAPL (/sys/class/powercap), per package zone (``device`` = package-N) ------
# J, cumulative like hw.gpu.energy: the kernel's counter at the first sample, then never going
# backwards across its wraparound; a task's energy is the difference of the values at its ends
HW_CPU_ENERGY = "hw.cpu.energy"

# ---- process.tree: per member process (``pid`` set) -------------------------------------------
PROCESS_CPU_UTILIZATION = "process.cpu.utilization"
PROCESS_MEMORY_RSS = "process.memory.rss"
PROCESS_CONTEXT_SWITCHES = "process.context_switches"
PROCESS_RUNQUEUE_WAIT = "process.runqueue_wait"

# ---- process.tree: the whole tree (``pid`` = its root) ----------------------------------------
AGENTSCOPE_TREE_CPU_UTILIZATION = "agentscope.tree.cpu.utilization"
AGENTSCOPE_TREE_RUNQUEUE_WAIT = "agentscope.tree.runqueue_wait"
AGENTSCOPE_TREE_MEMORY_RSS = "agentscope.tree.memory.rss"
AGENTSCOPE_TREE_PROCESSES = "agentscope.tree.processes"
AGENTSCOPE_TREE_THREADS = "agentscope.tree.threads"
AGENTSCOPE_TREE_MAJOR_FAULTS = "agentscope.tree.major_faults"

# ---- gpu.nvidia: NVML, per device (``device`` = gpuN) -----------------------------------------
HW_GPU_UTILIZATION = "hw.gpu.utilization"
HW_GPU_MEMORY_UTILIZATION = "hw.gpu.memory.utilization"
HW_GPU_MEMORY_USAGE = "hw.gpu.memory.usage"
HW_GPU_MEMORY_LIMIT = "hw.gpu.memory.limit"
HW_GPU_POWER = "hw.gpu.power"
HW_GPU_ENERGY = "hw.gpu.energy"
HW_GPU_CLOCK_SM = "hw.gpu.clock.sm"
HW_GPU_CLOCK_MEMORY = "hw.gpu.clock.memory"
HW_GPU_IO_TRANSMIT = "hw.gpu.io.transmit"
HW_GPU_IO_RECEIVE = "hw.gpu.io.receive"
HW_GPU_THROTTLE_REASONS = "hw.gpu.throttle_reasons"
PROCESS_GPU_MEMORY_USAGE = "process.gpu.memory.usage"

# ---- model_server: a vLLM / SGLang Prometheus endpoint (``device`` = host:port) ---------------
MODEL_SERVER_REQUESTS_RUNNING = "model_server.requests.running"
MODEL_SERVER_REQUESTS_WAITING = "model_server.requests.waiting"
MODEL_SERVER_KV_CACHE_USAGE = "model_server.kv_cache.usage"
MODEL_SERVER_PREEMPTIONS = "model_server.preemptions"
MODEL_SERVER_TIME_TO_FIRST_TOKEN = "model_server.time_to_first_token"
MODEL_SERVER_QUEUE_TIME = "model_server.queue_time"

# ---- the sampler itself -----------------------------------------------------------------------
AGENTSCOPE_COLLECTOR_UP = "agentscope.collector.up"
AGENTSCOPE_COLLECTOR_ERRORS = "agentscope.collector.errors"
AGENTSCOPE_COLLECTOR_CPU = "agentscope.collector.cpu"
AGENTSCOPE_COLLECTOR_INTERVAL = "agentscope.collector.interval"
AGENTSCOPE_PYTHON_GIL_WAIT = "agentscope.python.gil_wait"
# how late a callback the sampler scheduled ran on an instrumented asyncio loop (device:
# "thread-<tid>", the loop's thread): the loop was held that long; written when >= 20 ms
AGENTSCOPE_PYTHON_LOOP_LAG = "agentscope.python.loop_lag"

# ---- the span writer (cumulative counts) ------------------------------------------------------
AGENTSCOPE_CAPTURE_SPANS_WRITTEN = "agentscope.capture.spans_written"
AGENTSCOPE_CAPTURE_SPANS_DROPPED = "agentscope.capture.spans_dropped"
AGENTSCOPE_CAPTURE_WRITE_ERRORS = "agentscope.capture.write_errors"

# ---- units, as docs/collectors.md gives them ("1": a 0..1 ratio) ------------------------------
UNITS: dict[str, str] = {
    SYSTEM_CPU_UTILIZATION: "1",
    SYSTEM_CPU_RUN_QUEUE: "{task}",
    SYSTEM_PROCESSES_BLOCKED: "{task}",
    SYSTEM_CPU_LOGICAL_COUNT: "{cpu}",
    SYSTEM_CPU_LOAD_AVERAGE_1M: "{task}",
    SYSTEM_PRESSURE_CPU_SOME: "1",
    SYSTEM_PRESSURE_MEMORY_SOME: "1",
    SYSTEM_PRESSURE_MEMORY_FULL: "1",
    SYSTEM_PRESSURE_IO_SOME: "1",
    SYSTEM_PRESSURE_IO_FULL: "1",
    SYSTEM_MEMORY_LIMIT: "By",
    SYSTEM_MEMORY_USAGE: "By",
    SYSTEM_MEMORY_AVAILABLE: "By",
    SYSTEM_SWAP_USAGE: "By",
    SYSTEM_PAGING_SWAP_IN: "/s",
    SYSTEM_PAGING_SWAP_OUT: "/s",
    SYSTEM_PAGING_MAJOR_FAULTS: "/s",
    SYSTEM_DISK_IO_READ: "By/s",
    SYSTEM_DISK_IO_WRITE: "By/s",
    SYSTEM_DISK_UTILIZATION: "1",
    SYSTEM_NETWORK_IO_RECEIVE: "By/s",
    SYSTEM_NETWORK_IO_TRANSMIT: "By/s",
    PROCESS_CPU_UTILIZATION: "{cpu}",
    PROCESS_MEMORY_RSS: "By",
    PROCESS_CONTEXT_SWITCHES: "/s",
    PROCESS_RUNQUEUE_WAIT: "s/s",
    AGENTSCOPE_TREE_CPU_UTILIZATION: "{cpu}",
    AGENTSCOPE_TREE_RUNQUEUE_WAIT: "{thread}",
    AGENTSCOPE_TREE_MEMORY_RSS: "By",
    AGENTSCOPE_TREE_PROCESSES: "{process}",
    AGENTSCOPE_TREE_THREADS: "{thread}",
    AGENTSCOPE_TREE_MAJOR_FAULTS: "/s",
    HW_GPU_UTILIZATION: "1",
    HW_GPU_MEMORY_UTILIZATION: "1",
    HW_GPU_MEMORY_USAGE: "By",
    HW_GPU_MEMORY_LIMIT: "By",
    HW_GPU_POWER: "W",
    HW_GPU_ENERGY: "J",
    HW_CPU_ENERGY: "J",
    HW_GPU_CLOCK_SM: "MHz",
    HW_GPU_CLOCK_MEMORY: "MHz",
    HW_GPU_IO_TRANSMIT: "By/s",
    HW_GPU_IO_RECEIVE: "By/s",
    HW_GPU_THROTTLE_REASONS: "1",  # NVML's bit mask: no unit
    PROCESS_GPU_MEMORY_USAGE: "By",
    MODEL_SERVER_REQUESTS_RUNNING: "{request}",
    MODEL_SERVER_REQUESTS_WAITING: "{request}",
    MODEL_SERVER_KV_CACHE_USAGE: "1",
    MODEL_SERVER_PREEMPTIONS: "/s",
    MODEL_SERVER_TIME_TO_FIRST_TOKEN: "s",
    MODEL_SERVER_QUEUE_TIME: "s",
    AGENTSCOPE_COLLECTOR_UP: "1",
    AGENTSCOPE_COLLECTOR_ERRORS: "{error}",
    AGENTSCOPE_COLLECTOR_CPU: "{cpu}",
    AGENTSCOPE_COLLECTOR_INTERVAL: "s",
    AGENTSCOPE_PYTHON_GIL_WAIT: "s",
    AGENTSCOPE_PYTHON_LOOP_LAG: "s",
    AGENTSCOPE_CAPTURE_SPANS_WRITTEN: "{span}",
    AGENTSCOPE_CAPTURE_SPANS_DROPPED: "{span}",
    AGENTSCOPE_CAPTURE_WRITE_ERRORS: "{error}",
}
