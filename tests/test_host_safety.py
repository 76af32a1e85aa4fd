"""Host safety: nothing of agentscope's reaches the application (issue 18).

The probe's host-application fault cases as a matrix: each API entry point (``task`` and
``stage`` decorating functions, coroutines, generators and async generators, and as
``with``/``async with``; ``annotate``; the OpenTelemetry span API on our spans; ``init``) ×
each hostile exception, attribute value, name or configuration × lean and SDK mode. Each case
asserts that

* the application sees only its own exception, re-raised unchanged (the same object);
* the context after the call is the context before (the same object);
* the span is written (or its drop counted), its description readable;
* a task started afterwards is a root (not the child of a span left current).
"""

from __future__ import annotations

import asyncio
import enum
import glob
import json
import logging
import os
import sys
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider

import agentscope
from agentscope import _log
from agentscope.capture import attributes, otelctx, runtime, state

MODES = ("lean", "sdk")
SDK_PROVIDER = TracerProvider()  # one for the module: our processor is attached once
FORMS = ("function", "coroutine", "generator", "async_generator", "with", "async_with")


@pytest.fixture(params=MODES)
def mode(request, tmp_path):
    """Tracing on in lean or SDK mode, into a fresh directory (flushed by the test only)."""
    kw = {"tracer_provider": SDK_PROVIDER} if request.param == "sdk" else {}
    rt = agentscope.init(tmp_path / "traces", service="host", flush_interval_s=3600, **kw)
    assert rt is not None and rt.mode == request.param
    yield request.param
    agentscope.shutdown()


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Warnings are said once per process: each test here starts with none said, and leaves
    the process's record as it found it (other tests wait for theirs)."""
    monkeypatch.setattr(_log, "_seen", set())


def spans() -> dict:
    """The spans written so far, by name (each name once, but for ``later``); every line of
    every span file must be a whole JSON object."""
    rt = state.active
    agentscope.flush()
    out: dict = {}
    for path in glob.glob(str(rt.trace_dir / "spans-*.jsonl")):
        with open(path, encoding="ascii") as f:
            text = f.read()
        assert not text or text.endswith("\n"), f"torn line in {path}"
        for line in text.splitlines():
            span = json.loads(line)
            out.setdefault(span["name"], []).append(span)
    return out


# ---- the application's exceptions --------------------------------------------------------
class BadStr(Exception):
    def __str__(self):
        raise ValueError("no str")


class BadRepr(Exception):
    def __repr__(self):
        raise ValueError("no repr")


class BadBoth(Exception):
    def __str__(self):
        raise ValueError("no str")

    def __repr__(self):
        raise ValueError("no repr")


class StrRaisesInterrupt(Exception):
    def __str__(self):
        raise KeyboardInterrupt


class OwnBase(BaseException):
    pass


class StrRaisesBase(Exception):
    def __str__(self):
        raise OwnBase


class BadArgs(Exception):
    @property
    def args(self):
        raise RuntimeError("no args")


class Unpickled(Exception):
    """What unpickling without ``__init__`` arguments gives: its ``__str__`` needs fields
    ``__init__`` never set."""

    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code, self.detail = code, detail

    def __str__(self):
        return f"{self.code}: {self.detail}"


class HostileModule(Exception):
    pass


HostileModule.__module__ = None


def _chained():
    try:
        raise BadStr()
    except BadStr as cause:
        try:
            raise ValueError("outer") from cause
        except ValueError as e:
            return e


def _cyclic():
    a, b = ValueError("a"), KeyError("b")
    a.__context__, b.__context__ = b, a
    return a


EXCEPTIONS = {
    "plain": lambda: ValueError("x"),
    "str-raises": BadStr,
    "repr-raises": BadRepr,
    "str-and-repr-raise": BadBoth,
    "str-raises-keyboardinterrupt": StrRaisesInterrupt,
    "str-raises-baseexception": StrRaisesBase,
    "args-raises": BadArgs,
    "unpickled": lambda: Unpickled.__new__(Unpickled),
    "hostile-module": lambda: HostileModule("m"),
    "keyboardinterrupt": KeyboardInterrupt,
    "systemexit": lambda: SystemExit(3),
    "generatorexit": GeneratorExit,
    "baseexception-subclass": OwnBase,
    "cancelled": asyncio.CancelledError,
    "huge-message": lambda: ValueError("x" * 2_000_000),
    "chained-from-bad": _chained,
    "cyclic-context": _cyclic,
}
if sys.version_info >= (3, 11):
    EXCEPTIONS["group-of-bad"] = lambda: ExceptionGroup(  # noqa: F821 - Python 3.11+
        "g", [BadStr(), BadBoth(), ValueError("v")])


