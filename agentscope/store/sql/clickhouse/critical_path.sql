-- The critical path of every trace, in ClickHouse: the walk of analyzers/critical_path.py
-- (its module docstring says what the path is), with the same answer, written so that each
-- trace is one row of arrays (GROUP BY trace_id: shard-local on a table sharded by its trace
-- id) and no step is a loop over time.
--
-- Why no loop is needed. Walking back through a span P entered at time T (its end, cut where
-- the path left it), P's children are taken in the order "last finishing first" (ties: the
-- earlier start, then the earlier row). At each child x, the walk's time is
--     t_x = least(T, the least start of the children before x in that order),
-- because a child taken moves the time to its start and a child passed over started at or
-- after the time then. So x is on the path when P is and x ran before t_x (its end <= t_x or
-- its start < t_x); it is then entered at least(end_x, t_x), P holds [end_x, t_x] when end_x
-- is earlier, and P holds [its start, least(T, its children's least start)] at the end.
-- Entering x at least(T, a_x), a_x = least(end_x, pm_x), makes each entry time the least
-- a_y over x and its ancestors: with the children's order known, the whole walk is three
-- aggregates along each span's ancestors, which pointer doubling (log2 n rounds of
-- "my ancestor's ancestor") computes for every span of a trace at once:
--   1. clip: the greatest start and least end along the ancestors (each span cut to its
--      parent's interval), and whether the span reaches a root (a parent cycle does not);
--   2. entry: the least a_y along the ancestors (T), and whether every span on the way was
--      kept (not outside its parent, not a consumer of a producer);
--   3. on path: whether every span on the way was taken.
-- Several roots are the children of one virtual span V (the trace's first start to its last
-- end), whose own time is a gap (span_id NULL); a trace of one root has V with no time.
--
-- Rows: ids, times and kinds of the spans of the subquery filled in below (trace_id, span_id,
-- parent_span_id, kind, start_ns, end_ns, and host and pid, which each section's span gives
-- section_owners for the counter join); a span id seen twice in a trace is kept once (the
-- earliest start, then end, parent and kind). In each trace's arrays (1-based, as ClickHouse
-- counts), span i is the i-th by (start, span_id), the store's row order; V is n + 1.
-- A span whose parent is not in the trace (an orphan) is adopted by the innermost true root
-- that encloses it (latest start, then earliest end, then row), as store/sql/analysis_input.sql
-- does; otherwise it is a root itself. Filled by str.format: spans.
WITH
trace_rows AS (
    SELECT trace_id, length(rows) - length(firsts) AS duplicates,
        -- (start, span_id, end no earlier than start, parent id, kind, host, pid), in row
        -- order
        arraySort(arrayMap(x -> (x.2, x.1, greatest(x.3, x.2), x.7, x.6, x.8, x.9),
                           firsts)) AS r
    FROM (
        SELECT trace_id,
            -- the trace's rows by span id, each id's first the one the store keeps
            arraySort(groupArray((span_id, start_ns, end_ns, isNull(parent_span_id),
                                  ifNull(parent_span_id, ''), kind, parent_span_id, host,
                                  pid))) AS rows,
            arrayMap(x -> x.1, rows) AS row_ids,
            arrayFilter((x, before) -> x.1 != before, rows,
                        arraySlice(arrayPushFront(row_ids, ''), 1, length(rows))) AS firsts
        FROM {spans}
        GROUP BY trace_id)
),
columns AS (
    SELECT trace_id, duplicates, length(r) AS n, n + 1 AS V,
        arrayMap(x -> x.2, r) AS ids, arrayMap(x -> x.1, r) AS st,
        arrayMap(x -> x.3, r) AS en, arrayMap(x -> x.4, r) AS parent_ids,
        arrayMap(x -> x.5 = 'producer', r) AS producer,
        arrayMap(x -> x.5 = 'consumer', r) AS consumer,
        arrayMap(x -> (x.6, x.7), r) AS owners,
        -- rows by id (the merge in sorted finds each parent among them)
        arraySort(i -> ids[i], range(1, n + 1)) AS by_id
    FROM trace_rows
),
sorted AS (
    SELECT *, arraySort(arrayConcat(
        arrayMap(i -> (ids[i], 0, i, 0), by_id),
        arrayMap((p, i) -> (ifNull(p, ''), 1, 0, i), parent_ids, range(1, n + 1)))) AS merged_ids
    FROM columns
),
found AS (
    SELECT *,
        -- each parent id looked up among the sorted ids by a merge, not a search per span
        -- (a lambda given a whole array copies it per element: n x n): the ids and the
        -- parent ids sorted together, each id's row carried forward onto the parent ids that
        -- follow it, and kept where the id is the parent id; then back in row order
        arrayMap(x -> x.1, arraySort(x -> x.2, arrayFilter(x -> x.3, arrayMap((f, x) -> (
                if(f.3 = 1 AND f.1 = x.1, f.2, 0), x.4, x.2 = 1),
            arrayFill(f -> f.3 = 1, arrayMap(x -> if(x.2 = 0, (x.1, x.3, 1), (x.1, 0, 0)),
                                             merged_ids)),
            merged_ids)))) AS found_at,
        arrayFilter(i -> parent_ids[i] IS NULL, range(1, n + 1)) AS true_roots
    FROM sorted
),
adopters AS (
    SELECT *,
        -- each orphan's innermost enclosing true root (0: none), looked for among the true
        -- roots (usually one; the store's join is as long), orphans only
        arrayMap(o -> arrayReduce('argMax',
                arrayMap(r -> r.3, arrayFilter(r -> r.1 <= o.1 AND r.2 >= o.2, true_spans)),
                arrayMap(r -> (r.1, -r.2, r.3), arrayFilter(r -> r.1 <= o.1 AND r.2 >= o.2,
                                                             true_spans))),
            arrayMap(i -> (st[i], en[i]), orphans)) AS adopted,
        -- ... and each span's (the k-th orphan's at its place)
        arrayMap((o, k) -> if(o, adopted[k], 0), is_orphan, arrayCumSum(is_orphan)) AS adopter
    FROM (SELECT *,
              arrayMap((p, f) -> p IS NOT NULL AND f = 0, parent_ids, found_at) AS is_orphan,
              arrayFilter((i, o) -> o, range(1, n + 1), is_orphan) AS orphans,
              arrayMap(i -> (st[i], en[i], i), true_roots) AS true_spans
          FROM found)
),
adopted AS (
    SELECT *,
        -- each span's parent row, V for a root (no parent, its own parent, or an orphan
        -- that no true root encloses)
        arrayPushBack(arrayMap(i -> multiIf(
            parent_ids[i] IS NULL OR found_at[i] = i, V,
            found_at[i] > 0, found_at[i],
            adopter[i] > 0, adopter[i], V), range(1, n + 1)), V) AS par
    FROM adopters
),
hull AS (
    SELECT *,
        arrayFilter(i -> par[i] = V, range(1, n + 1)) AS roots,
        arrayPushBack(st, arrayMin(arrayMap(i -> st[i], roots))) AS st1,
        arrayPushBack(en, arrayMax(arrayMap(i -> en[i], roots))) AS en1,
        toUInt32(ceil(log2(n + 1))) + 1 AS rounds
    FROM adopted
),
-- 1. each span clipped to its ancestors; which reach V
clip AS (
    SELECT *, doubled.2 AS cs, doubled.3 AS ce, arrayMap(j -> j = V, doubled.1) AS reach
    FROM (SELECT *, arrayFold((acc, k) -> (
                arrayMap(j -> acc.1[j], acc.1),
                arrayMap((s, j) -> greatest(s, acc.2[j]), acc.2, acc.1),
                arrayMap((e, j) -> least(e, acc.3[j]), acc.3, acc.1)),
            range(rounds), (par, st1, en1)) AS doubled
          FROM hull)
),
-- whether each span is kept under its (clipped) parent: a child that lies outside it, but
-- for an instant at its edge, and a consumer of a producer are left off
kept AS (
    SELECT *,
        arrayMap(i -> i = V OR (reach[i]
            AND NOT (producer[par[i]] AND consumer[i])
            AND NOT (st1[i] >= ce[par[i]] AND NOT (st1[i] = en1[i] AND st1[i] = ce[par[i]]))
            AND NOT (en1[i] <= cs[par[i]] AND NOT (st1[i] = en1[i] AND en1[i] = cs[par[i]]))),
            range(1, n + 2)) AS keep
    FROM clip
),
-- the children of each span in walking order: last finishing first, then the earlier
-- start, then the row (spans left off, and V, after all of them)
ordered AS (
    SELECT *, arraySort(i -> (NOT keep[i] OR i = V, par[i], -ce[i], cs[i], i),
                        range(1, n + 2)) AS L
    FROM kept
),
-- where each one's siblings begin in L (hj: its position where it begins a run)
runs AS (
    SELECT *, arrayFill(x -> x > 0, arrayMap(j -> if(j = 1 OR par[L[j]] != par[L[j - 1]]
                   OR keep[L[j]] != keep[L[j - 1]] OR L[j] = V OR L[j - 1] = V, j, 0),
               range(1, n + 2))) AS seg
    FROM ordered
),
-- the least start of the siblings up to each position (doubling within a run), and each
-- span's position in L
prefix AS (
    SELECT *,
        arrayFold((acc, k) -> arrayMap(j -> if(j - bitShiftLeft(1, k) >= seg[j],
                least(acc[j], acc[j - bitShiftLeft(1, k)]), acc[j]), range(1, n + 2)),
            range(rounds), arrayMap(j -> cs[L[j]], range(1, n + 2))) AS least_start,
        arraySort(j -> L[j], range(1, n + 2)) AS at
    FROM runs
),
-- pm: the least start of the siblings before each span (none: the largest Int64)
before AS (
    SELECT *, arrayMap(i -> if(at[i] > seg[at[i]], least_start[at[i] - 1],
                               toInt64(9223372036854775807)), range(1, n + 2)) AS pm
    FROM prefix
),
-- 2. each span's entry time T, and whether it and all its ancestors were kept
entry AS (
    SELECT *, doubled.2 AS T, arrayMap((x, r) -> x AND r, doubled.3, reach) AS alive
    FROM (SELECT *, arrayFold((acc, k) -> (
                arrayMap(j -> acc.1[j], acc.1),
                arrayMap((x, j) -> least(x, acc.2[j]), acc.2, acc.1),
                arrayMap((x, j) -> x AND acc.3[j], acc.3, acc.1)),
            range(rounds), (par, arrayMap(i -> if(i = V, en1[V], least(ce[i], pm[i])),
                                          range(1, n + 2)), keep)) AS doubled
          FROM before)
),
-- the time when the walk reached each span among its siblings, and whether it took it
taken AS (
    SELECT *, arrayMap(i -> i = V OR (alive[i] AND (ce[i] <= t[i] OR cs[i] < t[i])),
                       range(1, n + 2)) AS take
    FROM (SELECT *, arrayMap(i -> least(T[par[i]], pm[i]), range(1, n + 2)) AS t FROM entry)
),
-- 3. on the path: taken, and every ancestor taken
walked AS (
    SELECT *, arrayMap((x, r) -> x AND r, doubled.2, reach) AS on_path
    FROM (SELECT *, arrayFold((acc, k) -> (
                arrayMap(j -> acc.1[j], acc.1),
                arrayMap((x, j) -> x AND acc.2[j], acc.2, acc.1)),
            range(rounds), (par, take)) AS doubled
          FROM taken)
),
-- each span's children's least start: the last position of their run in L
runs_ends AS (
    SELECT *,
        arrayFilter(j -> keep[L[j]] AND L[j] != V AND (j = n + 1 OR seg[j + 1] != seg[j]),
                    range(1, n + 2)) AS ends
    FROM walked
),
-- each span's children's least start (none: the largest Int64), by a merge as found_at's
held AS (
    SELECT *,
        arrayMap(x -> x.1, arraySort(x -> x.2, arrayFilter(x -> x.3, arrayMap((f, x) -> (
                if(f.3 = 1 AND f.1 = x.1, f.2, toInt64(9223372036854775807)), x.4, x.2 = 1),
            arrayFill(f -> f.3 = 1, arrayMap(x -> if(x.2 = 0, (x.1, x.3, 1), (x.1, 0, 0)),
                                             merged_runs)),
            merged_runs)))) AS children_least
    FROM (SELECT *, arraySort(arrayConcat(
            arrayMap(j -> (par[L[j]], 0, least_start[j], 0), ends),
            arrayMap(i -> (i, 1, 0, i), range(1, n + 2)))) AS merged_runs
          FROM runs_ends)
),
-- the sections: a parent's time between a taken child's end and the time it was taken at,
-- and each span's time from its start to where its children began (or its entry)
sections AS (
    SELECT *, arraySort(x -> x.2, arrayConcat(
        arrayMap(i -> (par[i], ce[i], t[i]),
                 arrayFilter(i -> i != V AND on_path[i] AND ce[i] < t[i], range(1, n + 2))),
        arrayFilter(x -> x.3 > x.2, arrayMap(i -> (i, cs[i], least(T[i],
            children_least[i])),
            arrayFilter(i -> on_path[i], range(1, n + 2)))))) AS raw
    FROM held
),
-- adjacent sections of one span merged (a span holds the path again after a child that
-- held none of it, or between two of its own pieces): a section begins a merged one unless
-- it continues the one before; a merged one ends where its last piece does (carried back)
merged AS (
    SELECT *,
        arrayMap((x, b) -> NOT (x.1 = b.1 AND x.2 = b.3), raw,
                 arraySlice(arrayPushFront(raw, (0, 0, 0)), 1, length(raw))) AS begins,
        arrayReverseFill((x, last) -> last, arrayMap(x -> x.3, raw),
                         arraySlice(arrayPushBack(begins, true), 2, length(begins))) AS ends_at
    FROM sections
)
SELECT trace_id,
    arrayFilter((x, b) -> b, arrayMap((x, e) -> (if(x.1 = V, NULL, ids[x.1]), x.2, e),
                                      raw, ends_at), begins) AS sections,
    -- each section's span's host and pid (the counter join places it by them)
    arrayFilter((x, b) -> b, arrayMap(x -> if(x.1 = V, (NULL, NULL), owners[x.1]), raw),
                begins) AS section_owners,
    if(length(roots) > 0, st1[V], 0) AS path_start,
    if(length(roots) > 0, en1[V], 0) AS path_end,
    arrayMap(i -> ids[i], roots) AS root_ids,
    arrayCount(i -> NOT alive[i], range(1, n + 1)) AS off_path,
    duplicates
FROM merged
