"""Memory-bound scenarios: a working set paged back in from disk, a KV-cache offload to a disk
tier and its reload. Both need a file system whose pages can be dropped (not tmpfs)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from .ctx import Ctx
from .registry import Unavailable, scenario
from .work import assemble_context


def _evictable(path: Path, size: int) -> None:
    """Write ``path`` (``size`` bytes) to disk, so that its pages can be dropped from memory;
    raise Unavailable where they cannot (a file system in memory, e.g. tmpfs)."""
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 64 * mmap.PAGESIZE, prot=mmap.PROT_READ)
        try:
            m.madvise(mmap.MADV_RANDOM)
            _evict(m, fd)
            before = _major_faults()
            for off in range(0, 64 * mmap.PAGESIZE, mmap.PAGESIZE):
                m[off]
            if _major_faults() - before < 32:
                raise Unavailable(f"{path.parent} keeps file pages in memory after they are "
                                  "dropped (a file system in memory?): no page-in to measure")
        finally:
            m.close()
    finally:
        os.close(fd)


def _evict(m: mmap.mmap, fd: int) -> None:
    """Drop the pages of a clean file mapping from memory: unmap them here, then drop the
    whole file from the page cache (a range would leave the large folios it cuts through).
    The next touch of each page takes a major fault (a read from disk)."""
    m.madvise(mmap.MADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _major_faults() -> int:
    import resource

    return resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_majflt


@scenario("memory-pagein", "memory", "a working set (an embeddings index in a mapped file) "
          "pushed out of memory and paged back in: every page a major fault")
def memory_pagein(ctx: Ctx) -> None:
    size = 24 << 20

    def one(i: int) -> None:
        path = ctx.work / f"index-{i}.bin"
        _evictable(path, size)
        fd = os.open(path, os.O_RDONLY)
        m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        try:
            m.madvise(mmap.MADV_RANDOM)  # no read-ahead: the index is read at random
            _evict(m, fd)  # meanwhile, the rest of the host needed the memory
            with ctx.task("answer-from-index") as (_, ledger):
                with ctx.step(ledger, "cpu", "context", "embed-question"):
                    assemble_context(i, 20)
                # labelled context assembly, as the agent sees it; really waiting for its
                # working set to come back from disk
                with ctx.step(ledger, "memory", "context", "search-index"):
                    total = 0
                    for off in range(0, size, mmap.PAGESIZE):
                        total += m[off]
        finally:
            m.close()
            os.close(fd)
            path.unlink()

    ctx.together(one, ctx.tasks, ctx.load)


@scenario("memory-kv-offload", "memory", "a KV-cache style offload to a disk tier and reload "
          "(direct I/O) between two decode steps on the CPU")
def memory_kv_offload(ctx: Ctx) -> None:
    import numpy as np

    size = 96 << 20
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((768, 768)) / 28).astype(np.float32)
    probe = ctx.work / "probe.bin"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
    except OSError as e:
        raise Unavailable(f"{ctx.work} does not support direct I/O ({e.strerror}): no disk "
                          "tier to offload to") from e
    finally:
        probe.unlink(missing_ok=True)

    def decode(state: "np.ndarray", tokens: int) -> "np.ndarray":
        for _ in range(tokens):
            state = np.tanh(w @ state)
        return state

    def one(i: int) -> None:
        buf = mmap.mmap(-1, size)  # page-aligned: what direct I/O needs
        kv = np.frombuffer(buf, dtype=np.float32)
        kv[:] = 0.5  # the KV blocks of this sequence
        path = ctx.work / f"kv-{i}.bin"
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
        try:
            state = np.ones(768, dtype=np.float32)
            with ctx.task("long-context-chat") as (_, ledger):
                with ctx.step(ledger, "cpu", "inference", "decode", model="cpu-mlp-768"):
                    state = decode(state, 60)
                with ctx.step(ledger, "memory", "memory", "kv-offload", tier="disk"):
                    os.pwritev(fd, [buf], 0)
                    os.fsync(fd)
                with ctx.step(ledger, "memory", "memory", "kv-reload", tier="disk"):
                    os.preadv(fd, [buf], 0)
                with ctx.step(ledger, "cpu", "inference", "decode", model="cpu-mlp-768"):
                    decode(state, 60)
        finally:
            os.close(fd)
            path.unlink()
            del kv
            buf.close()

    ctx.together(one, ctx.tasks, ctx.load)