def _instrument(api: str, name: str = "case", **attrs):
    if api == "task":
        return agentscope.task(name=name, **attrs)
    return agentscope.stage("tool", name=name, **attrs)


def run_in_form(form: str, make, body):
    """Run ``body()`` inside the instrument ``make()`` used in ``form``; return (what was
    raised, the context before, the context after). A task named ``later`` is run after, in
    the same context (asyncio forms: inside the same task)."""
    if form in ("function", "generator", "with"):
        if form == "function":
            call = make()(lambda: body())
        elif form == "generator":
            def gen():
                yield 1
                body()
            traced = make()(gen)

            def call():
                list(traced())
        else:
            def call():
                with make():
                    body()
        before = otelctx.get_current()
        raised = None
        try:
            call()
        except BaseException as e:  # noqa: B036 - what the application would see
            raised = e
        after = otelctx.get_current()
        with agentscope.task(name="later"):
            pass
        return raised, before, after

    if form == "coroutine":
        async def coro():
            await asyncio.sleep(0)
            body()
        acall = make()(coro)
    elif form == "async_generator":
        async def agen():
            yield 1
            await asyncio.sleep(0)
            body()
        traced = make()(agen)

        async def acall():
            async for _ in traced():
                pass
    else:
        async def acall():
            async with make():
                await asyncio.sleep(0)
                body()

    async def observe():
        before = otelctx.get_current()
        raised = None
        try:
            await acall()
        except BaseException as e:  # noqa: B036
            raised = e
        after = otelctx.get_current()
        async with agentscope.task(name="later"):
            pass
        return raised, before, after

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(observe())
    finally:
        loop.close()


def assert_later_is_root(written: dict) -> None:
    later = written["later"]
    assert len(later) == 1 and later[0]["parent_span_id"] is None, later


@pytest.mark.parametrize("kind", list(EXCEPTIONS))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("api", ("task", "stage"))
def test_the_applications_exception_passes_unchanged_and_the_span_ends(mode, api, form, kind):
    exc = EXCEPTIONS[kind]()

    def body():
        raise exc

    raised, before, after = run_in_form(form, lambda: _instrument(api), body)
    if kind == "cancelled" and form in ("coroutine", "async_generator", "async_with"):
        assert isinstance(raised, asyncio.CancelledError)  # asyncio's own, as without us
    else:
        assert raised is exc
    assert after is before
    written = spans()
    (case,) = written["case"]
    if kind == "generatorexit":
        assert case["status"] == "unset"  # not an error
    else:
        assert case["status"] == "error"
        message = case["status_message"]
        assert isinstance(message, str) and message.startswith(type(exc).__name__)
        events = [e for e in case["events"] if e["name"] == "exception"]
        assert len(events) == 1 and events[0]["attrs"]["exception.type"]
        for value in events[0]["attrs"].values():
            assert len(value) <= attributes.VALUE_LIMIT
    assert_later_is_root(written)


# ---- hostile attribute values -------------------------------------------------------------
class BadStrValue(str):
    def __str__(self):
        raise ValueError("no str")

    __repr__ = __str__


class Unprintable:
    def __str__(self):
        raise ValueError("no str")

    def __repr__(self):
        raise ValueError("no repr")


class StrNotStr:
    def __str__(self):
        return 5


class BadHash:
    def __hash__(self):
        raise ValueError("no hash")


class BadEq:
    def __hash__(self):
        return 0

    def __eq__(self, other):
        raise ValueError("no eq")


class BadBool:
    def __bool__(self):
        raise ValueError("no bool")

    def __len__(self):
        raise ValueError("no len")


class HostileEnum(enum.Enum):
    ONE = Unprintable()


def _selfref_list():
    x = [1]
    x.append(x)
    return x


def _selfref_dict():
    x = {"a": 1}
    x["me"] = x
    return x


def _deep_list():
    x = []
    for _ in range(5000):
        x = [x]
    return x


