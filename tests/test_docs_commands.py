"""Every command of the README and of docs/recipes/, as written, from a fresh virtual
environment, in a working directory that contains the source tree (issue 17).

The source tree is copied (the files git tracks, and new ones it does not ignore) to a
temporary folder; a bash script made of the documents' ```bash blocks (and the README's
```python blocks, as scripts) runs there, in document order, with nothing of this test's
environment: no virtual environment, no PYTHONPATH. The README's first block makes the fresh
venv; everything after runs in it.

One change is made to what is written: the README's test command installs as written, then
only *collects* the suite (`--collect-only`): running the whole suite inside the suite would
recurse; CI runs that command verbatim (`.ci/run`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_COMMAND = "pip install -e '.[test,frameworks]' && python -m pytest -q"
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)


def blocks(doc: Path) -> list:
    """[(language, text)] of the ```bash and ```python blocks of ``doc``, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(doc.read_text())]


def recipes() -> list:
    return sorted(p for p in (REPO / "docs" / "recipes").glob("*.md") if p.name != "README.md")


def _source_tree(dest: Path) -> None:
    """A copy of the source tree as a clone would have it (plus files not yet committed)."""
    if (REPO / ".git").exists() and shutil.which("git"):
        names = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
            capture_output=True, check=True).stdout.decode().split("\0")
        for name in filter(None, names):
            src = REPO / name
            if src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:  # an unpacked source archive
        shutil.copytree(REPO, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".venv", "venv", ".agentscope", "traces", "__pycache__", "*.egg-info"))


OPENS = {"if": "fi", "for": "done", "while": "done", "until": "done", "case": "esac"}


def _checked(text: str) -> str:
    """``text`` with ``[ $? -eq 0 ] || exit 1`` after each complete top-level command: bash's
    ``set -e`` ignores a failure before ``&&`` (``pip install ... && pytest``)."""
    out, pending, depth, heredoc = [], "", 0, None
    for line in text.splitlines():
        out.append(line)
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            else:
                continue
        else:
            pending += line + "\n"
            m = re.search(r"<<-?\s*['\"]?(\w+)", line)
            if m:
                heredoc = m.group(1)
                continue
            try:
                words = shlex.split(pending, comments=True)
            except ValueError:  # an open quote: the command goes on
                continue
            if line.rstrip().endswith(("\\", "|", "&&", "||")):
                continue
            try:  # compound commands opened and closed on this line
                here = [w.rstrip(";") for w in shlex.split(line, comments=True)]
            except ValueError:
                here = words
            depth += sum(w in OPENS for w in here) - sum(w in OPENS.values() for w in here)
        if depth == 0 and pending.strip() and not pending.rstrip().endswith("&"):
            out.append("[ $? -eq 0 ] || { echo 'a command above failed' >&2; exit 1; }")
        if depth == 0:
            pending = ""
    return "\n".join(out) + "\n"


def _script(parts: list) -> str:
    lines = ["set -euo pipefail"]
    for i, (where, lang, text) in enumerate(parts):
        lines.append(f"echo '=== {where}, block {i}' >&2")
        if lang == "python":
            lines.append(f"python - <<'AGENTSCOPE_DOC_{i}'\n{text}AGENTSCOPE_DOC_{i}")
        else:
            if TEST_COMMAND in text:
                text = text.replace(TEST_COMMAND,
                                    TEST_COMMAND + " --collect-only -p no:cacheprovider")
            lines.append(_checked(text))
        if i == 0:  # the README's first block made and activated the venv: keep it active
            lines.append(". .venv/bin/activate")
    return "\n".join(lines) + "\n"


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "AGENTSCOPE_TRACE_DIR")
           and not k.startswith(("AGENTSCOPE_", "OTEL_", "PYTEST_"))}
    ours = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and p != ours)
    env["NO_COLOR"] = "1"
    return env


def test_the_docs_list_their_commands():
    readme = blocks(REPO / "README.md")
    assert readme[0][0] == "bash" and "python3 -m venv .venv" in readme[0][1]
    assert any(TEST_COMMAND in text for _, text in readme)
    assert recipes(), "docs/recipes/ has no recipe"
    for doc in recipes():
        assert any(lang == "bash" for lang, _ in blocks(doc)), f"{doc.name} runs nothing"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_every_command_of_the_readme_and_the_recipes_runs_as_written(tmp_path):
    work = tmp_path / "agentscope"
    work.mkdir()
    _source_tree(work)
    parts = [("README.md", lang, text) for lang, text in blocks(REPO / "README.md")]
    for doc in recipes():
        parts += [(f"docs/recipes/{doc.name}", lang, text) for lang, text in blocks(doc)
                  if lang == "bash"]
    script = tmp_path / "docs.sh"
    script.write_text(_script(parts))
    proc = subprocess.run(["bash", str(script)], cwd=work, env=_clean_env(),
                          capture_output=True, text=True, timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    # the fresh venv is the one that ran: agentscope installed from this copy
    site = subprocess.run([str(work / ".venv" / "bin" / "python"), "-I", "-c",
                           "import agentscope; print(agentscope.__file__)"],
                          capture_output=True, text=True, cwd=work / "docs")
    assert site.stdout.strip().startswith(str(work / "agentscope")), site
    # what the README shows is what it prints
    assert "50 tasks, 263 spans" in proc.stdout
    assert "Where the critical-path time went" in proc.stdout
    assert re.search(r"tests collected|\d+ tests? collected", log), log[-3000:]
    assert (work / "report.html").stat().st_size > 10_000


def test_a_failure_before_and_and_stops_the_script(tmp_path):
    """The check the docs test relies on: bash's set -e alone would go on after `false && x`."""
    script = tmp_path / "s.sh"
    script.write_text("set -euo pipefail\n" + _checked("false && echo no\necho went-on\n"))
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert proc.returncode == 1 and "went-on" not in proc.stdout
    script.write_text("set -euo pipefail\n" + _checked(
        "cat > x.txt <<'END'\nfalse && y\nEND\nfor i in 1 2; do\n  echo $i\ndone\necho 'a\nb'\n"))
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "1\n2\na\nb\n"
    assert (tmp_path / "x.txt").read_text() == "false && y\n"
