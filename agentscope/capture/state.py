"""The process-wide tracing state, read on every span. ``active`` is None while tracing is off.

Kept in its own tiny module so the hot path reads one module attribute and nothing imports
in a cycle.
"""

from __future__ import annotations

from typing import Any, Optional

active: Optional[Any] = None  # an agentscope.capture.runtime.Runtime while tracing is on
