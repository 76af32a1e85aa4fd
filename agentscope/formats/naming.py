"""The part our capture file names share: ``<host>-<pid>-<unix ms>``, the host made safe."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._]+")


def safe_host(host: str) -> str:
    """``host`` as it goes into a file name: each run of characters other than letters, digits,
    ``.`` and ``_`` becomes one ``_``, cut to 64 characters (``host`` if nothing is left)."""
    return _UNSAFE.sub("_", host)[:64] or "host"


def stem(host: str, pid: int, ms: int) -> str:
    """``<safe host>-<pid>-<ms>``: one writing process's files (``ms``: when it started)."""
    return f"{safe_host(host)}-{pid}-{ms}"


# agentscope's own files beside the traces that are not traces: a scenario's labels
# (agentscope.scenarios writes them; the store passes over them without a word)
SCENARIO_FILE = "scenario.json"
TRUTH_PREFIX, TRUTH_SUFFIX = "truth-", ".jsonl"


def is_label_file(name: str) -> bool:
    """Whether ``name`` is one of the scenario label files (``scenario.json``,
    ``truth-<pid>.jsonl``)."""
    return name == SCENARIO_FILE or (name.startswith(TRUTH_PREFIX) and name.endswith(TRUTH_SUFFIX))
