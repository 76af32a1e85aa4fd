"""The house (STYLE.md, "the house, after the front door"): a module imports only from floors
below its own, so that data flows through the layers once. Read from the source, every import
(those inside functions too)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "agentscope"

# room -> floor
FLOORS = {
    "semconv": 1, "records": 1, "vocab": 1, "errors": 1, "_log": 1, "metric_names": 1, "_gc": 1,
    "_signals": 1, "_version": 1,
    "formats": 2, "urls": 2,
    "capture": 3, "collectors": 3, "store": 3,
    "analyzers": 4,
    "analysis": 5,
    "exporters": 6, "scenarios": 6,
    "cli": 7,
}
ALLOWED_SIDEWAYS = {("capture", "collectors")}  # the agent may start a sampler in-process
# third-party modules a room must not import: only the store holds a DuckDB connection
FORBIDDEN = {"analyzers": {"duckdb"}, "exporters": {"duckdb"}, "scenarios": {"duckdb"},
             "cli": {"duckdb"}, "capture": {"duckdb", "pandas", "numpy"}}


def _imports():
    """(importing module, its room, imported module) for every import in the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts)
        if path.name == "__init__.py":
            module = module[: -len(".__init__")]
            package = module
        else:
            package = module.rsplit(".", 1)[0]
        parts = module.split(".")
        room = parts[1] if len(parts) > 1 else None
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield module, room, alias.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if node.module:
                    yield module, room, target
                else:  # from . import x: x is a module (or an attribute) of the package
                    for alias in node.names:
                        yield module, room, f"{target}.{alias.name}"


def test_every_module_is_on_a_floor():
    rooms = {room for _, room, _ in _imports() if room}
    assert rooms <= set(FLOORS), rooms - set(FLOORS)


def test_modules_import_only_from_floors_below():
    wrong = []
    for module, room, target in _imports():
        if room is None or not target.startswith("agentscope."):
            continue
        other = target.split(".")[1]
        if other == room:
            continue
        if FLOORS[other] >= FLOORS[room] and (room, other) not in ALLOWED_SIDEWAYS:
            wrong.append(f"{module} (floor {FLOORS[room]}) imports {target} "
                         f"(floor {FLOORS[other]})")
    assert not wrong, "\n".join(wrong)


def test_the_cli_goes_through_the_front_door():
    """The CLI parses, calls the library (the front door, exporters, collectors, scenarios)
    and prints: it never reaches into the store or the analyzers."""
    reached = {target.split(".")[1] for module, room, target in _imports()
               if room == "cli" and target.startswith("agentscope.")}
    assert not reached & {"store", "analyzers", "capture"}, reached


def test_only_the_store_holds_a_database():
    wrong = [f"{module} imports {target}" for module, room, target in _imports()
             if target.split(".")[0] in FORBIDDEN.get(room, ())]
    assert not wrong, wrong


def test_the_agent_does_not_import_the_analysis():
    """``import agentscope`` (what an instrumented agent does) loads neither DuckDB nor
    pandas; ``agentscope.analyze`` is imported on first use."""
    code = ("import sys, agentscope\n"
            "heavy = {'duckdb', 'pandas', 'agentscope.analysis', 'agentscope.store'}\n"
            "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
            "assert callable(agentscope.analyze) and 'duckdb' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_analysis_does_not_import_the_capture(tmp_path):
    """``agentscope analyze`` (the command line, and the analysis it calls) loads neither the
    capture layer nor OpenTelemetry nor asyncio: a tenth of a second of every command's start.
    ``agentscope.init`` is still there, imported on first use."""
    code = ("import sys\n"
            "from agentscope.cli import main\n"
            "sys.argv = ['agentscope', 'analyze', sys.argv[1], '--db', 'a.duckdb', '-q']\n"
            "try:\n"
            "    main()\n"
            "except SystemExit:\n"
            "    pass\n"
            "heavy = {'agentscope.capture', 'opentelemetry', 'asyncio', 'http.server',\n"
            "         'agentscope.collectors.receiver'}\n"
            "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
            "import agentscope\n"
            "assert callable(agentscope.init) and 'agentscope.capture' in sys.modules\n"
            "from agentscope import task, stage\n")
    subprocess.run([sys.executable, "-c", code, str(PACKAGE.parent / "sample_traces")], check=True,
                   timeout=120, cwd=tmp_path, stdout=subprocess.DEVNULL)
