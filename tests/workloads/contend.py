"""Agents that compete for the CPU: ``contend.py N`` starts N agent processes, each running one
task whose tool burns a fixed amount of CPU time, in its own thread (``inline``) or in a child
process (``child``). With more agents than cores, each tool gets only part of a core: the rest
of its time it is runnable and waiting. Run it under ``agentscope run`` (the sampler watches
this launcher and its agents). ``CONTEND_CPUS=0,1`` confines them to those CPUs (so that a
machine with many cores is contended too). ``contend.py sleep`` runs one agent whose tool
waits on I/O."""

import os
import subprocess
import sys
import time

WORK_S = float(os.environ.get("CONTEND_WORK_S", "0.8"))


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(10000):
            x += i * i


def agent(mode: str) -> None:
    import agentscope

    agentscope.init(service=f"agent-{os.getpid()}")
    with agentscope.task("contended" if mode != "sleep" else "waiting"):
        with agentscope.stage("context", name="plan"):
            burn(0.01)
        with agentscope.stage("tool", name="crunch" if mode != "sleep" else "fetch"):
            if mode == "inline":
                burn(WORK_S)
            elif mode == "child":
                subprocess.run([sys.executable, __file__, "burn"], check=True)
            else:
                time.sleep(WORK_S)
    agentscope.shutdown()


def main() -> None:
    what = sys.argv[1]
    if what == "burn":
        burn(WORK_S)
    elif what == "agent":
        agent(sys.argv[2])
    elif what == "sleep":
        agent("sleep")
    else:
        n, mode = int(what), sys.argv[2] if len(sys.argv) > 2 else "inline"
        cpus = os.environ.get("CONTEND_CPUS")
        if cpus:  # the agents share these CPUs only (inherited by every child)
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        procs = [subprocess.Popen([sys.executable, __file__, "agent", mode]) for _ in range(n)]
        sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
