"""``agentscope.task`` and ``agentscope.stage``: decorators and context managers.

One object serves as decorator (sync functions, coroutine functions, generators and async
generators) and as ``with``/``async with`` context manager. Before ``init`` (and after
``shutdown``) each call costs one module-attribute read and then calls straight through.

Exceptions raised by the user's code are recorded on the span (an ``exception`` event and
error status) and re-raised unchanged; failures inside agentscope are logged once and never
reach the user's code.
"""

from __future__ import annotations

import functools
import inspect
from asyncio import _get_running_loop
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, TypeVar

from opentelemetry import trace

from .. import semconv
from .._log import log_once
from ..vocab import Lane, Stage
from . import attributes as av
from . import state
from .otelctx import SPAN_KEY as _SPAN_KEY
from .otelctx import enter as _enter_ctx
from .otelctx import get_current as _get_current
from .otelctx import leave as _detach
from .runtime import begin
from .span import LeanSpan

F = TypeVar("F", bound=Callable[..., Any])



def _trouble(what: str, exc: BaseException) -> None:
    log_once(what, "agentscope: %s failed (%r); the instrumented code runs on untraced", what, exc)


def _untraced() -> None:
    """Instrumented code ran while tracing is off: say so once if init() was never called
    (a deliberate shutdown or AGENTSCOPE_DISABLED=1 stays quiet)."""
    if not state.init_called:
        log_once("no init", "agentscope: a task or stage ran before agentscope.init() was "
                 "called: nothing is recorded. Call agentscope.init() at the start of the "
                 "program (under `agentscope run` too: it configures the trace directory, the "
                 "program still calls init)")


def _end(handle: Any, exc: Optional[BaseException]) -> None:
    """End a span the application's code left with ``exc`` (None: normally). The span is
    ended, written and no longer current whatever ``exc`` does (``fail`` never raises, and
    ``finish`` runs even if it did)."""
    try:
        if exc is not None and not isinstance(exc, GeneratorExit):
            handle.fail(exc)
    except Exception as e:
        _trouble("recording an exception", e)
    finally:
        try:
            handle.finish()
        except Exception as e:
            _trouble("ending a span", e)


def _enter(handle: Any) -> Any:
    return _enter_ctx(handle.span, _get_current())


_NAME_ATTRIBUTE = {"tool": "gen_ai.tool.name", "agent": "gen_ai.agent.name"}
_attributes_cache: dict = {}


def _attributes(stage: str, name: Optional[str], kwargs: Mapping[str, Any],
                extra: tuple = ()) -> Mapping[str, Any]:
    """The attributes of every span of one stage/task definition (not to be changed)."""
    return _attributes_sized(stage, name, kwargs, extra)[0]


def _attributes_sized(stage: str, name: Optional[str], kwargs: Mapping[str, Any],
                      extra: tuple = ()) -> tuple:
    """(the attributes, the bytes of text they hold that are not shared with other calls).

    Memoized, so ``with agentscope.stage("tool", name="x", model="m"):`` in a loop does the
    name mapping once; large values are not (the cache would keep them). Never raises.
    """
    try:
        key: Any = (stage, name, tuple((k, type(v), v) for k, v in kwargs.items()), extra)
        hit = _attributes_cache.get(key)
        if hit is not None:
            return hit, 0
    except Exception:  # an unhashable value (a list), or a hostile __hash__/__eq__
        key = None
    try:
        attrs = av.normalize(kwargs)
        attrs.update(extra)
        operation = semconv.OPERATION_BY_STAGE.get(stage)
        if operation is not None:
            attrs.setdefault("gen_ai.operation.name", operation)
        name_key = _NAME_ATTRIBUTE.get(stage)
        if name is not None and name_key is not None:
            attrs.setdefault(name_key, name)
    except Exception as e:  # pragma: no cover - normalize never raises
        _trouble("converting attributes", e)
        attrs = dict(extra)
    nbytes = sum(av.size(v) for v in attrs.values())
    if key is not None and nbytes <= _MEMO_MAX_BYTES:
        proxy = MappingProxyType(attrs)
        if len(_attributes_cache) >= 1024:
            _attributes_cache.clear()
        try:
            _attributes_cache[key] = proxy
            return proxy, 0
        except Exception:  # a hostile __eq__ met on insertion
            pass
    # not shared through the memo: a plain dict (never changed: a span copies it before
    # adding to it), which the span file encoder does not keep a cached copy of either
    return attrs, nbytes


