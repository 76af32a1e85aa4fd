"""Collectors: counters of the machine the agent runs on, sampled beside its spans.

Sources (each one method, ``sample(now_ns) -> readings``; see :mod:`.base`):

* :class:`~.host.HostCPU`, :class:`~.host.Pressure`, :class:`~.host.Memory`,
  :class:`~.host.DiskNet`: host CPU, Linux PSI, memory and paging, disk and network I/O;
* :class:`~.proctree.ProcessTree`: the agent's process tree (CPU, RSS, run-queue wait);
* :class:`~.gpu.NvidiaGPU`: NVIDIA GPUs through NVML;
* :class:`~.modelserver.PrometheusEndpoint`: a vLLM/SGLang server's metrics.

:class:`~.sampler.Sampler` runs them at a fixed rate (default 10 Hz) into sample files that
load into the store's ``samples`` table. Where they run: ``agentscope.init(collect=True)``
(a daemon thread in the agent), ``agentscope collect`` (a sidecar) or ``agentscope run -- CMD``.
"""

from .base import Reading, Source, SourceUnavailable
from .sampler import Sampler, default_sources

__all__ = ["Reading", "Sampler", "Source", "SourceUnavailable", "default_sources"]
