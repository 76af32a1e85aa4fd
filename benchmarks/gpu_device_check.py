"""The device check of the collectors issue: a real GPU workload recorded with real spans and
the sampler, NVML values read and joined, and the trace brought back for sample_traces/gpu-*.

An agent (this process, instrumented) runs ``--tasks`` tasks, each:

  context      0.2 s of Python on the CPU (prompt assembly)
  inference    bf16 matrix products on the GPU for ~0.8 s, waited for with a blocking event
               (the thread sleeps: off-CPU while the GPU works)
  tool         a CPU-bound child process for ~0.5 s (the GPU sits idle)
  tool         0.3 s waiting on I/O (the GPU sits idle)
  inference    ~0.5 s of GPU work waited for with torch.cuda.synchronize() (CUDA spins: the
               thread is ~100 % on-CPU while the GPU works)

sampled at 20 Hz (``agentscope.init(collect=20)``: host, process tree, NVML). Then it checks
that NVML readings are there (utilization history with several values per poll, memory,
power, clocks, this process's GPU memory), analyses the directory and checks the verdicts: both
inferences ``gpu`` (with "GPU busy" in their evidence), the child process ``cpu``, the wait
``io``, and the GPU's idle time attributed to ``tool cpu`` / ``tool io``. Exit code 0 when
every check passes; the report is printed either way.

Without a GPU (here) the inference runs numpy on the CPU, NVML is reported absent, and the
GPU checks are skipped (and said to be).

On the device machine (nvidia-h200 has torch and nvidia-ml-py; opentelemetry and duckdb travel
as wheels, see /work/.library/device/README.md): in the repo root, once,
    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 \\
        -d .whl opentelemetry-api opentelemetry-sdk opentelemetry-semantic-conventions \\
        importlib-metadata duckdb
then run (carry [".whl"], timeout_s 300):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; \\
    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_device_check.py --out $OUT/gpu-agent
and copy $OUT/gpu-agent's span and sample files into sample_traces/gpu-agent/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentscope  # noqa: E402

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def make_gpu():
    try:
        import torch

        if torch.cuda.is_available():
            a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
            per = (time.perf_counter() - t0) / 20
            return torch, a, b, per
    except ImportError:
        pass
    return None


def gpu_work(gpu, seconds: float, blocking: bool) -> None:
    if gpu is None:  # no GPU: the same stage on the CPU
        import numpy as np

        x = np.random.rand(600, 600)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            x @ x
        return
    torch, a, b, per = gpu
    for _ in range(max(int(seconds / per), 1)):
        a @ b
    if blocking:
        done = torch.cuda.Event(blocking=True)
        done.record()
        done.synchronize()  # the thread sleeps until the GPU is done
    else:
        torch.cuda.synchronize()  # CUDA's default: spin


def one_task(gpu, k: int) -> None:
    with agentscope.task("gpu-agent", lane="online", task_no=k):
        with agentscope.stage("context", name="assemble-prompt"):
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass
        with agentscope.stage("inference", name="forward-blocking", model="bench-8192",
                              **{"server.address": "127.0.0.1"}):
            gpu_work(gpu, 0.8, blocking=True)
        with agentscope.stage("tool", name="cpu-tool"):
            subprocess.run([sys.executable, "-c", BURN.format(s=0.5)], check=True)
        with agentscope.stage("tool", name="io-wait"):
            time.sleep(0.3)
        with agentscope.stage("inference", name="forward-spinning", model="bench-8192",
                              **{"server.address": "127.0.0.1"}):
            gpu_work(gpu, 0.5, blocking=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="trace directory to write")
    ap.add_argument("--tasks", type=int, default=4)
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    gpu = make_gpu()
    print("GPU:", "none (CPU path; GPU checks skipped)" if gpu is None else
          f"{gpu[0].cuda.get_device_name(0)}, one 8192^3 bf16 product {gpu[3] * 1e3:.2f} ms")
    agentscope.init(out, service="gpu-agent", collect=20)
    for k in range(args.tasks):
        one_task(gpu, k)
    agentscope.shutdown()

    checks: list = []

    def check(ok: bool, what: str) -> None:
        checks.append(ok)
        print(("PASS " if ok else "FAIL ") + what)

    rows = [json.loads(line) for f in out.glob("samples-*collector.jsonl")
            for line in f.read_text().splitlines()]
    up = {r["source"]: r["value"] for r in rows if r["metric"] == "agentscope.collector.up"}
    print("sources up:", up)
    if gpu is not None:
        util = [r for r in rows if r["metric"] == "hw.gpu.utilization"]
        check(len(util) > 0 and max(r["value"] for r in util) >= 0.9,
              f"NVML utilization read ({len(util)} values, max "
              f"{max((r['value'] for r in util), default=0):.2f})")
        stamps = sorted({r["ts_ns"] for r in util})
        check(len(stamps) > 0, f"utilization history: {len(stamps)} distinct timestamps")
        for m in ("hw.gpu.memory.usage", "hw.gpu.power", "hw.gpu.clock.sm",
                  "hw.gpu.memory.utilization"):
            check(any(r["metric"] == m for r in rows), f"{m} read")
        check(any(r["metric"] == "process.gpu.memory.usage" and r["pid"] == os.getpid()
                  for r in rows), "this process's GPU memory read")

    rep = agentscope.analyze(out).to_dict()
    (out / "report.json").write_text(json.dumps(rep, indent=1))
    check(len(rep["tasks"]) == args.tasks, f"{len(rep['tasks'])} tasks analysed")
    by_name: dict = {}
    for t in rep["tasks"]:
        for s in t["critical_path"]:
            by_name.setdefault(s["name"], []).append(s)
    for name, s in sorted(by_name.items()):
        classes = sorted({x["class"] for x in s})
        print(f"  {name:20s} {classes}  e.g. {s[0]['evidence'][:160]}")
    check(all(x["class"] == "cpu" for x in by_name.get("cpu-tool", [])), "cpu-tool is cpu")
    check(all(x["class"] == "io" for x in by_name.get("io-wait", [])), "io-wait is io")
    if gpu is not None:
        for name in ("forward-blocking", "forward-spinning"):
            s = by_name.get(name, [])
            check(bool(s) and all(x["class"] == "gpu" and "GPU busy" in x["evidence"]
                                  for x in s), f"{name} is gpu, with GPU evidence")
        g = rep["summary"].get("gpu") or {}
        print("GPU summary:", json.dumps(g))
        check(bool(g) and any(set(d["idle_while"]) & {"tool cpu", "tool io"}
                              for d in g.values()),
              "GPU idle time attributed to the tools")
    print(f"{sum(checks)}/{len(checks)} checks passed; traces in {out}")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
