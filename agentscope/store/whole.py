"""Files read whole by their format's reader, loaded a batch at a time.

Another tool's export is often one small file per trace (a Langfuse or any-agent export: 7,000
files for 50k spans): inserted one by one, the statements per file cost more than reading it.
These files (foreign formats, OTLP documents, compressed files) are read by
:func:`~agentscope.store.readers.read_whole`, and their records inserted together, with their
bookkeeping in a few statements. A part of :class:`~agentscope.store.loading.Loader`.

A batch is one transaction. If the store refuses it (which the readers' checks should make
impossible), it is rolled back and its files are inserted one by one, each in its own
transaction, so that one file the store cannot take is named (quarantined) and the others
load.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable, Optional

from .readers import read_whole
from .rows import chunks, placeholders, stored

if TYPE_CHECKING:  # pragma: no cover
    from .loading import LoadReport

WHOLE_BATCH_RECORDS = 200_000  # records of files read whole, inserted together


class WholeFiles:
    """The batched path of the loader (it needs the loader's ``con``, ``_x``,
    ``_transaction``, ``_insert_spans``, ``_insert_samples``, ``_stage_span_rows``,
    ``_quarantine`` and ``_fingerprint``)."""

    def _load_read_whole(self, files: list, report: "LoadReport",
                         progress: Optional[Callable[[int], None]], span_file_ids: list) -> None:
        """Files read whole by their reader (foreign formats, OTLP documents, compressed files):
        their records inserted together, a batch of files at a time (a Langfuse or any-agent
        export is one small file per trace: one insert each would cost more than reading)."""
        batch: list = []  # (src, file_id, size, spans, samples, problems)
        held = 0
        for src, file_id, size in files:
            problems: list = []
            spans, samples = read_whole(src, problems)
            batch.append((src, file_id, size, spans, samples, problems))
            held += len(spans) + len(samples)
            if held >= WHOLE_BATCH_RECORDS:
                self._insert_batch(batch, report, progress, span_file_ids)
                batch, held = [], 0
        if batch:
            self._insert_batch(batch, report, progress, span_file_ids)

    def _insert_batch(self, batch: list, report: "LoadReport",
                      progress: Optional[Callable[[int], None]], span_file_ids: list) -> None:
        """A batch in one transaction; if the store refuses it, each file alone."""
        try:
            with self._transaction(report, span_file_ids):
                self._insert_read_whole(batch, report, span_file_ids)
        except Exception:  # noqa: BLE001 - retried file by file, each failure named
            for one in batch:
                try:
                    with self._transaction(report, span_file_ids):
                        self._insert_read_whole([one], report, span_file_ids)
                except Exception as e:  # noqa: BLE001 - that file is quarantined
                    src, fid, size = one[0], one[1], one[2]
                    self._quarantine(report, src, fid, size, e, span_file_ids)
        if progress:
            for one in batch:
                progress(one[2])

    def _insert_read_whole(self, batch: list, report: "LoadReport",
                           span_file_ids: list) -> None:
        from .loading import span_rows

        rows: list = []
        # each try adds its own problems (a batch that failed is tried again file by file)
        problems_of = {fid: list(problems) for _, fid, _, _, _, problems in batch}
        for src, fid, _, spans, _, _ in batch:
            rows.extend(span_rows(spans, fid, str(src.path), problems_of[fid]))
        kept = Counter(row[-1] for row in rows)  # rows per file (a refused record is none)
        added_by_file: dict = {}
        if rows:
            self._stage_span_rows(rows)
            try:
                # the first of repeated spans is kept: the earliest file's
                self._insert_spans("s.file_id", order="file_id")
                ids = sorted({fid for _, fid, _, spans, _, _ in batch if spans})
                added_by_file = dict(self._x(
                    "SELECT file_id, count(*) FROM spans WHERE file_id IN (SELECT unnest(?)) "
                    "GROUP BY ALL", [ids]))
            finally:
                self._x("DROP TABLE IF EXISTS staging")
        accounts = []
        for src, fid, size, spans, samples, _ in batch:
            added = added_by_file.get(fid, 0)
            problems = problems_of[fid]
            sampled = (self._insert_samples(samples, fid, str(src.path), problems)
                       if samples else 0)
            accounts.append((src, fid, added, sampled, kept.get(fid, 0) - added, size, 0,
                             problems))
        self._account_many(report, accounts, span_file_ids)

    def _account_many(self, report: "LoadReport", accounts: list, span_file_ids: list) -> None:
        """What the load of each file did, in the report and the store, in a few statements:
        ``accounts`` are (source, file_id, spans added, samples added, duplicates, bytes
        used, lines used, problems)."""
        problems = [stored(p) for a in accounts for p in a[7]]
        for src, fid, added, sampled, dups, _, _, _ in accounts:
            report.files_loaded += 1
            report.duplicates += dups
            report.spans_added += added
            report.samples_added += sampled
            if src.format != "samples":
                span_file_ids.append(fid)
        report.problems.extend(problems)
        # a torn last line is found again on every load until it is completed: keep one report
        self._x("DELETE FROM load_problems WHERE torn AND path IN (SELECT unnest(?))",
                [[stored_path(a[0]) for a in accounts]])
        rows = [(p.path, p.line, p.span_id, p.reason, p.torn) for p in problems]
        for chunk in chunks(rows):
            self._x(f"INSERT INTO load_problems VALUES {placeholders(chunk)}",
                    [v for row in chunk for v in row])
        done = [(fid, used, lines, added + sampled, len(probs),
                 *self._fingerprint(src, fid, used))
                for src, fid, added, sampled, _, used, lines, probs in accounts]
        for chunk in chunks(done):
            self._x("UPDATE loaded_files SET loaded_bytes = a.used, loaded_lines = a.lines, "
                    "records = records + a.added, problems = loaded_files.problems + a.problems, "
                    "size = a.size, mtime_ns = a.mtime_ns, tail_hash = a.tail_hash, "
                    f"loaded_at = current_timestamp FROM (VALUES {placeholders(chunk)}) "
                    "AS a(file_id, used, lines, added, problems, size, mtime_ns, tail_hash) "
                    "WHERE loaded_files.file_id = a.file_id", [v for row in chunk for v in row])


def stored_path(src) -> str:
    """A source's path as the store keeps it (rows.db_text)."""
    from .rows import db_text

    return db_text(str(src.path))
