"""Ingest throughput of each trace importer, end to end as a user pays it, against reading the
same spans as OTLP/JSON in the same run.

For each format, the real sample files of tests/corpus (see its README) are copied until there
are about ``--spans`` spans, each copy with NEW ids (trace, span/observation, parent and
reference ids, session ids...: the same new id for the same old one within a copy, of the same
shape, never one handed out before; every other field as it was), written in the layout users
have:

  langfuse        Langfuse trace exports ({trace, observations[]}), one trace per file
                  (tests/corpus/agent_traces/langfuse_framework_traces/, 20 runs, 16 frameworks)
  anyagent        any-agent AgentTrace JSON, one trace per file (any_agent/*/*.json; the one span
                  that e61adc4e/OPENAI_trace.json holds twice is kept once)
  jaeger          Jaeger JSON, {"data": [200 traces]} per file (jaeger_ui_genai/genaiTestTrace.json)
  phoenix         Phoenix span export JSONL, one span per line, files of ~10,000 spans
                  (tests/data/importers/phoenix_spans.jsonl)
  tracelab        TraceLab round traces JSONL, one round per line, whole sessions, files of
                  ~10,000 spans (tests/corpus/tracelab/round_trace.jsonl)
  otlp-protobuf   OTLP protobuf, one ExportTraceServiceRequest of ~1000 spans per file: the
                  any-agent spans (OpenTelemetry GenAI spans, what an OTLP exporter sends),
                  encoded from their OTLP/JSON baseline by agentscope's exporter

The baseline of each format is the same spans as OTLP/JSON lines (the Collector file exporter's
layout, one request of ~1000 spans per line), made by agentscope itself: ``analyze()`` of the
scaled directory, ``exporters.otlp_traces.write()``, then the ``agentscope.analysis.*``
attributes the exporter adds removed again (the loader drops them anyway; they would only make
the baseline's files bigger than the same spans). Every scaled directory and every baseline is
checked before anything is timed: ``analyze(dir, db=":memory:")`` finds 0 problems, 0 duplicates
and the expected span count, and every file is read as its format. This preparation runs in a
child process, so that the measuring process stays small.

Then, interleaved (format A, its baseline, format B, ...; the pair's order alternates between
rounds), ``--repeat`` times, medians and min-max reported:

  CLI (end to end)  ``agentscope analyze DIR --format json --db <fresh file>`` as a subprocess,
                    stdout to /dev/null: wall time from start to exit (interpreter start,
                    imports, load, analysis, the JSON report); spans/s = spans / wall
  load only         ``Store(None).load(DIR)``, in this process, into a fresh in-memory store

The ratio is the format's spans/s over its baseline's (baseline = 1.00x; below 1 is slower).

Usage: python benchmarks/import_throughput.py [--spans 50000] [--repeat 3]
       [--only langfuse,jaeger] [--keep]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
import re
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus"
FORMATS = ("langfuse", "anyagent", "jaeger", "phoenix", "tracelab", "otlp-protobuf")
BASELINE_FORMAT = "otlp-lines"  # what the loader calls OTLP/JSON, one request per line
JAEGER_TRACES_PER_FILE = 200
LINES_SPANS_PER_FILE = 10_000  # Phoenix and TraceLab files (whole units per file)
SEED = 1


class BenchError(Exception):
    """The benchmark cannot measure what it means to (a bad scaled set, a failed run)."""


# ---- fresh ids ------------------------------------------------------------------------------
# an id inside a value: a UUID, or a run of 16+ hex digits (trace/span ids, msg_<hex>, toolu_<hex>)
_TOKEN = re.compile(r"(?<![0-9A-Za-z])(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                    r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{16,})(?![0-9A-Za-z])")
_TAIL = re.compile(r"[0-9A-Za-z]{8,}\Z")  # the random-looking end of any other id


class Renamer:
    """New ids for the copies of a template. Within one copy (:meth:`next_copy` starts one) the
    same old id, or id inside a composite value (``claude:<uuid>``, ``<uuid>:3``), always gets
    the same new one, so that parents and references still point where they did. A new id has
    the old one's shape: hex of the same length and case, a UUID a UUID, an integer one of as
    many bits; a value with no id-like part gets a serial suffix. No new id is handed out
    twice."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)
        self.used: set = set()
        self.serial = 0
        self.map: dict = {}

    def next_copy(self) -> None:
        self.map = {}

    def __call__(self, old: Any) -> Any:
        if old is None or isinstance(old, bool) or not isinstance(old, (int, str)):
            return old
        key = (type(old).__name__, old)
        new = self.map.get(key)
        if new is None:
            new = self.map[key] = self._fresh(old)
        return new

    def phoenix_node_id(self, old: Any) -> Any:
        """Phoenix's own row id, base64 of ``Span:<number>``: a new number."""
        try:
            kind = base64.b64decode(old, validate=True).decode().split(":", 1)[0]
        except (ValueError, TypeError, UnicodeDecodeError):
            return self(old)
        self.serial += 1
        return base64.b64encode(f"{kind}:{1_000_000 + self.serial}".encode()).decode()

    def _fresh(self, old: int | str) -> int | str:
        if isinstance(old, int):
            bits = max(old.bit_length(), 32)
            return self._unique(lambda: self.rng.randrange(1 << (bits - 1), 1 << bits))
        if _TOKEN.search(old):
            return _TOKEN.sub(lambda m: self._token(m.group()), old)
        tail = _TAIL.search(old)
        if tail:
            return old[:tail.start()] + self._unique(lambda: _scramble(tail.group(), self.rng))
        self.serial += 1
        return f"{old}-{self.serial}"

    def _token(self, token: str) -> str:
        key = ("token", token)
        new = self.map.get(key)
        if new is None:
            new = self.map[key] = self._unique(lambda: _scramble(token, self.rng))
        return new

    def _unique(self, make: Callable[[], Any]) -> Any:
        for _ in range(100):
            value = make()
            if value not in self.used and str(value).strip("0-"):
                self.used.add(value)
                return value
        raise BenchError("could not make a new unique id (the template's ids are too short)")


