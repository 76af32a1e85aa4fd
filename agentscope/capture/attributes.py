"""Attribute values as OpenTelemetry allows them, bounded, from whatever the application passes.

Never raises, whatever the value: a self-referencing list, a ``str`` subclass whose
``__str__`` raises, an object whose ``__repr__`` raises, an int of ten thousand digits, a
100 MB string. The limits (docs/capture-safety.md), like OpenTelemetry's attribute limits:

* a string value is cut to :data:`VALUE_LIMIT` characters (so is each string of a sequence,
  the ``str()`` of any other object, a span name and an exception message);
* a sequence keeps its first :data:`SEQUENCE_LIMIT` items;
* a span keeps its first :data:`COUNT_LIMIT` attributes and :data:`EVENT_LIMIT` events
  (lean mode; an SDK applies its own limits to its spans).

Primitives (``str``, ``bool``, ``int`` within int64, ``float``) and homogeneous sequences of
them are kept; ``None`` means "no value" (the caller drops it); an Enum is its value; anything
else becomes its ``str()`` (containers: a bounded ``repr``, as their ``str()`` would be).
"""

from __future__ import annotations

import enum
import reprlib
from typing import Any, Mapping

from .. import semconv

VALUE_LIMIT = 16384  # characters of one string value
SEQUENCE_LIMIT = 1024  # items of one sequence value
COUNT_LIMIT = 128  # attributes of one (lean) span
EVENT_LIMIT = 128  # events of one (lean) span
NAME_LIMIT = 1024  # characters of a span or event name

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_CONTAINERS = (dict, list, tuple, set, frozenset, bytes, bytearray)

_repr = reprlib.Repr()
_repr.maxlevel = 4
_repr.maxdict = _repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxfrozenset = 64
_repr.maxdeque = _repr.maxarray = 64
_repr.maxstring = _repr.maxother = 1024
_repr.maxlong = 256


def safe_str(value: Any, limit: int = VALUE_LIMIT) -> str:
    """``str(value)`` cut to ``limit`` characters; ``<unprintable T>`` when that raises
    (anything, even a BaseException raised by a hostile ``__str__``)."""
    text = text_of(value, limit)
    return f"<unprintable {_type_name(value)}>" if text is None else text


def text_of(value: Any, limit: int = VALUE_LIMIT) -> "str | None":
    """``str(value)`` cut to ``limit`` characters, or None when it cannot be had."""
    try:
        if type(value) is str:
            text = value
        elif isinstance(value, str):  # a subclass: its characters, not its __str__
            text = str.__str__(value)
        elif isinstance(value, (bytes, bytearray)):
            text = repr(bytes(value[:limit]))
        elif isinstance(value, _CONTAINERS):
            text = _repr.repr(value)  # bounded, and safe from self-reference
        else:
            text = str(value)
            if type(text) is not str:
                text = str.__str__(text)
        return text if len(text) <= limit else text[:limit]
    except BaseException:  # noqa: B036 - user code raising anything at all: not ours to let out
        return None


def _type_name(value: Any) -> str:
    try:
        name = type(value).__name__
        return name if type(name) is str else "object"
    except BaseException:  # noqa: B036
        return "object"


def value(v: Any) -> Any:
    """``v`` as an attribute value within the limits, or None (no value). Never raises."""
    t = type(v)
    if t is str:
        return v if len(v) <= VALUE_LIMIT else v[:VALUE_LIMIT]
    if t is int:
        return v if _INT64_MIN <= v <= _INT64_MAX else safe_str(v)
    if t is float or t is bool or v is None:
        return v
    try:
        return _other(v)
    except BaseException:  # noqa: B036 - never let a hostile value out
        return f"<unprintable {_type_name(v)}>"


def _scalar(v: Any) -> Any:
    """A primitive kept as it is (cut to the limit); anything else as its ``str()``."""
    t = type(v)
    if t is str:
        return v if len(v) <= VALUE_LIMIT else v[:VALUE_LIMIT]
    if t is bool or t is float:
        return v
    if t is int:
        return v if _INT64_MIN <= v <= _INT64_MAX else safe_str(v)
    base = _primitive_base(v)
    if base is not None:
        return _scalar(base)
    return safe_str(v)


def _primitive_base(v: Any) -> Any:
    """The plain primitive inside a subclass of one (a str subclass, numpy.float64), read
    without calling anything it overrides; None if ``v`` is no such subclass."""
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, int):
        return int.__int__(v)
    if isinstance(v, float):
        return float.__float__(v)
    return None


def _other(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        inner = v.value
        return _scalar(inner) if not isinstance(inner, enum.Enum) else safe_str(inner)
    base = _primitive_base(v)
    if base is not None:
        return _scalar(base)
    if isinstance(v, (list, tuple)):
        items = [_scalar(x) for x in v[:SEQUENCE_LIMIT]]
        kinds = {type(x) for x in items}
        if len(kinds) <= 1 and None not in items:
            return tuple(items)
        return tuple(x if type(x) is str else safe_str(x) for x in items)
    return safe_str(v)


def key(k: Any) -> str:
    """An attribute name: a ``str`` (cut to the name limit)."""
    if type(k) is str and len(k) <= NAME_LIMIT:
        return k
    return safe_str(k, NAME_LIMIT)


def size(v: Any) -> int:
    """Roughly the bytes a converted value holds beyond a small fixed part (for the writer's
    byte bound on its queue)."""
    if type(v) is str:
        return len(v)
    if type(v) is tuple:
        return sum(len(x) if type(x) is str else 8 for x in v)
    return 0


def normalize(attrs: Mapping[str, Any]) -> dict:
    """Keyword arguments -> attribute dict: names mapped to the conventions (semconv),
    values converted, ``None`` dropped, at most :data:`COUNT_LIMIT` of them. Never raises."""
    return _converted(attrs, _conventional)


def convert(attrs: Any) -> dict:
    """Attributes given with their final names (an OpenTelemetry API call): keys made
    ``str``, values converted, ``None`` dropped, at most :data:`COUNT_LIMIT`. Never raises."""
    return _converted(attrs, key)


def _conventional(k: Any) -> str:
    """An attribute's name as the conventions spell it (semconv), else as given."""
    try:
        return semconv.attribute_name(key(k))
    except BaseException:  # noqa: B036
        return key(k)


def _converted(attrs: Any, name_of: Any) -> dict:
    out: dict = {}
    try:
        items = list(attrs.items()) if attrs else ()
    except BaseException:  # noqa: B036 - a hostile mapping
        return out
    for k, v in items:
        if len(out) >= COUNT_LIMIT:
            break
        v = value(v)
        if v is not None:
            out[name_of(k)] = v
    return out


def describe(exc: BaseException) -> str:
    """``"<type name>: <message>"`` of an exception, or the type name alone when its message
    cannot be had (its ``__str__`` raises). Never raises."""
    name = _type_name(exc)
    message = text_of(exc, 1024)
    return name if message is None else f"{name}: {message}"[:1024]