VALUES = {
    "selfref-list": _selfref_list,
    "selfref-dict": _selfref_dict,
    "deep-list": _deep_list,
    "str-subclass-str-raises": lambda: BadStrValue("text"),
    "str-and-repr-raise": Unprintable,
    "str-returns-int": StrNotStr,
    "hash-raises": BadHash,
    "eq-raises": BadEq,
    "bool-raises": BadBool,
    "enum-of-unprintable": lambda: HostileEnum.ONE,
    "huge-str": lambda: "x" * 3_000_000,
    "huge-list": lambda: list(range(300_000)),
    "int-beyond-int64": lambda: 10 ** 5000,
    "nan": lambda: float("nan"),
    "bytes": lambda: b"\xff" * 100_000,
    "lone-surrogate": lambda: "a\udcffb",
    "generator": lambda: (i for i in range(3)),
}
VIAS = ("decorator", "with", "annotate", "set_attribute", "event")


def _check_value(value) -> None:
    """What was written is JSON, within the limits."""
    if isinstance(value, str):
        assert len(value) <= attributes.VALUE_LIMIT
    elif isinstance(value, list):
        assert len(value) <= attributes.SEQUENCE_LIMIT
        assert all(not isinstance(v, str) or len(v) <= attributes.VALUE_LIMIT for v in value)
    else:
        assert value is None or isinstance(value, (int, float, bool))


# in SDK mode set_attribute and add_event act on the application's own SDK span: not ours to
# guard, so those pairs are not generated
MODE_VIAS = [(m, v) for m in MODES for v in VIAS
             if not (m == "sdk" and v in ("set_attribute", "event"))]


@pytest.mark.parametrize("kind", list(VALUES))
@pytest.mark.parametrize("mode,via", MODE_VIAS, indirect=["mode"])
def test_hostile_attribute_values_are_converted_never_raised(mode, via, kind):
    value = VALUES[kind]()
    before = otelctx.get_current()
    if via == "decorator":
        @agentscope.stage("tool", name="case", value=value)
        def f():
            return "ok"

        assert f() == "ok"
    elif via == "with":
        with agentscope.stage("tool", name="case", value=value):
            pass
    else:
        with agentscope.stage("tool", name="case") as span:
            if via == "annotate":
                agentscope.annotate(value=value)
            elif via == "set_attribute":
                span.set_attribute("agentscope.value", value)
            else:
                span.add_event("e", {"value": value})
    assert otelctx.get_current() is before
    with agentscope.task(name="later"):
        pass
    written = spans()
    (case,) = written["case"]
    for v in case["attrs"].values():
        _check_value(v)
    for event in case["events"]:
        for v in event["attrs"].values():
            _check_value(v)
    assert_later_is_root(written)


# ---- hostile names --------------------------------------------------------------------------
NAMES = {
    "int": lambda: 123,
    "str-subclass-str-raises": lambda: BadStrValue("named"),
    "unprintable": Unprintable,
    "huge": lambda: "n" * 1_000_000,
    "lone-surrogate": lambda: "a\udcffb",
}


@pytest.mark.parametrize("kind", list(NAMES))
@pytest.mark.parametrize("form", ("function", "with"))
@pytest.mark.parametrize("api", ("task", "stage"))
def test_hostile_names_are_made_text(mode, api, form, kind):
    name = NAMES[kind]()
    raised, before, after = run_in_form(form, lambda: _instrument(api, name), lambda: None)
    assert raised is None and after is before
    written = spans()
    (case,) = [s for n, group in written.items() if n != "later" for s in group]
    assert isinstance(case["name"], str) and len(case["name"]) <= attributes.NAME_LIMIT
    assert_later_is_root(written)


# ---- the OpenTelemetry span API on our spans (other instrumentation calls it) --------------
class HostileMapping(dict):
    def items(self):
        raise RuntimeError("no items")