def _scramble(text: str, rng: random.Random) -> str:
    """Random characters of the same kinds: hex digits stay hex of the same case, digits
    digits, letters letters; separators stay."""
    if all(c in string.hexdigits or c == "-" for c in text):
        upper = any(c.isupper() for c in text) and not any(c.islower() for c in text)
        alphabet = "0123456789ABCDEF" if upper else "0123456789abcdef"
        return "".join(c if c == "-" else rng.choice(alphabet) for c in text)
    return "".join(rng.choice(string.digits) if c.isdigit() else
                   rng.choice(string.ascii_lowercase) if c.islower() else
                   rng.choice(string.ascii_uppercase) if c.isupper() else c for c in text)


def _map_keys(obj: Any, keys: tuple, ids: Renamer) -> None:
    if isinstance(obj, dict):
        for key in keys:
            if obj.get(key) is not None:
                obj[key] = ids(obj[key])


def rename_langfuse(doc: dict, ids: Renamer) -> dict:
    """The trace's id and session, each observation's id, traceId and parentObservationId (in
    ``observations`` and in the trace object's copy of them)."""
    def observation(o: Any) -> Any:
        if isinstance(o, str):  # some exports list the observations' ids only
            return ids(o)
        _map_keys(o, ("id", "traceId", "parentObservationId"), ids)
        return o

    trace = doc.get("trace")
    if isinstance(trace, dict):
        _map_keys(trace, ("id", "sessionId"), ids)
        if isinstance(trace.get("observations"), list):
            trace["observations"] = [observation(o) for o in trace["observations"]]
    if isinstance(doc.get("observations"), list):
        doc["observations"] = [observation(o) for o in doc["observations"]]
    return doc