_MEMO_MAX_BYTES = 4096  # attribute text above this is not kept in the memo


class Instrument:
    """What ``task(...)`` and ``stage(...)`` return. See the module docstring."""

    __slots__ = ("stage", "name", "kwargs", "extra", "attrs", "nbytes", "new_trace",
                 "_handles")

    def __init__(self, stage: str, name: Optional[str], kwargs: Mapping[str, Any],
                 extra: tuple = (), new_trace: bool = False) -> None:
        self.stage = stage
        if name is not None and (type(name) is not str or len(name) > av.NAME_LIMIT):
            name = av.key(name)
        self.name = name
        self.kwargs = kwargs
        self.extra = extra
        try:  # (the memo's fast path, inline: `with stage(...)` builds one of these per call)
            hit = _attributes_cache.get(
                (stage, name, tuple((k, type(v), v) for k, v in kwargs.items()), extra))
        except Exception:
            hit = None
        if hit is not None:
            self.attrs, self.nbytes = hit, 0
        else:
            self.attrs, self.nbytes = _attributes_sized(stage, name, kwargs, extra)
        self.new_trace = new_trace if new_trace is False or new_trace is True \
            else _flag(new_trace)
        self._handles: list = []

    def _attrs_for(self, name: str) -> Mapping[str, Any]:
        return self.attrs if name == self.name else _attributes(self.stage, name, self.kwargs,
                                                                 self.extra)

    def _begin(self, rt: Any, name: str, attrs: Mapping[str, Any], loop: bool) -> Any:
        return begin(rt, name, self.stage, attrs, loop, self.new_trace)

    # ---- context manager ----------------------------------------------------------------------
    def __enter__(self) -> trace.Span:
        rt = state.active
        handle = None
        if rt is None:
            _untraced()
        else:
            try:
                handle = self._begin(rt, self.name or self.stage, self.attrs,
                                     _get_running_loop() is not None)
            except RecursionError:  # the application's recursion, out of stack in our frame
                raise
            except Exception as e:
                _trouble("starting a span", e)
            if self.nbytes and type(handle) is LeanSpan:
                handle.nbytes += self.nbytes  # its own copy of large attribute values
        self._handles.append(handle)
        return handle.span if handle is not None else trace.INVALID_SPAN

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        handles = self._handles
        try:
            handle = handles.pop()
        except IndexError:  # exited more often than entered
            handle = None
        else:
            if handles:  # entered on several threads or tasks at once: take the one current here
                handle = _own_handle(handles, handle)
        if handle is not None:
            _end(handle, exc)
        return False

    async def __aenter__(self) -> trace.Span:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)

    # ---- decorator ----------------------------------------------------------------------------
    def __call__(self, fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"agentscope.{self.stage if self.stage == 'task' else 'stage'}() "
                            f"decorates a callable, not {type(fn).__name__}")
        try:
            name = self.name or _function_name(fn)
            attrs = self._attrs_for(name)
            if inspect.isasyncgenfunction(fn):
                wrapper = self._async_generator(fn, name, attrs)
            elif inspect.iscoroutinefunction(fn):
                wrapper = self._coroutine(fn, name, attrs)
            elif inspect.isgeneratorfunction(fn):
                wrapper = self._generator(fn, name, attrs)
            else:
                wrapper = self._function(fn, name, attrs)
            return functools.wraps(fn)(wrapper)  # type: ignore[return-value]
        except Exception as e:  # a callable unlike any function: it runs untraced
            _trouble("instrumenting a function", e)
            return fn

    def _function(self, fn: Callable[..., Any], name: str, attrs: Mapping[str, Any]) -> Any:
        stage, new_trace = self.stage, self.new_trace

        def traced(*args: Any, **kwargs: Any) -> Any:
            rt = state.active
            if rt is None:
                _untraced()
                return fn(*args, **kwargs)
            try:
                handle = begin(rt, name, stage, attrs, _get_running_loop() is not None, new_trace)
            except RecursionError:  # the application's recursion, out of stack in our frame
                raise
            except Exception as e:
                _trouble("starting a span", e)
                handle = None
            if handle is None:  # (called outside the except: its errors are not chained to ours)
                return fn(*args, **kwargs)
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:
                try:
                    _end(handle, e)
                except RecursionError:  # no room left on the stack (its outer spans end it)
                    pass
                raise
            try:
                handle.finish()
            except Exception as e:
                _trouble("ending a span", e)
            return result

        return traced

    def _coroutine(self, fn: Callable[..., Any], name: str, attrs: Mapping[str, Any]) -> Any:
        stage, new_trace = self.stage, self.new_trace

        async def traced(*args: Any, **kwargs: Any) -> Any:
            rt = state.active
            if rt is None:
                _untraced()
                return await fn(*args, **kwargs)
            try:
                handle = begin(rt, name, stage, attrs, True, new_trace)
            except RecursionError:  # the application's recursion, out of stack in our frame
                raise
            except Exception as e:
                _trouble("starting a span", e)
                handle = None
            if handle is None:
                return await fn(*args, **kwargs)
            try:
                result = await fn(*args, **kwargs)
            except BaseException as e:
                try:
                    _end(handle, e)
                except RecursionError:  # no room left on the stack (its outer spans end it)
                    pass
                raise
            try:
                handle.finish()
            except Exception as e:
                _trouble("ending a span", e)
            return result

        return traced

    def _detached(self, rt: Any, name: str, attrs: Mapping[str, Any], loop: bool) -> Any:
        """A started span that is current only while the generator runs (see _generator)."""
        try:
            handle = self._begin(rt, name, attrs, loop)
            _detach(handle.token)
            handle.token = None
            return handle
        except RecursionError:
            raise
        except Exception as e:
            _trouble("starting a span", e)
            return None

    def _generator(self, fn: Callable[..., Any], name: str, attrs: Mapping[str, Any]) -> Any:
        def traced(*args: Any, **kwargs: Any) -> Any:
            gen = fn(*args, **kwargs)
            rt = state.active
            handle = None if rt is None else self._detached(
                rt, name, attrs, _get_running_loop() is not None)
            if handle is None:
                return (yield from gen)
            error: Optional[BaseException] = None
            try:
                to_send: Any = None
                to_throw: Optional[BaseException] = None
                while True:
                    token = _enter(handle)
                    try:
                        if to_throw is not None:
                            item, to_throw = gen.throw(to_throw), None
                        else:
                            item = gen.send(to_send)
                    except StopIteration as stop:
                        return stop.value
                    finally:
                        _detach(token)
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        token = _enter(handle)
                        try:
                            gen.close()
                        finally:
                            _detach(token)
                        raise
                    except BaseException as e:
                        to_throw = e
            except BaseException as e:
                error = e
                raise
            finally:
                try:
                    _end(handle, error)
                except RecursionError:  # no room left on the stack
                    pass

        return traced

    def _async_generator(self, fn: Callable[..., Any], name: str,
                         attrs: Mapping[str, Any]) -> Any:
        async def traced(*args: Any, **kwargs: Any) -> Any:
            agen = fn(*args, **kwargs)
            rt = state.active
            handle = None if rt is None else self._detached(rt, name, attrs, True)
            error: Optional[BaseException] = None
            try:
                to_send: Any = None
                to_throw: Optional[BaseException] = None
                while True:
                    token = None if handle is None else _enter(handle)
                    try:
                        if to_throw is not None:
                            item, to_throw = await agen.athrow(to_throw), None
                        else:
                            item = await agen.asend(to_send)
                    except StopAsyncIteration:
                        return
                    finally:
                        if token is not None:
                            _detach(token)
                    try:
                        to_send = yield item
                    except GeneratorExit:
                        token = None if handle is None else _enter(handle)
                        try:
                            await agen.aclose()
                        finally:
                            if token is not None:
                                _detach(token)
                        raise
                    except BaseException as e:
                        to_throw = e
            except BaseException as e:
                error = e
                raise
            finally:
                if handle is not None:
                    try:
                        _end(handle, error)
                    except RecursionError:  # no room left on the stack
                        pass

        return traced


