"""The public API: decorators and context managers, nesting, attributes, stages, no-op mode."""

from __future__ import annotations

import pytest

import agentscope
from agentscope import Stage
from agentscope.capture import state

from .conftest import by_name, read_spans


def test_nested_decorators_and_context_managers_write_one_trace(trace_dir):
    @agentscope.stage("tool", name="pytest", command="pytest -q")
    def run_tests():
        return "ok"

    @agentscope.task(name="fix-bug", lane="batch")
    def fix_bug():
        with agentscope.stage("context"):
            pass
        with agentscope.stage(Stage.INFERENCE, name="plan", model="qwen3", input_tokens=120,
                              output_tokens=30):
            pass
        return run_tests()

    assert fix_bug() == "ok"
    spans = by_name(read_spans(trace_dir))
    task, ctx, inf, tool = spans["fix-bug"], spans["context"], spans["plan"], spans["pytest"]
    assert task.parent_span_id is None and task.stage == "task"
    assert task.attrs["agentscope.lane"] == "batch"
    for child in (ctx, inf, tool):
        assert child.trace_id == task.trace_id
        assert child.parent_span_id == task.span_id
        assert task.start_ns <= child.start_ns <= child.end_ns <= task.end_ns
    assert (ctx.stage, inf.stage, tool.stage) == ("context", "inference", "tool")
    # GenAI semantic-convention names on the wire, ours under agentscope.*
    assert inf.attrs["gen_ai.request.model"] == "qwen3"
    assert inf.attrs["gen_ai.usage.input_tokens"] == 120
    assert inf.attrs["gen_ai.usage.output_tokens"] == 30
    assert tool.attrs["gen_ai.tool.name"] == "pytest"
    assert tool.attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool.attrs["process.command_line"] == "pytest -q"
    assert task.service == "test-agent" and task.pid and task.host


def test_default_names_and_custom_attributes(trace_dir):
    @agentscope.stage("tool")
    def grep_repo(pattern):
        return pattern

    @agentscope.task
    def bare_task():
        grep_repo("x")
        agentscope.annotate(retries=2, output_tokens=7)

    bare_task()
    spans = by_name(read_spans(trace_dir))
    assert "test_default_names_and_custom_attributes.<locals>.bare_task" in spans
    task = spans["test_default_names_and_custom_attributes.<locals>.bare_task"]
    assert task.attrs["agentscope.retries"] == 2
    assert task.attrs["gen_ai.usage.output_tokens"] == 7
    assert task.attrs["agentscope.lane"] == "online"
    tool = spans["test_default_names_and_custom_attributes.<locals>.grep_repo"]
    assert tool.attrs["gen_ai.tool.name"].endswith("grep_repo")


def test_span_returned_by_with_is_an_opentelemetry_span(trace_dir):
    with agentscope.stage("inference", name="chat") as span:
        span.set_attribute("gen_ai.usage.output_tokens", 42)
        span.add_event("first_token")
        assert span.is_recording()
        assert span.get_span_context().is_valid
    (chat,) = read_spans(trace_dir)
    assert chat.attrs["gen_ai.usage.output_tokens"] == 42
    assert [e.name for e in chat.events] == ["first_token"]


def test_stage_validation_is_a_configuration_error():
    with pytest.raises(ValueError, match="unknown stage 'compile'"):
        agentscope.stage("compile")
    with pytest.raises(ValueError, match="unknown lane"):
        agentscope.task(name="x", lane="interactive")
    with pytest.raises(TypeError, match="name the stage"):
        @agentscope.stage
        def f():
            pass
    assert Stage.parse("TOOL") is Stage.TOOL
    assert [s.value for s in Stage] == ["task", "agent", "queue", "context", "inference", "tool",
                                        "env", "memory"]


