"""Head-of-line blocking: how long online work waited in a server's queue while batch work
held the server's slots, measured from the requests' own spans.

A request that queued (a span with server-reported queueing, ``gen_ai.latency.time_in_queue``)
waited from its start for that long. The server's other requests were *in service* from their
start plus their own queueing to their end. The time a waiting request of a task outside the
``batch`` lane overlapped the service of requests of ``batch`` tasks at the same server (the
union of those overlaps, so two batch requests at once count once) is time it waited behind
batch work. Where the server names the holders (``agentscope.queue.held_by``: the traces
whose requests held a slot while it waited, as the scenarios' model server records), only
those count; otherwise every batch request in service meanwhile does.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np

from .timing import covered_ns

BATCH = "batch"


def _holders(text: Any) -> Optional[set]:
    if text is None:
        return None
    try:
        got = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    return {str(x) for x in got} if isinstance(got, list) else None


def head_of_line(spans: Any, held_by: Any = None) -> dict:
    """{lane: {"tasks", "queued_s", "behind_batch_s", "tasks_behind_batch", "by_server"}}
    for every lane other than ``batch`` whose tasks queued at a server (see the module)."""
    from .replay import requests_to, server_of

    n = len(spans)
    if not n:
        return {}
    task_of = np.full(n, -1, dtype=np.int64)
    for t, (lo, hi) in enumerate(spans.bounds):
        task_of[lo:hi] = t
    lanes = [lane or "(none)" for lane in spans.task_lane]
    start = np.asarray(spans.start, dtype=np.int64)
    end = np.asarray(spans.end, dtype=np.int64)
    queue = np.rint(np.asarray(spans.queue_ns, dtype=np.float64)).astype(np.int64)
    servers_of = server_of(spans)
    held = np.asarray(held_by if held_by is not None else np.full(n, None), dtype=object)
    waiting = np.flatnonzero((queue > 0) & (task_of >= 0))
    out: dict = {}
    for lane in sorted({lanes[t] for t in range(len(lanes))} - {BATCH}):
        out[lane] = {"tasks": sum(1 for x in lanes if x == lane), "queued_s": 0.0,
                     "behind_batch_s": 0.0, "tasks_behind_batch": 0, "by_server": {}}
    behind_tasks: dict = {}
    servers: dict = {}
    for w in waiting.tolist():
        lane = lanes[task_of[w]]
        if lane == BATCH:
            continue
        server = servers_of[w]
        if server not in servers:
            rows = np.flatnonzero(requests_to(spans, server) & (task_of >= 0))
            batch = rows[[lanes[task_of[r]] == BATCH for r in rows.tolist()]] if len(rows) \
                else rows
            servers[server] = batch
        a, b = int(start[w]), int(start[w] + queue[w])
        out[lane]["queued_s"] += (b - a) / 1e9
        names = _holders(held[w])
        intervals = []
        for h in servers[server].tolist():
            if names is not None and spans.task_id[task_of[h]] not in names:
                continue
            lo, hi = max(a, int(start[h] + queue[h])), min(b, int(end[h]))
            if hi > lo:
                intervals.append((lo, hi))
        behind = covered_ns([lo for lo, _ in intervals], [hi for _, hi in intervals])
        if behind > 0:
            out[lane]["behind_batch_s"] += behind / 1e9
            out[lane]["by_server"][server] = out[lane]["by_server"].get(server, 0.0) + \
                behind / 1e9
            behind_tasks.setdefault(lane, set()).add(int(task_of[w]))
    for lane, d in out.items():
        d["tasks_behind_batch"] = len(behind_tasks.get(lane, ()))
        d["queued_s"] = round(d["queued_s"], 6)
        d["behind_batch_s"] = round(d["behind_batch_s"], 6)
        d["by_server"] = {k: round(v, 6) for k, v in d["by_server"].items()}
    return {lane: d for lane, d in out.items() if d["queued_s"] > 0}