def stage(kind: "Stage | str", name: Optional[str] = None, **attrs: Any) -> Instrument:
    """A span of one stage of the agent's work (ARCHITECTURE §2).

    ``kind`` is a :class:`Stage` or its string (``"tool"``, ``"inference"``, ...); ``name``
    defaults to the decorated function's qualified name (or the stage, for ``with``). Keyword
    arguments become attributes under OpenTelemetry GenAI names where one exists
    (``model=`` -> ``gen_ai.request.model``, ``input_tokens=`` -> ``gen_ai.usage.input_tokens``,
    ``tool=`` -> ``gen_ai.tool.name``) and under ``agentscope.<key>`` otherwise.
    """
    if callable(kind) and not isinstance(kind, (str, Stage)):
        raise TypeError("name the stage: @agentscope.stage('tool'), not @agentscope.stage")
    return Instrument(_parsed(Stage, kind, "stage"), name, attrs)


def _parsed(vocabulary: Any, given: Any, what: str) -> str:
    """``vocabulary.parse(given).value``; a hostile object (whose comparison or ``str()``
    raises) is the ValueError of a value not in the vocabulary, as a wrong string is."""
    try:
        return vocabulary.parse(given).value
    except ValueError:
        raise
    except Exception:
        raise ValueError(f"unknown {what}: a {type(given).__name__} that is not one") from None