def rename_anyagent(doc: dict, ids: Renamer) -> dict:
    """trace_id and span_id (JSON integers) of each span's context, parent and links."""
    for span in doc.get("spans") or ():
        if not isinstance(span, dict):
            continue
        contexts = [span.get("context"), span.get("parent")]
        contexts += [link.get("context") for link in span.get("links") or ()
                     if isinstance(link, dict)]
        for context in contexts:
            _map_keys(context, ("trace_id", "span_id"), ids)
    return doc


def rename_jaeger(trace: dict, ids: Renamer) -> dict:
    """The trace's traceID; each span's traceID, spanID, parentSpanID and references."""
    _map_keys(trace, ("traceID",), ids)
    for span in trace.get("spans") or ():
        _map_keys(span, ("traceID", "spanID", "parentSpanID"), ids)
        for ref in (span.get("references") or ()) if isinstance(span, dict) else ():
            _map_keys(ref, ("traceID", "spanID"), ids)
    return trace


def rename_phoenix(span: dict, ids: Renamer) -> dict:
    """context.trace_id/span_id (nested or as dataframe columns), parent_id, the session.id
    attribute, and Phoenix's own row id."""
    _map_keys(span.get("context"), ("trace_id", "span_id"), ids)
    _map_keys(span, ("context.trace_id", "context.span_id", "parent_id",
                     "attributes.session.id"), ids)
    attrs = span.get("attributes")
    _map_keys(attrs, ("session.id",), ids)
    if isinstance(attrs, dict):
        _map_keys(attrs.get("session"), ("id",), ids)
    if isinstance(span.get("id"), str):
        span["id"] = ids.phoenix_node_id(span["id"])
    return span


def rename_tracelab(row: dict, ids: Renamer) -> dict:
    """session_id, round_id, turn_id, trace_key (made of those) and every tool_call_id."""
    _map_keys(row, ("session_id", "round_id", "turn_id", "trace_key"), ids)
    for key in ("tools", "timing_events"):
        for item in row.get(key) or ():
            _map_keys(item, ("tool_call_id",), ids)
    return row


# ---- templates and copies -----------------------------------------------------------------
class Unit(NamedTuple):
    """One template: a document (langfuse, anyagent, jaeger: a trace) or lines (phoenix: the
    file, tracelab: a session) whose copies are written; ``spans``: what one copy loads as."""

    name: str
    text: str
    spans: int
    style: dict  # json.dumps options that give the source's layout


def _style(text: str, lines: bool) -> dict:
    """json.dumps options that reproduce the source's layout (indent, separators, escaping)."""
    if lines:
        first = text.lstrip().split("\n", 1)[0]
        return {"separators": (", ", ": ") if '": ' in first else (",", ":"),
                "ensure_ascii": text.isascii()}
    second = (text.strip().split("\n") + [""])[1]
    indent = len(second) - len(second.lstrip(" "))
    return {"indent": indent or None, "ensure_ascii": text.isascii()}


def _count(fmt: str, text: str, where: str) -> int:
    """The spans agentscope's importer reads from ``text``; raises BenchError on a problem or
    on a span twice (copies of it would be duplicates)."""
    from agentscope.formats import importers

    errors: list = []
    records = list(importers.by_name(fmt).read(text.encode(), where, errors))
    if errors:
        raise BenchError(f"{fmt}: the template {where} has problems: {errors[:3]}")
    unique = {(r.trace_id, r.span_id) for r in records}
    if len(unique) != len(records):
        raise BenchError(f"{fmt}: the template {where} holds a span twice")
    return len(records)


