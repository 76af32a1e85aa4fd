"""The closed vocabularies of agentscope (ARCHITECTURE §1, §2).

Their ``.value`` strings are what goes to files, DuckDB and metric labels.
"""

from __future__ import annotations

import enum


class Stage(str, enum.Enum):
    """What the agent was doing during a span (attribute ``agentscope.stage``)."""

    TASK = "task"
    AGENT = "agent"
    QUEUE = "queue"
    CONTEXT = "context"
    INFERENCE = "inference"
    TOOL = "tool"
    ENV = "env"
    MEMORY = "memory"

    @classmethod
    def parse(cls, value: "Stage | str") -> "Stage":
        """Accept a Stage or its string value (case-insensitive); raise ValueError otherwise."""
        if isinstance(value, cls):
            return value
        try:
            return _STAGE_BY_VALUE[str(value).strip().lower()]
        except KeyError:
            allowed = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown stage {value!r}; expected one of: {allowed}") from None


_STAGE_BY_VALUE = {s.value: s for s in Stage}


class Lane(str, enum.Enum):
    """How a task is served: interactively (``online``) or in bulk (``batch``)."""

    ONLINE = "online"
    BATCH = "batch"

    @classmethod
    def parse(cls, value: "Lane | str") -> "Lane":
        if isinstance(value, cls):
            return value
        v = str(value).strip().lower()
        for lane in cls:
            if lane.value == v:
                return lane
        raise ValueError(f"unknown lane {value!r}; expected 'online' or 'batch'")


class Resource(str, enum.Enum):
    """The five resources a task can be limited by (ARCHITECTURE §1)."""

    GPU = "gpu"
    CPU = "cpu"
    MEMORY = "memory"
    IO = "io"
    QUEUE = "queue"


class Basis(str, enum.Enum):
    """What a critical-path section's class rests on: measured evidence (resource accounting,
    the server's own timings, counters), the span's stage label alone, or nothing at all
    (``untraced``: then the class is ``untraced`` too, time shown apart from the resources)."""

    MEASURED = "measured"
    LABEL = "label"
    UNTRACED = "untraced"
