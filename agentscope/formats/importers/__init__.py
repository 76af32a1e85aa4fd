"""Importers: foreign trace files -> :class:`~agentscope.records.SpanRecord` (docs/file-formats.md).

Each module here reads one format and exposes ``IMPORTER``, an :class:`Importer`:

* ``sniff(head, name)``: whether the first bytes (at most :data:`HEAD_BYTES`, already
  decompressed) of a file named ``name`` are this format. Decided by content; the name only
  breaks ties. Must be cheap and must not raise.
* ``read(data, path, errors)``: the spans of the whole (decompressed) file. A bad record is
  appended to ``errors`` as a :class:`~agentscope.errors.TraceFormatError` naming ``path`` and
  the line (or record) and the rest still loads; it never raises for bad input.

The store's loader asks each importer in :data:`ORDER` in turn (agentscope.store.loading).
"""

from __future__ import annotations

import importlib
from typing import Callable, Iterator, NamedTuple, Optional

from ...records import SpanRecord

HEAD_BYTES = 65536


class Importer(NamedTuple):
    name: str  # short name, as shown in reports: "langfuse"
    label: str  # what a user calls the format: "Langfuse trace export"
    sniff: Callable[[bytes, str], bool]
    read: Callable[[bytes, str, list], Iterator[SpanRecord]]


# most specific first: the first whose sniff says yes reads the file
ORDER = ("otlp_proto", "langfuse", "anyagent", "jaeger", "phoenix", "tracelab")


def importers() -> list[Importer]:
    """The importers that are present, in :data:`ORDER`."""
    found = []
    for name in ORDER:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith(__name__):
                continue  # not written (yet)
            raise
        found.append(module.IMPORTER)
    return found


def detect(head: bytes, name: str) -> Optional[Importer]:
    """The importer for a file whose first bytes are ``head``, or None."""
    for importer in importers():
        try:
            if importer.sniff(head, name):
                return importer
        except Exception:  # a sniffer must not break detection of the others
            continue
    return None


def by_name(name: str) -> Importer:
    """The importer called ``name``. Raises KeyError."""
    for importer in importers():
        if importer.name == name:
            return importer
    raise KeyError(name)