def task(name: "str | Callable[..., Any] | None" = None, *, lane: "Lane | str" = Lane.ONLINE,
         new_trace: bool = False, **attrs: Any) -> Any:
    """The root span of one agent task (one trace).

    Started while no span is current (the usual case), it begins a new trace. Started inside a
    span (local, or the remote parent a child process got through ``TRACEPARENT``), it continues
    that trace, unless ``new_trace=True``, which begins a new trace linked to the current span.
    ``lane`` is ``"online"`` or ``"batch"``. Usable bare: ``@agentscope.task``.
    """
    if callable(name):
        return task()(name)
    value = _parsed(Lane, lane, "lane")
    return Instrument(Stage.TASK.value, name, attrs, ((semconv.LANE, value),), new_trace)


def annotate(**attrs: Any) -> None:
    """Set attributes (same keyword names as ``stage``) on the current span, if recording.
    Never raises; values are converted and bounded as for ``stage`` (attributes.py)."""
    try:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(av.normalize(attrs))
    except Exception as e:
        _trouble("annotating a span", e)


def _own_handle(handles: list, last: Any) -> Any:
    """The handle whose span is current here: ``last`` (just taken off ``handles``), or one
    of ``handles``, swapped for ``last``. ``last`` when none is."""
    try:
        current = _get_current().get(_SPAN_KEY)
        if last is not None and last.span is current:
            return last
        for i in range(len(handles) - 1, -1, -1):
            handle = handles[i]
            if handle is not None and handle.span is current:
                handles[i] = last
                return handle
    except Exception:  # pragma: no cover - a list changed by another thread meanwhile
        pass
    return last


def _function_name(fn: Any) -> str:
    for attr in ("__qualname__", "__name__"):
        try:
            value = getattr(fn, attr, None)
        except Exception:
            value = None
        if value:
            return av.key(value)
    return av.safe_str(fn, av.NAME_LIMIT)


def _flag(value: Any) -> bool:
    try:
        return bool(value)
    except Exception:
        return False


def current_span() -> trace.Span:
    """The current OpenTelemetry span (ours or anyone's); a non-recording span if none."""
    return trace.get_current_span()
