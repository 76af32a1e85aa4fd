"""User exceptions pass through unchanged and are recorded; our own failures never surface."""

from __future__ import annotations

import asyncio
import logging

import pytest

import agentscope
from agentscope.capture import runtime

from .conftest import by_name, read_spans


class ToolFailed(Exception):
    pass


def test_exception_is_reraised_unchanged_and_recorded(trace_dir):
    original = ToolFailed("exit status 2")

    @agentscope.stage("tool", name="compile")
    def compile_():
        raise original

    with pytest.raises(ToolFailed) as info:
        compile_()
    assert info.value is original
    assert info.value.__traceback__ is not None
    frames = [f.name for f in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert frames[-1] == "compile_"  # the user's own frame is where it was raised
    (span,) = read_spans(trace_dir)
    assert span.status == "error"
    assert span.status_message == "ToolFailed: exit status 2"
    (event,) = span.events
    assert event.name == "exception"
    assert event.attrs["exception.type"].endswith("ToolFailed")
    assert event.attrs["exception.message"] == "exit status 2"
    assert "raise original" in event.attrs["exception.stacktrace"]


def test_exception_in_with_block_and_async(trace_dir):
    with pytest.raises(KeyError):
        with agentscope.stage("context", name="ctx"):
            raise KeyError("missing")

    @agentscope.stage("inference", name="llm")
    async def llm():
        await asyncio.sleep(0)
        raise TimeoutError("upstream")

    with pytest.raises(TimeoutError, match="upstream"):
        asyncio.run(llm())

    @agentscope.stage("tool", name="gen")
    def gen():
        yield 1
        raise ValueError("bad item")

    with pytest.raises(ValueError, match="bad item"):
        list(gen())
    spans = by_name(read_spans(trace_dir))
    assert spans["ctx"].status == spans["llm"].status == spans["gen"].status == "error"
    assert spans["gen"].events[0].attrs["exception.type"] == "ValueError"


def test_cancellation_is_recorded_and_propagates(trace_dir):
    @agentscope.stage("tool", name="slow")
    async def slow():
        await asyncio.sleep(10)

    async def main():
        t = asyncio.create_task(slow())
        await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    (span,) = read_spans(trace_dir)
    assert span.status == "error" and span.events[0].attrs["exception.type"].endswith("CancelledError")


def test_failures_inside_agentscope_never_reach_user_code(trace_dir, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("agentscope bug")

    monkeypatch.setattr("agentscope.capture.instrument.begin", broken)

    @agentscope.stage("tool")
    def f(x):
        return x * 2

    @agentscope.stage("tool")
    async def g(x):
        return x * 3

    @agentscope.stage("tool")
    def h():
        yield 5

    with caplog.at_level(logging.WARNING, logger="agentscope"):
        assert f(2) == 4
        assert asyncio.run(g(2)) == 6
        assert list(h()) == [5]
        with agentscope.stage("context"):
            pass
    assert "agentscope bug" in caplog.text


def test_a_failing_writer_drops_and_counts_but_user_code_runs(trace_dir, monkeypatch):
    rt = runtime.state.active

    def explode(item):
        raise OSError("disk on fire")

    monkeypatch.setattr(rt.writer, "submit", explode)

    @agentscope.stage("tool")
    def f():
        return "fine"

    assert f() == "fine"


def test_unencodable_span_is_counted_not_fatal(trace_dir):
    with agentscope.stage("tool", name="good"):
        pass
    with agentscope.stage("tool", name="bad") as span:
        span.attrs = {"x": object()}  # bypasses coercion: the writer must cope
        span._own_attrs = True
    agentscope.flush()
    spans = read_spans(trace_dir)
    spans = by_name(spans)
    assert "good" in spans
    # a value JSON cannot hold is written as its str(), not lost with the span
    assert spans["bad"].attrs["x"].startswith("<object object at")
