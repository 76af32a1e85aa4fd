"""Collectors: samplers of host, process-tree, GPU (NVML) and model-server counters.

Each source implements a one-method protocol, ``sample() -> list[SampleRecord]``, and writes
through :mod:`agentscope.formats.samplefile`. Not built yet: see the collectors issue.
"""
