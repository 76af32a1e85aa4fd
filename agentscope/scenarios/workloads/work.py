"""The CPU work the scenarios' steps share: pure-Python busy work and context assembly."""

from __future__ import annotations

import time


def burn_python(seconds: float) -> int:
    """Pure-Python work for about ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(2000):
            x = (x * 31 + i) % 1000003
    return x


def assemble_context(seed: int, functions: int = 300) -> str:
    """Context assembly as agents do it: parse a code base, score its chunks against the
    question (term frequencies, pure Python), keep the best that fit a budget."""
    import ast
    import io
    import tokenize

    src = "\n".join(
        f"def handler_{seed}_{i}(request, cache=None):\n"
        f"    key = request.get('k{i % 17}') or 'default_{i}'\n"
        f"    if cache and key in cache:\n        return cache[key] * {i % 7 + 1}\n"
        f"    total = sum(x * {i % 5 + 1} for x in range({i % 50 + 10}))\n"
        f"    return {{'key': key, 'total': total, 'ok': total % {i % 3 + 2} == 0}}\n"
        for i in range(functions))
    tree = ast.parse(src)
    lines = src.splitlines()
    chunks = ["\n".join(lines[node.lineno - 1:node.end_lineno or node.lineno])
              for node in tree.body]
    words = [tok.string for tok in tokenize.generate_tokens(io.StringIO(src).readline)
             if tok.type == tokenize.NAME]
    df: dict = {}
    for w in words:
        df[w] = df.get(w, 0) + 1
    query = ["cache", "total", "request", f"handler_{seed}_{seed % functions}"]
    scored = []
    for chunk in chunks:
        toks = chunk.replace("(", " ").replace(")", " ").replace(":", " ").split()
        tf: dict = {}
        for t in toks:
            tf[t] = tf.get(t, 0) + 1
        scored.append((sum(tf.get(q, 0) / df.get(q, 1) for q in query), chunk))
    scored.sort(key=lambda s: -s[0])
    prompt, budget = [], 6000
    for _, chunk in scored:
        if len(chunk) > budget:
            break
        prompt.append(chunk)
        budget -= len(chunk)
    return "\n\n".join(prompt)
