"""What every recipe's agent does besides tracing, written once: its command line and its
tool, a test suite run as a child process that computes a fixed amount of CPU time (not
wall time: on a busy machine it takes longer, and is CPU-bound all the same)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

SUITE = ("import time\nend = time.process_time() + {s}\nx = 0\n"
         "while time.process_time() < end:\n    x = (x * 31 + 7) % 1000003\n"
         "print('42 passed')\n")


def run_test_suite(cpu_s: float) -> str:
    """Run the "test suite" (``cpu_s`` seconds of CPU in a child process); its output."""
    done = subprocess.run([sys.executable, "-c", SUITE.format(s=cpu_s)],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def arguments(doc: str, base_url_env: str = "OPENAI_BASE_URL",
              endpoint: str = "a real OpenAI-compatible endpoint") -> argparse.ArgumentParser:
    """The options every recipe takes: the endpoint (a local fake unless named), the model,
    how many tasks, the tool's CPU seconds."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get(base_url_env),
                        help=f"{endpoint} (default: a local fake)")
    parser.add_argument("--model", default="fake-sleep-0.5",
                        help="the model (the fake waits the seconds its name ends in)")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--tool-cpu", type=float, default=1.5,
                        help="CPU seconds the test suite computes")
    return parser