def templates(fmt: str) -> list:
    units = []
    if fmt == "langfuse":
        for path in sorted((CORPUS / "agent_traces/langfuse_framework_traces").glob(
                "*.trace.json")):
            text = path.read_text(encoding="utf-8")
            units.append(Unit(path.name[:-len(".trace.json")], text,
                              _count(fmt, text, path.name), _style(text, False)))
    elif fmt == "anyagent":
        for path in sorted((CORPUS / "agent_traces/any_agent").glob("*/*.json")):
            raw = path.read_text(encoding="utf-8")
            doc, seen, kept = json.loads(raw), set(), []
            for span in doc.get("spans") or ():  # a span the dump holds twice: once
                context = span.get("context") or {}
                key = (context.get("trace_id"), context.get("span_id"))
                if key not in seen:
                    seen.add(key)
                    kept.append(span)
            doc["spans"] = kept
            style = _style(raw, False)
            text = json.dumps(doc, **style)
            name = f"{path.parent.name}-{path.stem}"
            units.append(Unit(name, text, _count(fmt, text, str(path)), style))
    elif fmt == "jaeger":
        path = CORPUS / "agent_traces/jaeger_ui_genai/genaiTestTrace.json"
        raw = path.read_text(encoding="utf-8")
        doc, style = json.loads(raw), _style(raw, False)
        traces = doc["data"] if isinstance(doc, dict) and "data" in doc else (
            doc if isinstance(doc, list) else [doc])
        for i, trace in enumerate(traces):
            text = json.dumps(trace, **style)
            units.append(Unit(f"{path.stem}-{i}", text, _count(fmt, text, path.name), style))
    elif fmt == "phoenix":
        path = REPO / "tests/data/importers/phoenix_spans.jsonl"
        text = path.read_text(encoding="utf-8")
        units.append(Unit(path.stem, text, _count(fmt, text, path.name), _style(text, True)))
    elif fmt == "tracelab":
        path = CORPUS / "tracelab/round_trace.jsonl"
        raw = path.read_text(encoding="utf-8")
        sessions: dict = {}
        for line in raw.splitlines():
            if line.strip():
                sessions.setdefault(json.loads(line)["session_id"], []).append(line)
        for i, lines in enumerate(sessions.values()):
            text = "\n".join(lines) + "\n"
            units.append(Unit(f"session-{i}", text, _count(fmt, text, path.name),
                              _style(raw, True)))
    else:
        raise ValueError(fmt)
    return units


def _copies(units: list, target: int, ids: Renamer, rename: Callable, lines: bool):
    """(unit, the copy's document or its list of line objects) until ``target`` spans."""
    spans, k = 0, 0
    while spans < target:
        unit = units[k % len(units)]
        k += 1
        ids.next_copy()
        if lines:
            copy = [rename(json.loads(ln), ids) for ln in unit.text.splitlines() if ln.strip()]
        else:
            copy = rename(json.loads(unit.text), ids)
        spans += unit.spans
        yield unit, copy