API_CALLS = {
    "end-with-a-string-time": lambda s: s.end(end_time="soon"),
    "set_status-of-junk": lambda s: s.set_status("junk"),
    "set_status-unprintable": lambda s: s.set_status(
        __import__("opentelemetry.trace", fromlist=["StatusCode"]).StatusCode.ERROR,
        Unprintable()),
    "update_name-unprintable": lambda s: s.update_name(Unprintable()),
    "add_link-none": lambda s: s.add_link(None),
    "add_link-junk": lambda s: s.add_link(object()),
    "record_exception-str-raises": lambda s: s.record_exception(BadStr()),
    "set_attributes-hostile-mapping": lambda s: s.set_attributes(HostileMapping(a=1)),
    "set_attributes-unprintable-key": lambda s: s.set_attributes({Unprintable(): 1}),
    "add_event-hostile": lambda s: s.add_event(Unprintable(), HostileMapping(a=1), "t"),
    "many-events-and-attributes": lambda s: [
        (s.add_event(f"e{i}"), s.set_attribute(f"a{i}", i)) for i in range(1000)],
}


@pytest.mark.parametrize("call", list(API_CALLS))
def test_the_span_api_on_our_lean_spans_never_raises(tmp_path, call):
    agentscope.init(tmp_path, flush_interval_s=3600)
    before = otelctx.get_current()
    with agentscope.stage("tool", name="case") as span:
        API_CALLS[call](span)
    assert otelctx.get_current() is before
    with agentscope.task(name="later"):
        pass
    written = spans()
    (case,) = [s for n, group in written.items() if n != "later" for s in group]
    assert len(case["attrs"]) <= attributes.COUNT_LIMIT + 8  # (+ our own accounting)
    assert len(case["events"]) <= attributes.EVENT_LIMIT
    assert case["end_ns"] >= case["start_ns"]
    assert_later_is_root(written)


TRACER_CALLS = {
    "unprintable-name": lambda t: t.start_span(Unprintable()),
    "hostile-attributes": lambda t: t.start_span("x", attributes=HostileMapping(a=1)),
    "string-start-time": lambda t: t.start_span("x", start_time="now"),
    "junk-links": lambda t: t.start_span("x", links=[object()]),
    "junk-context": lambda t: t.start_span("x", context=object()),
}


@pytest.mark.parametrize("call", list(TRACER_CALLS))
def test_other_instrumentation_starting_spans_badly_is_not_raised_into(tmp_path, call):
    from opentelemetry import trace

    agentscope.init(tmp_path, flush_interval_s=3600)
    tracer = trace.get_tracer("other-instrumentation")
    span = TRACER_CALLS[call](tracer)
    span.end()
    assert otelctx.get_current().get(otelctx.SPAN_KEY) is None


# ---- configuration --------------------------------------------------------------------------
def _warnings(caplog) -> list:
    return [r for r in caplog.records if r.name == "agentscope" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("variable,value,attribute,expected", [
    ("AGENTSCOPE_FLUSH_INTERVAL", "-1", "flush_interval_s", 1.0),
    ("AGENTSCOPE_FLUSH_INTERVAL", "inf", "flush_interval_s", 1.0),
    ("AGENTSCOPE_FLUSH_INTERVAL", "nan", "flush_interval_s", 1.0),
    ("AGENTSCOPE_FLUSH_INTERVAL", "0", "flush_interval_s", 1.0),
    ("AGENTSCOPE_FLUSH_INTERVAL", "soon", "flush_interval_s", 1.0),
    ("AGENTSCOPE_FLUSH_INTERVAL", "1e400", "flush_interval_s", 1.0),
    ("AGENTSCOPE_FLUSH_INTERVAL", "1e-9", "flush_interval_s", runtime.MIN_FLUSH_INTERVAL_S),
    ("AGENTSCOPE_MAX_QUEUE", "0.5", "max_queue", 65536),
    ("AGENTSCOPE_MAX_QUEUE", "inf", "max_queue", 65536),
    ("AGENTSCOPE_MAX_QUEUE", "nan", "max_queue", 65536),
    ("AGENTSCOPE_MAX_QUEUE", "0", "max_queue", 65536),
    ("AGENTSCOPE_MAX_QUEUE", "-3", "max_queue", 65536),
    ("AGENTSCOPE_MAX_QUEUE", "12.5", "max_queue", 65536),
    ("AGENTSCOPE_MAX_QUEUE", "lots", "max_queue", 65536),
])
def test_a_bad_setting_falls_back_to_its_default_with_one_warning(
        tmp_path, monkeypatch, caplog, fresh_warnings, variable, value, attribute, expected):
    monkeypatch.setenv(variable, value)
    with caplog.at_level(logging.WARNING, logger="agentscope"):
        rt = agentscope.init(tmp_path)
        assert rt is not None and getattr(rt.config, attribute) == expected
        with agentscope.task(name="case"):
            pass
        writer = rt.writer
        assert writer._thread is not None and writer._thread.is_alive()  # inf did kill it
        agentscope.shutdown()
        agentscope.init(tmp_path)  # said once
    (warning,) = _warnings(caplog)
    assert variable in warning.getMessage() and value in warning.getMessage()
    assert [s.name for s in _scan(tmp_path)] == ["case"]


def _scan(directory):
    from agentscope.store.tracedir import scan

    result = scan(directory)
    assert not result.problems, [str(p) for p in result.problems]
    return result.spans


@pytest.mark.parametrize("arguments", [
    {"flush_interval_s": "soon"}, {"flush_interval_s": float("inf")}, {"flush_interval_s": -2},
    {"max_queue": object()}, {"max_queue": 0.5}, {"max_queue": float("nan")},
    {"service": Unprintable()}, {"service": "a\udcffb"}, {"collect": float("inf")},
])
def test_bad_arguments_fall_back_too(tmp_path, caplog, fresh_warnings, arguments):
    with caplog.at_level(logging.WARNING, logger="agentscope"):
        rt = agentscope.init(tmp_path, **arguments)
        assert rt is not None
        with agentscope.task(name="case"):
            pass
    assert len(_warnings(caplog)) <= 1
    agentscope.shutdown()
    (span,) = _scan(tmp_path)
    assert span.name == "case" and span.service.encode("utf-8")


def _not_writable(monkeypatch):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m, *a, **k: False if m & os.W_OK
                        else real(p, m, *a, **k))


