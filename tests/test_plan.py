"""The capacity plan: the articles' rule of thumb on the measured shares, the GPU's ceiling,
cores per GPU, cost per task, head-of-line blocking measured from the model server's spans,
and `agentscope plan` on the shipped traces (no GPU: it says which figures need one)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import agentscope
from agentscope.analyzers.evidence import CLASSES
from agentscope.analyzers.lanes import head_of_line
from agentscope.analyzers.plan import PlanInput, parse_price, plan
from agentscope.cli import main

from .conftest import REPO
from .test_whatif import S, _spans

SAMPLES = REPO / "sample_traces"


def _input(**kw) -> PlanInput:
    base = dict(tasks=10, task_seconds=20.0, busy_s=10.0,
                path_by_stage={"tool": 2.0, "agent": 1.0, "inference": 17.0},
                path_by_class={"gpu": 16.0, "cpu": 4.0}, lanes={}, cpu_core_s=8.0,
                cpu_measured_share=1.0, model_s=0.0, gpus=1, gpu_busy_s=6.0,
                gpu_measured_busy=0.6, cores=8, memory_gb=64.0, energy_j={"gpu": 3000.0})
    base.update(kw)
    return PlanInput(**base)


def test_the_rule_of_thumb_reads_the_orchestration_and_tool_share():
    # orchestration and tools: 15 %
    assert "GPU-centric" in plan(_input())["ratio"]["advice"]
    heavy = _input(path_by_stage={"tool": 12.0, "agent": 2.0, "inference": 6.0})
    assert "1 CPU : 1 GPU" in plan(heavy)["ratio"]["advice"]
    # orchestration and tools: 35 %
    middle = _input(path_by_stage={"tool": 2.0, "agent": 5.0, "inference": 13.0})
    assert "neither" in plan(middle)["ratio"]["advice"]
    assert "no tasks" in plan(_input(tasks=0, path_by_stage={}))["ratio"]["advice"]
    assert "neither" in plan(middle)["ratio"]["advice"]


def test_the_gpu_ceiling_cores_per_gpu_and_cost():
    doc = plan(_input(), {"gpu": 3.6, "cpu": 0.036}, gpu_target=0.9)
    # 2 tasks in flight on average, 80 % of each path on the GPU: at most 100 %
    assert doc["gpu"]["ceiling_busy"] == 1.0
    one = plan(_input(task_seconds=10.0))  # one task in flight: at most 80 %
    assert one["gpu"]["ceiling_busy"] == pytest.approx(0.8)
    assert doc["gpu"]["measured_busy"] == pytest.approx(0.6)
    cg = doc["cpu_per_gpu"]
    assert cg["core_s_per_gpu_s"] == pytest.approx(8.0 / 6.0)
    assert cg["cores_per_gpu_for_target"] == pytest.approx(0.9 * 8.0 / 6.0)
    pt = doc["per_task"]
    assert pt["provisioned"] == {"core_s": 8.0, "gpu_s": 1.0, "mem_gb_s": 64.0}
    assert pt["energy_j"] == {"gpu": 300.0}
    # 1 GPU-second at $3.6/h, 8 core-seconds at $0.036/core-h
    assert pt["cost_usd"]["gpu"] == pytest.approx(0.001)
    assert pt["cost_usd"]["cpu"] == pytest.approx(0.00008)
    assert doc["needs_gpu"] == []


def test_without_a_gpu_it_says_what_needs_one():
    doc = plan(_input(gpus=0, gpu_busy_s=None, gpu_measured_busy=None, energy_j={}))
    assert doc["gpu"]["measured_busy"] is None
    assert doc["cpu_per_gpu"]["cores_per_gpu_for_target"] is None
    assert len(doc["needs_gpu"]) == 4
    # the model server's reported compute stands in for the GPU's busy time
    served = plan(_input(gpus=0, gpu_busy_s=None, gpu_measured_busy=None, model_s=4.0))
    assert served["cpu_per_gpu"]["core_s_per_gpu_s"] == pytest.approx(2.0)
    assert served["cpu_per_gpu"]["gpu_busy_source"].startswith("model server")


@pytest.mark.parametrize("bad", ["gpu", "disk=1", "cpu=x", "mem=-1", "gpu=inf"])
def test_malformed_prices(bad):
    with pytest.raises(ValueError, match="--price"):
        parse_price(bad)


def test_head_of_line_counts_the_batch_service_overlapping_the_wait():
    """A batch request served 0-0.6 s; an online one arrives at 0.1, queues until 0.6, then
    served to 0.7; a second online one arrives at 0.2 and queues until 0.7 behind both: 0.4 s
    of its wait overlapped the batch request, 0.1 s the first online one."""
    rows = [(-1, 0.0, 0.6, "req", "inference"), (-1, 0.1, 0.7, "req", "inference"),
            (-1, 0.2, 0.8, "req", "inference")]
    queue = np.asarray([0.0, 0.5, 0.5]) * S
    spans = _spans(rows, [(0, 1), (1, 2), (2, 3)], queue_ns=queue,
                   service=np.full(3, "model-server", dtype=object),
                   lanes=["batch", "online", "online"])
    got = head_of_line(spans)["online"]
    assert got["queued_s"] == pytest.approx(1.0)
    assert got["behind_batch_s"] == pytest.approx(0.5 + 0.4)
    assert got["tasks_behind_batch"] == 2 and got["by_server"] == {"model-server": 0.9}
    # the server named the holders: the second online request's list leaves out the batch
    held = np.asarray([None, json.dumps(["t0"]), json.dumps(["t1"])], dtype=object)
    named = head_of_line(spans, held)["online"]
    assert named["behind_batch_s"] == pytest.approx(0.5)


def test_head_of_line_on_the_recorded_model_server():
    """The shipped queue-behind-batch recording: each chat queued at the one-slot server
    while the nightly batch generation held it (the server named it in held_by)."""
    a = agentscope.analyze(SAMPLES / "queue" / "queue-behind-batch", ":memory:")
    doc = a.plan()
    hol = doc["head_of_line"]["online"]
    assert hol["tasks_behind_batch"] == 2
    assert 0 < hol["behind_batch_s"] <= hol["queued_s"]
    assert set(hol["by_server"]) == {"model-server"}
    queued = a.query("SELECT sum(TRY_CAST(json_extract_string(attrs, "
                     "'$.\"gen_ai.latency.time_in_queue\"') AS DOUBLE)) AS q FROM spans "
                     "WHERE name = 'llm_request'")["q"][0]
    assert hol["queued_s"] == pytest.approx(queued, abs=1e-3)  # the batch request: µs
    a.close()


def test_cli_plan_on_the_shipped_traces(tmp_path):
    db = str(tmp_path / "db.duckdb")
    r = CliRunner().invoke(main, ["plan", str(SAMPLES), "--db", db, "--price", "cpu=0.04",
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "agentscope.plan/v1"
    cp = doc["critical_path"]
    assert cp["orchestration_and_tools_share"] == pytest.approx(
        cp["orchestration_share"] + cp["tool_share"], abs=2e-6)
    assert doc["gpu"]["gpus_seen"] == 0 and doc["needs_gpu"]
    assert doc["per_task"]["consumed"]["core_s"] > 0
    assert doc["per_task"]["cost_usd"]["cpu"] > 0
    assert set(doc["lanes_latency"]) == {"online", "batch"}
    r = CliRunner().invoke(main, ["plan", str(SAMPLES), "--db", db])
    assert r.exit_code == 0
    for words in ("CPU:GPU", "busiest it can be", "needs a GPU", "behind batch"):
        assert words in r.output
    r = CliRunner().invoke(main, ["plan", str(SAMPLES), "--db", db, "--price", "tpu=3"])
    assert r.exit_code == 2 and "--price" in r.output
    assert CLASSES  # the classes the shares are over