def scale(fmt: str, out: Path, target: int, ids: Renamer) -> tuple:
    """Write copies of ``fmt``'s templates into ``out`` in the layout users have, until about
    ``target`` spans; (files, spans)."""
    out.mkdir(parents=True)
    units = templates(fmt)
    files = spans = 0
    if fmt in ("langfuse", "anyagent"):  # one trace per file
        suffix = ".trace.json" if fmt == "langfuse" else ".json"
        rename = rename_langfuse if fmt == "langfuse" else rename_anyagent
        for unit, doc in _copies(units, target, ids, rename, False):
            files += 1
            spans += unit.spans
            (out / f"{unit.name}-{files:06d}{suffix}").write_text(
                json.dumps(doc, **unit.style) + "\n", encoding="utf-8")
    elif fmt == "jaeger":  # the query service's answer: many traces under "data"
        batch: list = []

        def flush() -> None:
            nonlocal files
            files += 1
            doc = {"data": batch, "total": len(batch), "limit": 0, "offset": 0, "errors": None}
            (out / f"jaeger-traces-{files:05d}.json").write_text(
                json.dumps(doc, **units[0].style) + "\n", encoding="utf-8")
            batch.clear()

        for unit, trace in _copies(units, target, ids, rename_jaeger, False):
            batch.append(trace)
            spans += unit.spans
            if len(batch) == JAEGER_TRACES_PER_FILE:
                flush()
        if batch:
            flush()
    elif fmt in ("phoenix", "tracelab"):  # JSON lines, whole units per file
        rename = rename_phoenix if fmt == "phoenix" else rename_tracelab
        stem = "phoenix-export" if fmt == "phoenix" else "round-trace"
        chunks: list = []  # the current file's text
        in_file = 0
        for unit, rows in _copies(units, target, ids, rename, True):
            chunks.append("".join(json.dumps(row, **unit.style) + "\n" for row in rows))
            in_file += unit.spans
            spans += unit.spans
            if in_file >= LINES_SPANS_PER_FILE or spans >= target:
                files += 1
                (out / f"{stem}-{files:03d}.jsonl").write_text("".join(chunks), encoding="utf-8")
                chunks, in_file = [], 0
        if chunks:  # not reached: the last copy takes spans to the target
            files += 1
            (out / f"{stem}-{files:03d}.jsonl").write_text("".join(chunks), encoding="utf-8")
    else:
        raise ValueError(fmt)
    return files, spans


# ---- baselines and checks -------------------------------------------------------------------
def checked(directory: Path, fmt: str, spans: int):
    """``analyze(directory, db=":memory:")``, after checking that every file below it is read
    as ``fmt``; raises BenchError unless it loads exactly ``spans`` spans, with no problem and
    no duplicate."""
    import agentscope
    from agentscope.store.duckdb_store import Store

    found, skipped = Store.sources(directory)
    formats = {s.format for s in found}
    if skipped or formats != {fmt}:
        raise BenchError(f"{fmt}: {directory} is read as {sorted(formats)}, skipped: "
                         f"{[(s.rel, s.reason) for s in skipped[:3]]}")
    a = agentscope.analyze(directory, db=":memory:")
    got = (len(a.problems), a.load.duplicates, a.load.spans_added, a.summary.spans)
    if got != (0, 0, spans, spans):
        first = "; ".join(str(p) for p in a.problems[:3])
        a.close()
        raise BenchError(f"{fmt}: the scaled load of {directory} reported {got[0]} problems, "
                         f"{got[1]} duplicates, {got[2]} spans added, {got[3]} spans analysed "
                         f"(expected {spans}, no problems, no duplicates){': ' if first else ''}"
                         f"{first}")
    return a


def strip_analysis(line: str) -> tuple:
    """(the request without the exporter's agentscope.analysis.* span attributes, spans)."""
    from agentscope.exporters.otlp_traces import PREFIX

    request, n = json.loads(line), 0
    for rs in request.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                n += 1
                attrs = [kv for kv in span.get("attributes", ()) if not kv["key"].startswith(
                    PREFIX)]
                if attrs:
                    span["attributes"] = attrs
                else:
                    span.pop("attributes", None)
    return request, n


def write_baseline(analysis: Any, out: Path, scratch: Path) -> tuple:
    """The spans of ``analysis`` as OTLP/JSON lines in ``out``/traces.otlp.jsonl (agentscope's
    exporter, its analysis attributes removed); (lines, spans)."""
    from agentscope.exporters import otlp_traces

    out.mkdir(parents=True)
    otlp_traces.write(str(scratch), analysis)
    lines = spans = 0
    with open(scratch, encoding="utf-8") as src, open(out / "traces.otlp.jsonl", "w",
                                                      encoding="utf-8") as dst:
        for line in src:
            if line.strip():
                request, n = strip_analysis(line)
                dst.write(json.dumps(request, separators=(",", ":"), allow_nan=False) + "\n")
                lines, spans = lines + 1, spans + n
    scratch.unlink()
    return lines, spans