def test_before_init_everything_is_a_no_op(tmp_path):
    assert state.active is None

    @agentscope.stage("tool")
    def f(x):
        return x + 1

    with agentscope.stage("context") as span:
        assert not span.is_recording()
    assert f(1) == 2
    agentscope.annotate(model="m")  # no error
    agentscope.shutdown()  # no error
    assert agentscope.flush() is True
    assert list(tmp_path.iterdir()) == []


def test_decorated_before_init_is_traced_after_init(tmp_path):
    @agentscope.stage("tool", name="early")
    def early():
        return 1

    agentscope.init(tmp_path, flush_interval_s=0.1)
    early()
    assert [s.name for s in read_spans(tmp_path)] == ["early"]


def test_init_is_idempotent_and_env_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSCOPE_TRACE_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("AGENTSCOPE_SERVICE", "env-service")
    rt = agentscope.init(tmp_path / "from-arg", service="arg-service")
    assert rt.trace_dir == (tmp_path / "from-env").resolve()
    assert rt.service == "env-service"
    assert agentscope.init(tmp_path / "other") is rt
    with agentscope.stage("context"):
        pass
    (span,) = read_spans(tmp_path / "from-env")
    assert span.service == "env-service"


def test_disabled_by_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSCOPE_DISABLED", "1")
    assert agentscope.init(tmp_path) is None
    with agentscope.stage("tool"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_reinit_after_shutdown_writes_a_new_file(tmp_path):
    for i in range(2):
        agentscope.init(tmp_path, flush_interval_s=0.1)
        with agentscope.stage("tool", name=f"run{i}"):
            pass
        agentscope.shutdown()
    from agentscope.store.tracedir import scan
    result = scan(tmp_path)
    assert sorted(s.name for s in result.spans) == ["run0", "run1"]


def test_new_trace_task_links_to_the_current_span(trace_dir):
    with agentscope.stage("agent", name="scheduler"):
        with agentscope.task(name="job", lane="batch", new_trace=True):
            pass
        with agentscope.task(name="nested-task"):
            pass
    spans = by_name(read_spans(trace_dir))
    sched, job, nested = spans["scheduler"], spans["job"], spans["nested-task"]
    assert job.trace_id != sched.trace_id and job.parent_span_id is None
    assert [(k.trace_id, k.span_id) for k in job.links] == [(sched.trace_id, sched.span_id)]
    assert nested.trace_id == sched.trace_id and nested.parent_span_id == sched.span_id


def test_attribute_values_are_coerced_not_rejected(trace_dir):
    class Weird:
        def __str__(self):
            return "weird!"

    with agentscope.stage("tool", name="t", obj=Weird(), ratio=float("nan"), tags=["a", "b"],
                          mixed=[1, "x"], nothing=None):
        pass
    (span,) = read_spans(trace_dir)
    assert span.attrs["agentscope.obj"] == "weird!"
    assert span.attrs["agentscope.ratio"] == "nan"  # NaN is not JSON: written as a string
    assert span.attrs["agentscope.tags"] == ["a", "b"]
    assert span.attrs["agentscope.mixed"] == ["1", "x"]
    assert "agentscope.nothing" not in span.attrs


def test_tasks_without_init_say_once_that_nothing_is_recorded():
    """Decorators used before agentscope.init() record nothing, and say so once on stderr; a
    program that turned tracing off (AGENTSCOPE_DISABLED=1) or shut it down is not told."""
    import subprocess
    import sys

    from .conftest import child_env

    code = ("import agentscope\n"
            "@agentscope.task\n"
            "def t():\n"
            "    with agentscope.stage('tool'):\n"
            "        pass\n"
            "t(); t()\n")
    r = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                       text=True, check=True)
    assert r.stderr.count("before agentscope.init() was called: nothing is recorded") == 1
    quiet = "import agentscope\nagentscope.init('traces')\n" + code
    r = subprocess.run([sys.executable, "-c", quiet], env=child_env(AGENTSCOPE_DISABLED="1"),
                       capture_output=True, text=True, check=True)
    assert "agentscope.init()" not in r.stderr
