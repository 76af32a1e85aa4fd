"""Files read whole by their format's reader, loaded a batch at a time.

Another tool's export is often one small file per trace (a Langfuse or any-agent export: 7,000
files for 50k spans): inserted one by one, the statements per file cost more than reading it.
These files (foreign formats, OTLP documents, compressed files) are read by
:func:`~agentscope.store.readers.read_whole`, and their records inserted together, with their
bookkeeping in a few statements. A part of :class:`~agentscope.store.loading.Loader`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from .readers import read_whole
from .rows import chunks, placeholders, span_row

if TYPE_CHECKING:  # pragma: no cover
    from .loading import LoadReport

WHOLE_BATCH_RECORDS = 200_000  # records of files read whole, inserted together


class WholeFiles:
    """The batched path of the loader (it needs the loader's ``con``, ``_x``,
    ``_insert_spans`` and ``_insert_samples``)."""

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
                self._insert_read_whole(batch, report, progress, span_file_ids)
                batch, held = [], 0
        if batch:
            self._insert_read_whole(batch, report, progress, span_file_ids)

    def _insert_read_whole(self, batch: list, report: "LoadReport",
                           progress: Optional[Callable[[int], None]],
                           span_file_ids: list) -> None:
        rows = [span_row(r) + (fid,) for _, fid, _, spans, _, _ in batch for r in spans]
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
        for src, fid, size, spans, samples, problems in batch:
            added = added_by_file.get(fid, 0)
            sampled = self._insert_samples(samples, fid) if samples else 0
            accounts.append((src, fid, added, sampled, len(spans) - added, size, 0, problems))
            if progress:
                progress(size)
        self._account_many(report, accounts, span_file_ids)

    def _account_many(self, report: "LoadReport", accounts: list, span_file_ids: list) -> None:
        """What the load of each file did, in the report and the store, in a few statements:
        ``accounts`` are (source, file_id, spans added, samples added, duplicates, bytes
        used, lines used, problems)."""
        problems = [p for a in accounts for p in a[7]]
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
                [[str(a[0].path) for a in accounts]])
        rows = [(p.path, p.line, p.span_id, p.reason, p.torn) for p in problems]
        for chunk in chunks(rows):
            self._x(f"INSERT INTO load_problems VALUES {placeholders(chunk)}",
                    [v for row in chunk for v in row])
        done = [(fid, used, lines, added + sampled, len(probs))
                for _, fid, added, sampled, _, used, lines, probs in accounts]
        for chunk in chunks(done):
            self._x("UPDATE loaded_files SET loaded_bytes = a.used, loaded_lines = a.lines, "
                    "records = records + a.added, problems = loaded_files.problems + a.problems, "
                    f"loaded_at = current_timestamp FROM (VALUES {placeholders(chunk)}) "
                    "AS a(file_id, used, lines, added, problems) "
                    "WHERE loaded_files.file_id = a.file_id", [v for row in chunk for v in row])
