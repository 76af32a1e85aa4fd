"""NVIDIA GPUs through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Per device (``device`` = ``gpu<index>``):

* ``hw.gpu.utilization`` (0..1): NVML's own sampled history (``nvmlDeviceGetSamples``, one
  value per driver sample, each with its own timestamp), so bursts shorter than our polling
  interval are not lost; where the history is not supported, the polled rate;
* ``hw.gpu.memory.utilization`` (0..1, memory controller busy: bandwidth);
* ``hw.gpu.memory.usage`` / ``hw.gpu.memory.limit`` (bytes);
* ``hw.gpu.power`` (W) and ``hw.gpu.energy`` (J, since the driver loaded);
* ``hw.gpu.clock.sm`` / ``hw.gpu.clock.memory`` (MHz);
* ``hw.gpu.io.transmit`` / ``hw.gpu.io.receive`` (PCIe, bytes per second);
* ``hw.gpu.throttle_reasons`` (NVML's clock event reason bit mask; 0 = not throttled);
* ``process.gpu.memory.usage`` per process using the device (``pid`` set).

The calls that NVML documents as slow or that change slowly (PCIe throughput blocks for about
20 ms, processes, throttle reasons, energy) run at most once a second. A call the device does
not support is left out (absent), never written as zero. ``nvml`` can be injected (tests use
recorded answers).
"""

from __future__ import annotations

from typing import Any, Optional

from ..metric_names import (
    HW_GPU_CLOCK_MEMORY,
    HW_GPU_CLOCK_SM,
    HW_GPU_ENERGY,
    HW_GPU_IO_RECEIVE,
    HW_GPU_IO_TRANSMIT,
    HW_GPU_MEMORY_LIMIT,
    HW_GPU_MEMORY_USAGE,
    HW_GPU_MEMORY_UTILIZATION,
    HW_GPU_POWER,
    HW_GPU_THROTTLE_REASONS,
    HW_GPU_UTILIZATION,
    PROCESS_GPU_MEMORY_USAGE,
    SOURCE_GPU_NVIDIA,
)
from .base import Reading, SourceUnavailable

SLOW_INTERVAL_NS = 1_000_000_000


class NvidiaGPU:
    name = SOURCE_GPU_NVIDIA

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            try:
                import pynvml as nvml  # the nvidia-ml-py package
            except ImportError:
                raise SourceUnavailable("NVIDIA GPUs: nvidia-ml-py is not installed") from None
        self.nvml = nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            raise SourceUnavailable(f"NVIDIA GPUs: NVML not available ({e})") from None
        if not self.handles:
            raise SourceUnavailable("NVIDIA GPUs: NVML found no device")
        self.devices = [f"gpu{i}" for i in range(len(self.handles))]
        self.last_seen = [0] * len(self.handles)  # NVML sample timestamps (µs) already read
        self.unsupported: set = set()  # (device, call) the device refused
        self._last_slow = 0

    def _call(self, device: str, what: str, fn: Any, *args: Any) -> Optional[Any]:
        if (device, what) in self.unsupported:
            return None
        try:
            return fn(*args)
        except Exception as e:
            if type(e).__name__ in ("NVMLError_NotSupported", "NVMLError_NoPermission",
                                    "NVMLError_FunctionNotFound"):
                self.unsupported.add((device, what))
                return None
            raise

    def sample(self, now_ns: int) -> list:
        n = self.nvml
        out: list = []
        slow = now_ns - self._last_slow >= SLOW_INTERVAL_NS
        if slow:
            self._last_slow = now_ns
        for i, (h, dev) in enumerate(zip(self.handles, self.devices)):
            rates = self._call(dev, "utilization", n.nvmlDeviceGetUtilizationRates, h)
            history = self._history(i, h, dev, now_ns)
            out.extend(history)
            if (dev, "samples") in self.unsupported and rates is not None:
                out.append(Reading(HW_GPU_UTILIZATION, rates.gpu / 100.0, dev))
            if rates is not None:
                out.append(Reading(HW_GPU_MEMORY_UTILIZATION, rates.memory / 100.0, dev))
            mem = self._call(dev, "memory", n.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                out.append(Reading(HW_GPU_MEMORY_USAGE, float(mem.used), dev))
                out.append(Reading(HW_GPU_MEMORY_LIMIT, float(mem.total), dev))
            power = self._call(dev, "power", n.nvmlDeviceGetPowerUsage, h)
            if power is not None:
                out.append(Reading(HW_GPU_POWER, power / 1000.0, dev))
            for metric, clock in ((HW_GPU_CLOCK_SM, getattr(n, "NVML_CLOCK_SM", 1)),
                                  (HW_GPU_CLOCK_MEMORY, getattr(n, "NVML_CLOCK_MEM", 2))):
                mhz = self._call(dev, metric, n.nvmlDeviceGetClockInfo, h, clock)
                if mhz is not None:
                    out.append(Reading(metric, float(mhz), dev))
            if slow:
                out.extend(self._slow(h, dev))
        return out

    def _history(self, i: int, h: Any, dev: str, now_ns: int) -> list:
        n = self.nvml
        got = self._call(dev, "samples", n.nvmlDeviceGetSamples, h,
                         getattr(n, "NVML_GPU_UTILIZATION_SAMPLES", 1), self.last_seen[i])
        if not got:
            return []
        _kind, samples = got
        out = []
        for s in samples:
            ts_us = int(s.timeStamp)
            if ts_us <= self.last_seen[i]:
                continue
            self.last_seen[i] = ts_us
            out.append(Reading(HW_GPU_UTILIZATION, s.sampleValue.uiVal / 100.0, dev, None,
                               ts_us * 1000))
        return out

    def _slow(self, h: Any, dev: str) -> list:
        n = self.nvml
        out = []
        for metric, counter in ((HW_GPU_IO_TRANSMIT, getattr(n, "NVML_PCIE_UTIL_TX_BYTES", 0)),
                                (HW_GPU_IO_RECEIVE, getattr(n, "NVML_PCIE_UTIL_RX_BYTES", 1))):
            kb_s = self._call(dev, metric, n.nvmlDeviceGetPcieThroughput, h, counter)
            if kb_s is not None:
                out.append(Reading(metric, kb_s * 1024.0, dev))
        reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(n, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if reasons_fn is not None:
            mask = self._call(dev, "throttle", reasons_fn, h)
            if mask is not None:
                out.append(Reading(HW_GPU_THROTTLE_REASONS, float(mask), dev))
        energy = self._call(dev, "energy", n.nvmlDeviceGetTotalEnergyConsumption, h)
        if energy is not None:
            out.append(Reading(HW_GPU_ENERGY, energy / 1000.0, dev))
        procs = self._call(dev, "processes", n.nvmlDeviceGetComputeRunningProcesses, h)
        for p in procs or ():
            used = getattr(p, "usedGpuMemory", None)
            if used is not None:
                out.append(Reading(PROCESS_GPU_MEMORY_USAGE, float(used), dev, int(p.pid)))
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # never raise while shutting down
            pass