@pytest.mark.parametrize("case", ["a-file", "under-proc", "not-writable", "nul-byte",
                                  "env-a-file"])
def test_an_unusable_trace_directory_turns_tracing_off_with_one_warning(
        tmp_path, monkeypatch, caplog, fresh_warnings, case):
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    directory = {"a-file": a_file, "under-proc": "/proc/agentscope-traces",
                 "not-writable": tmp_path / "ro", "nul-byte": "tra\0ces",
                 "env-a-file": tmp_path / "unused"}[case]
    if case == "not-writable":
        _not_writable(monkeypatch)
    if case == "env-a-file":
        monkeypatch.setenv("AGENTSCOPE_TRACE_DIR", str(a_file))
    with caplog.at_level(logging.WARNING, logger="agentscope"):
        assert agentscope.init(directory) is None
        before = otelctx.get_current()
        with agentscope.task(name="untraced"):
            pass
        assert otelctx.get_current() is before
        assert agentscope.init(directory) is None  # said once
        assert agentscope.flush() is True
    (warning,) = _warnings(caplog)
    assert "tracing is off" in warning.getMessage()


@pytest.mark.parametrize("value", ["00-zz-yy-01", "a\udcffb", "00-" + "1" * 5000,
                                   "00-00000000000000000000000000000000-0000000000000000-01"])
def test_a_bad_traceparent_is_ignored(tmp_path, monkeypatch, caplog, fresh_warnings, value):
    monkeypatch.setenv("TRACEPARENT", value)
    with caplog.at_level(logging.WARNING, logger="agentscope"):
        rt = agentscope.init(tmp_path)
        assert rt is not None and rt.default_parent is None
        with agentscope.task(name="case"):
            pass
    agentscope.shutdown()
    assert len(_warnings(caplog)) == 1
    (span,) = _scan(tmp_path)
    assert span.parent_span_id is None


@pytest.mark.parametrize("variable", ["AGENTSCOPE_SERVICE", "OTEL_SERVICE_NAME"])
def test_service_names_from_the_environment_are_made_text(tmp_path, monkeypatch, variable):
    monkeypatch.setenv(variable, "svc\udcff" + "x" * 5000)
    rt = agentscope.init(tmp_path)
    assert rt.service.startswith("svc?") and len(rt.service) <= attributes.NAME_LIMIT
    with agentscope.task(name="case"):
        pass
    agentscope.shutdown()
    (span,) = _scan(tmp_path)
    assert span.service == rt.service


