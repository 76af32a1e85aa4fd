"""chdb (in-process ClickHouse) in a process of its own, for :class:`.clickhouse.Connection`.

Run as a script (it imports nothing of agentscope): ``python _chdb_worker.py PATH``. It opens
a chdb session on PATH and answers one JSON line per JSON line read: ``{"q": statement}``
(its FORMAT in it) -> ``{"text": output}`` or ``{"error": message}``; the first line it writes
says whether the session opened. It ends when its input does.

Why apart: ClickHouse's engine keeps what it allocated, and every thread of its pools holds
three open files of /proc for its metrics; a process that runs many queries collects
hundreds of descriptors (past select()'s 1024, where other code of that process fails). A
child gives all of it back when it exits.
"""

import json
import os
import sys


def main() -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # (anything chdb prints goes to stderr, not into the replies)

    def reply(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        from chdb import session

        con = session.Session(sys.argv[1])
    except Exception as e:  # noqa: BLE001 - told to the parent, which names it
        reply({"error": f"{type(e).__name__}: {e}"})
        return
    reply({"ok": True})
    try:
        for line in sys.stdin:
            request = json.loads(line)
            try:
                text = con.query(request["q"], "").bytes().decode(errors="replace")
            except Exception as e:  # noqa: BLE001 - told to the parent
                reply({"error": str(e)})
                continue
            reply({"text": text})
    finally:
        con.close()


if __name__ == "__main__":
    main()
