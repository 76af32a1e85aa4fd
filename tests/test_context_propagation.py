"""Parents stay right across threads, executors, asyncio tasks and generators."""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import threading
import time

import agentscope

from .conftest import by_name, read_spans


def test_thread_pool_fan_out_keeps_parents(trace_dir):
    @agentscope.stage("agent")
    def agent(i):
        with agentscope.stage("tool", name=f"tool-{i}"):
            time.sleep(0.01)
        return i

    @agentscope.task(name="fan-out")
    def fan_out():
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            return list(pool.map(agent, range(6)))

    assert fan_out() == list(range(6))
    spans = read_spans(trace_dir)
    task = next(s for s in spans if s.name == "fan-out")
    agents = [s for s in spans if s.stage == "agent"]
    tools = {s.name: s for s in spans if s.stage == "tool"}
    assert len(agents) == 6 and len(tools) == 6
    assert {a.parent_span_id for a in agents} == {task.span_id}
    assert {s.trace_id for s in spans} == {task.trace_id}
    agent_ids = {a.span_id for a in agents}
    assert all(t.parent_span_id in agent_ids for t in tools.values())
    # the agents really ran on worker threads
    assert {a.tid for a in agents} - {task.tid}


def test_plain_threads_keep_parents(trace_dir):
    def work(i):
        with agentscope.stage("tool", name=f"thread-{i}"):
            pass

    with agentscope.task(name="threads"):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    spans = by_name(read_spans(trace_dir))
    root = spans["threads"]
    for i in range(3):
        assert spans[f"thread-{i}"].parent_span_id == root.span_id


def test_thread_subclass_with_own_run_keeps_parent(trace_dir):
    class Worker(threading.Thread):
        def run(self):
            with agentscope.stage("tool", name="subclass"):
                pass

    with agentscope.task(name="root"):
        w = Worker()
        w.start()
        w.join()
    spans = by_name(read_spans(trace_dir))
    assert spans["subclass"].parent_span_id == spans["root"].span_id


def test_wrap_carries_context_where_nothing_else_does(trace_dir):
    done = threading.Event()

    def work():
        with agentscope.stage("tool", name="raw-thread"):
            pass
        done.set()

    with agentscope.task(name="root"):
        _thread.start_new_thread(agentscope.wrap(work), ())  # bypasses threading.Thread
        assert done.wait(5)
    spans = by_name(read_spans(trace_dir))
    assert spans["raw-thread"].parent_span_id == spans["root"].span_id


def test_asyncio_gather_keeps_parents(trace_dir):
    @agentscope.stage("tool")
    async def fetch(i):
        await asyncio.sleep(0.01 * (3 - i))
        with agentscope.stage("context", name=f"parse-{i}"):
            pass
        return i

    @agentscope.stage("agent")
    async def agent(i):
        return await fetch(i)

    @agentscope.task(name="async-task")
    async def main():
        results = await asyncio.gather(*(agent(i) for i in range(3)))
        extra = asyncio.create_task(agent(9))
        async with agentscope.stage("context", name="async-with"):
            await asyncio.sleep(0)
        return results + [await extra]

    assert asyncio.run(main()) == [0, 1, 2, 9]
    spans = read_spans(trace_dir)
    named = {s.name: s for s in spans if s.stage in ("task", "context")}
    task = named["async-task"]
    agents = {s.span_id: s for s in spans if s.stage == "agent"}
    fetches = {s.span_id: s for s in spans if s.stage == "tool"}
    assert len(agents) == 4 and len(fetches) == 4
    assert all(a.parent_span_id == task.span_id for a in agents.values())
    assert all(f.parent_span_id in agents for f in fetches.values())
    for i in (0, 1, 2, 9):
        assert named[f"parse-{i}"].parent_span_id in fetches
    # each parse sits under the fetch of its own agent: parents never cross between tasks
    parents = {named[f"parse-{i}"].parent_span_id for i in (0, 1, 2, 9)}
    assert len(parents) == 4
    assert named["async-with"].parent_span_id == task.span_id
    # async spans say their CPU was the event loop thread's
    assert all(a.attrs.get("agentscope.cpu.scope") == "loop" for a in agents.values())


def test_run_in_executor_keeps_parent(trace_dir):
    def blocking():
        with agentscope.stage("tool", name="in-executor"):
            pass

    async def main():
        with agentscope.stage("agent", name="loop-agent"):
            await asyncio.get_running_loop().run_in_executor(None, blocking)
            await asyncio.to_thread(blocking_named)

    def blocking_named():
        with agentscope.stage("tool", name="to-thread"):
            pass

    asyncio.run(main())
    spans = by_name(read_spans(trace_dir))
    assert spans["in-executor"].parent_span_id == spans["loop-agent"].span_id
    assert spans["to-thread"].parent_span_id == spans["loop-agent"].span_id


def test_generator_span_covers_iteration_and_not_the_consumer(trace_dir):
    @agentscope.stage("inference", name="stream")
    def stream(n):
        for i in range(n):
            with agentscope.stage("context", name=f"inner-{i}"):
                pass
            yield i

    with agentscope.task(name="root"):
        got = []
        for item in stream(3):
            with agentscope.stage("tool", name=f"consume-{item}"):
                pass
            got.append(item)
    assert got == [0, 1, 2]
    spans = by_name(read_spans(trace_dir))
    root, gen = spans["root"], spans["stream"]
    assert gen.parent_span_id == root.span_id
    for i in range(3):
        assert spans[f"inner-{i}"].parent_span_id == gen.span_id
        # the consumer's work between items is not inside the generator's span
        assert spans[f"consume-{i}"].parent_span_id == root.span_id
    assert gen.start_ns <= spans["inner-0"].start_ns and spans["inner-2"].end_ns <= gen.end_ns


def test_generator_send_throw_close_and_return_value(trace_dir):
    @agentscope.stage("tool", name="echo")
    def echo():
        received = []
        try:
            while True:
                value = yield len(received)
                if value == "stop":
                    return received
                received.append(value)
        except KeyError:
            yield "caught"

    g = echo()
    assert next(g) == 0
    assert g.send("a") == 1
    assert g.throw(KeyError("k")) == "caught"
    g.close()

    def delegate():
        return (yield from echo())

    d = delegate()
    next(d)
    d.send("x")
    try:
        d.send("stop")
    except StopIteration as stop:
        assert stop.value == ["x"]
    spans = read_spans(trace_dir)
    assert [s.status for s in spans] == ["unset", "unset"]  # GeneratorExit is not an error


def test_async_generator_span(trace_dir):
    @agentscope.stage("inference", name="astream")
    async def astream():
        for i in range(3):
            await asyncio.sleep(0)
            with agentscope.stage("context", name=f"chunk-{i}"):
                pass
            yield i

    async def main():
        with agentscope.stage("agent", name="consumer"):
            return [i async for i in astream()]

    assert asyncio.run(main()) == [0, 1, 2]
    spans = by_name(read_spans(trace_dir))
    assert spans["astream"].parent_span_id == spans["consumer"].span_id
    for i in range(3):
        assert spans[f"chunk-{i}"].parent_span_id == spans["astream"].span_id