@pytest.mark.parametrize("value,expected", [
    ("inf", (10.0, True)), ("nan", (10.0, True)), ("-1", (10.0, True)), ("fast", (10.0, True)),
    ("1e9", (10.0, True)), ("0", (0.0, False)), ("gil", (10.0, False)), ("50", (50.0, True)),
])
def test_collect_rates_that_are_not_rates_fall_back(fresh_warnings, value, expected):
    assert runtime._collect_rate(False, value) == expected


class BrokenProvider:
    def add_span_processor(self, processor):
        raise RuntimeError("provider refuses")

    def get_tracer(self, *a, **k):
        raise RuntimeError("no tracer")


def test_a_broken_tracer_provider_leaves_the_program_untraced(tmp_path, caplog, fresh_warnings):
    with caplog.at_level(logging.WARNING, logger="agentscope"):
        assert agentscope.init(tmp_path, tracer_provider=BrokenProvider()) is None
        with agentscope.task(name="untraced"):
            pass
    assert len(_warnings(caplog)) == 1
    from agentscope.capture import children

    assert state.active is None and not children.enabled


# ---- context, generators, processes -------------------------------------------------------
def test_generators_closed_from_another_thread_log_nothing(mode, caplog):
    @agentscope.stage("tool", name="decorated")
    def decorated():
        with agentscope.stage("tool", name="inside-decorated"):
            yield 1
            yield 2

    def plain():
        with agentscope.stage("tool", name="inside-plain"):
            yield 1
            yield 2

    @agentscope.stage("tool", name="async-decorated")
    async def adecorated():
        async with agentscope.stage("tool", name="inside-async"):
            yield 1
            yield 2

    with caplog.at_level(logging.DEBUG):
        for make in (decorated, plain):
            before = otelctx.get_current()
            it = make()
            next(it)
            otelctx._var.set(before)  # (a plain generator leaks its span to the caller)
            t = threading.Thread(target=it.close)
            t.start()
            t.join()
        loop, other = asyncio.new_event_loop(), asyncio.new_event_loop()
        agen = adecorated()
        loop.run_until_complete(agen.__anext__())
        t = threading.Thread(target=lambda: other.run_until_complete(agen.aclose()))
        t.start()
        t.join()
        loop.close()
        other.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "Failed to detach" not in caplog.text
    written = spans()
    for name in ("decorated", "inside-decorated", "inside-plain", "async-decorated",
                 "inside-async"):
        assert len(written[name]) == 1, name


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_leaving_an_open_span_does_not_write_it_again(mode):
    with agentscope.task(name="open-at-fork"):
        pid = os.fork()
        if pid == 0:  # the child: its own span, then it leaves the parent's
            try:
                with agentscope.stage("tool", name="in-child"):
                    pass
            except BaseException:  # noqa: B036
                os._exit(1)
    if pid == 0:
        try:
            agentscope.shutdown()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    written = spans()
    (parent,) = written["open-at-fork"]
    (child,) = written["in-child"]
    assert parent["pid"] == os.getpid() and child["pid"] == pid
    assert child["parent_span_id"] == parent["span_id"]


def test_a_recursion_overflow_through_spans_leaves_the_context_clean(mode):
    @agentscope.stage("tool", name="recursive")
    def recursive(n):
        return recursive(n + 1)

    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 200)
    try:
        before = otelctx.get_current()
        with pytest.raises(RecursionError) as info:
            recursive(0)
        assert info.value.__context__ is None  # nothing of ours chained to it
        assert otelctx.get_current() is before
    finally:
        sys.setrecursionlimit(limit)
    with agentscope.task(name="later"):
        pass
    written = spans()
    assert len(written["recursive"]) > 50
    assert_later_is_root(written)


def test_one_instrument_entered_on_several_threads_ends_each_ones_own_span(mode):
    shared = agentscope.stage("tool", name="shared")
    barrier = threading.Barrier(4)
    problems = []

    def work():
        before = otelctx.get_current()
        with shared as span:
            barrier.wait(5)
            if otelctx.get_current().get(otelctx.SPAN_KEY) is not span:
                problems.append("not current")
            barrier.wait(5)
        if otelctx.get_current() is not before:
            problems.append("context not restored")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not problems
    shared_spans = spans()["shared"]
    assert len(shared_spans) == 4 and len({s["span_id"] for s in shared_spans}) == 4
    assert len({s["tid"] for s in shared_spans}) == 4
