"""Instrumentation: the public tracing API, our lean spans, and the crash-safe span writer.

The first layer of agentscope (instrument -> collect -> store -> analyze -> export). It
imports nothing from the layers after it (it may start a collectors' sampler in-process).
"""

from .instrument import annotate, current_span, stage, task
from .propagation import trace_env, wrap
from .runtime import Runtime, flush, init, shutdown

__all__ = ["Runtime", "annotate", "current_span", "flush", "init", "shutdown", "stage",
           "task", "trace_env", "wrap"]