def write_protobuf(otlp_lines: Path, out: Path) -> tuple:
    """Each OTLP/JSON request of ``otlp_lines`` as one ExportTraceServiceRequest file;
    (files, spans)."""
    from agentscope.exporters import otlp_traces

    out.mkdir(parents=True)
    files = spans = 0
    with open(otlp_lines, encoding="utf-8") as src:
        for line in src:
            if line.strip():
                request, n = strip_analysis(line)
                files, spans = files + 1, spans + n
                (out / f"traces-{files:05d}.binpb").write_bytes(otlp_traces.protobuf(request))
    return files, spans


def _disk(directory: Path) -> tuple:
    sizes = [p.stat().st_size for p in directory.rglob("*") if p.is_file()]
    return len(sizes), sum(sizes)


def prepare(work: Path, formats: list, target: int) -> dict:
    """Write each format's scaled set and its baseline under ``work``, checked; the manifest."""
    ids = Renamer()
    sets: dict = {}
    build = [f for f in FORMATS if f in formats or (f == "anyagent" and
                                                     "otlp-protobuf" in formats)]
    for fmt in build:
        t0 = time.perf_counter()
        data, otlp = work / fmt / "data", work / fmt / "otlp"
        if fmt == "otlp-protobuf":  # the any-agent spans, from their OTLP/JSON lines
            _, spans = write_protobuf(Path(sets["anyagent"]["baseline"]["dir"]) /
                                      "traces.otlp.jsonl", data)
        else:
            _, spans = scale(fmt, data, target, ids)
        analysis = checked(data, fmt, spans)
        try:
            _, n = write_baseline(analysis, otlp, work / fmt / "export.tmp")
        finally:
            analysis.close()
        if n != spans:
            raise BenchError(f"{fmt}: the exporter wrote {n} spans of {spans}")
        checked(otlp, BASELINE_FORMAT, spans).close()
        (files, size), (bfiles, bsize) = _disk(data), _disk(otlp)
        sets[fmt] = {"dir": str(data), "files": files, "spans": spans, "bytes": size,
                     "baseline": {"dir": str(otlp), "files": bfiles, "spans": spans,
                                  "bytes": bsize}}
        print(f"prepared {fmt}: {files} files, {spans} spans, {size / 1e6:.1f} MB; OTLP/JSON "
              f"baseline {bsize / 1e6:.1f} MB; checked ({time.perf_counter() - t0:.1f} s)",
              flush=True)
    if "anyagent" not in formats and "anyagent" in sets:  # built only for the protobuf set
        shutil.rmtree(work / "anyagent", ignore_errors=True)
        del sets["anyagent"]
    return {"formats": [f for f in FORMATS if f in formats], "sets": sets}


# ---- measurement ----------------------------------------------------------------------------
def cli_command() -> list:
    """``agentscope`` as a user runs it: the console script beside this interpreter."""
    for exe in (Path(sys.executable).parent / "agentscope", shutil.which("agentscope")):
        if exe and Path(exe).exists():
            return [str(exe)]
    return [sys.executable, "-c", "import sys; from agentscope.cli import main; sys.exit(main())"]


def run_cli(cmd: list, directory: str, db: Path) -> float:
    """Wall seconds of ``agentscope analyze DIR --format json --db DB`` into a fresh store."""
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd + ["analyze", directory, "--format", "json", "--db", str(db)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise BenchError(f"`agentscope analyze {directory}` exited {proc.returncode}: "
                         f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return wall


def run_load(directory: str, spans: int) -> float:
    """Seconds of ``Store.load`` of ``directory`` into a fresh in-memory store."""
    from agentscope.store.duckdb_store import Store

    store = Store(None)
    try:
        t0 = time.perf_counter()
        report = store.load(directory)
        seconds = time.perf_counter() - t0
    finally:
        store.close()
    if report.problems or report.duplicates or report.spans_added != spans:
        raise BenchError(f"Store.load({directory}): {report.spans_added} spans of {spans}, "
                         f"{report.duplicates} duplicates, problems: {report.problems[:3]}")
    return seconds


def measure(manifest: dict, repeat: int, work: Path) -> dict:
    """{(format, 'format'|'baseline'): {'cli': [s...], 'load': [s...]}}, interleaved."""
    from agentscope.store.duckdb_store import Store

    cmd, db = cli_command(), work / "cli-store.duckdb"
    sets = manifest["sets"]
    runs = {(f, kind): {"cli": [], "load": []} for f in manifest["formats"]
            for kind in ("format", "baseline")}

    def where(fmt: str, kind: str) -> dict:
        return sets[fmt] if kind == "format" else sets[fmt]["baseline"]

    # not timed: the CLI's first start (its files into the page cache), and this process'
    # imports of every reader (a first file of each set)
    first = next(iter(sorted(Path(sets[manifest["formats"][0]]["dir"]).iterdir())))
    run_cli(cmd, str(first), db)
    for fmt in manifest["formats"]:
        for kind in ("format", "baseline"):
            store = Store(None)
            store.load(next(iter(sorted(Path(where(fmt, kind)["dir"]).iterdir()))))
            store.close()
    for r in range(repeat):
        for fmt in manifest["formats"]:
            pair = ("format", "baseline") if r % 2 == 0 else ("baseline", "format")
            for kind in pair:
                runs[fmt, kind]["cli"].append(run_cli(cmd, where(fmt, kind)["dir"], db))
            for kind in pair:
                runs[fmt, kind]["load"].append(run_load(where(fmt, kind)["dir"],
                                                        where(fmt, kind)["spans"]))
        print(f"round {r + 1}/{repeat} done", flush=True)
    return runs


# ---- report ---------------------------------------------------------------------------------
def _versions() -> str:
    out = [f"Python {platform.python_version()}"]
    for label, module in (("DuckDB", "duckdb"), ("pyarrow", "pyarrow"),
                          ("protobuf", "google.protobuf")):
        try:
            out.append(f"{label} {__import__(module, fromlist=['_']).__version__}")
        except ImportError:
            out.append(f"{label} not installed")
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out.append(f"{os.cpu_count()} CPUs ({usable} usable)")
    out.append(platform.machine())
    return ", ".join(out)


def rows(manifest: dict, runs: dict) -> list:
    """One row per format and per baseline: the figures of the table."""
    out = []
    for fmt in manifest["formats"]:
        base = runs[fmt, "baseline"]
        for kind in ("format", "baseline"):
            where = manifest["sets"][fmt] if kind == "format" else manifest["sets"][fmt][
                "baseline"]
            n, cli, load = where["spans"], runs[fmt, kind]["cli"], runs[fmt, kind]["load"]
            out.append({
                "name": fmt if kind == "format" else "  OTLP/JSON baseline",
                "files": where["files"], "spans": n, "mb": where["bytes"] / 1e6,
                "cli": (statistics.median(cli), min(cli), max(cli)),
                "cli_rate": n / statistics.median(cli),
                "cli_ratio": statistics.median(base["cli"]) / statistics.median(cli),
                "load_rate": (n / statistics.median(load), n / max(load), n / min(load)),
                "load_ratio": statistics.median(base["load"]) / statistics.median(load)})
    return out


def print_table(table: list) -> None:
    print(f"{'format':<22}{'files':>7}{'spans':>8}{'MB':>8}{'CLI wall s (min-max)':>25}"
          f"{'CLI spans/s':>13}{'vs base':>9}{'load spans/s (min-max)':>33}{'vs base':>9}")
    for r in table:
        med, lo, hi = r["cli"]
        rate, rlo, rhi = r["load_rate"]
        print(f"{r['name']:<22}{r['files']:>7}{r['spans']:>8}{r['mb']:>8.1f}"
              f"{f'{med:.2f} ({lo:.2f}-{hi:.2f})':>25}{r['cli_rate']:>13,.0f}"
              f"{r['cli_ratio']:>8.2f}x{f'{rate:,.0f} ({rlo:,.0f}-{rhi:,.0f})':>33}"
              f"{r['load_ratio']:>8.2f}x")


def print_markdown(table: list) -> None:
    print("| format | files | spans | MB on disk | `agentscope analyze` wall s, median "
          "(min–max) | CLI spans/s | vs OTLP/JSON | `Store.load` spans/s, median (min–max) "
          "| vs OTLP/JSON |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in table:
        med, lo, hi = r["cli"]
        rate, rlo, rhi = r["load_rate"]
        name = r["name"].strip() if r["name"].startswith(" ") else f"**{r['name']}**"
        print(f"| {name} | {r['files']:,} | {r['spans']:,} | {r['mb']:.1f} | {med:.2f} "
              f"({lo:.2f}–{hi:.2f}) | {r['cli_rate']:,.0f} | {r['cli_ratio']:.2f}x | "
              f"{rate:,.0f} ({rlo:,.0f}–{rhi:,.0f}) | {r['load_ratio']:.2f}x |")


# ---- main -----------------------------------------------------------------------------------
def _formats(only: str | None) -> list:
    if not only:
        return list(FORMATS)
    asked = [f.strip() for f in only.split(",") if f.strip()]
    unknown = [f for f in asked if f not in FORMATS]
    if unknown or not asked:
        raise SystemExit(f"--only: unknown format(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(FORMATS)}")
    return [f for f in FORMATS if f in asked]


def main() -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--spans", type=int, default=50_000,
                    help="spans per format, about (whole traces are copied)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds (medians)")
    ap.add_argument("--only", metavar="FORMAT[,FORMAT]",
                    help=f"measure these formats only ({', '.join(FORMATS)})")
    ap.add_argument("--keep", action="store_true", help="keep the scaled sets (path printed)")
    ap.add_argument("--prepare-into", help=argparse.SUPPRESS)  # the child that writes the sets
    args = ap.parse_args()
    formats = _formats(args.only)
    if args.spans < 1 or args.repeat < 1:
        ap.error("--spans and --repeat must be at least 1")
    if args.prepare_into:
        try:
            manifest = prepare(Path(args.prepare_into), formats, args.spans)
        except BenchError as e:
            print(f"import_throughput: {e}", file=sys.stderr)
            return 2
        (Path(args.prepare_into) / "manifest.json").write_text(json.dumps(manifest))
        return 0

    work = Path(tempfile.mkdtemp(prefix="agentscope-import-bench-"))
    try:
        return run(args, formats, work)
    except BenchError as e:
        print(f"import_throughput: {e}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            print(f"kept the scaled sets in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, formats: list, work: Path) -> int:
    t0 = time.perf_counter()
    child = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--prepare-into",
                            str(work), "--spans", str(args.spans), "--only", ",".join(formats)],
                           check=False)
    if child.returncode != 0:
        return child.returncode
    manifest = json.loads((work / "manifest.json").read_text())
    print(f"prepared in {time.perf_counter() - t0:.1f} s; measuring", flush=True)
    runs = measure(manifest, args.repeat, work)
    table = rows(manifest, runs)
    print(f"\nimport throughput: about {args.spans} spans per format, {args.repeat} interleaved "
          f"rounds (median, min-max); {_versions()}")
    print("CLI = `agentscope analyze DIR --format json --db <fresh file>`, a subprocess, wall "
          "time to exit; load = Store.load into a fresh in-memory store, in process; "
          "vs base = spans/s over the same spans as OTLP/JSON lines\n")
    print_table(table)
    print("\nMarkdown (for benchmarks/RESULTS.md):\n")
    print_markdown(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
