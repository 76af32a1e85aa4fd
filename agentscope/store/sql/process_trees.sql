-- The process trees a sidecar sampled (`agentscope run`, `collect --pid`): one per sample
-- file, host and root, with the first and last time it was sampled, the processes seen in it
-- (the pids of its per-process samples, and the root), and its CPU series (cores, the whole
-- tree, children included), with its threads' waiting for a CPU at the same times, in time
-- order. Spans that are not ours join a tree through their
-- resource's process.pid and host.name (analyzers/process_share.py). The first query lists
-- the trees, the second their members, the third their CPU samples tree after tree.
SELECT file_id, host, pid AS root, min(ts_ns) AS first_ns, max(ts_ns) AS last_ns,
       count(*) AS n
FROM samples
WHERE metric = $tree_cpu AND pid IS NOT NULL AND host IS NOT NULL AND value IS NOT NULL
      AND NOT isnan(value)
GROUP BY ALL
ORDER BY file_id, host, root;

SELECT DISTINCT s.file_id, s.host, s.pid
FROM samples s
WHERE s.source = $source AND s.pid IS NOT NULL AND s.host IS NOT NULL
      AND s.file_id IN (SELECT file_id FROM samples WHERE metric = $tree_cpu)
ORDER BY ALL;

SELECT c.ts_ns, c.value,
       -- the tree's threads waiting for a CPU meanwhile (0 where not sampled with it)
       coalesce(max(w.value), 0) AS wait
FROM samples c
LEFT JOIN samples w ON w.metric = $tree_wait AND w.file_id = c.file_id
     AND w.host = c.host AND w.pid = c.pid AND w.ts_ns = c.ts_ns AND NOT isnan(w.value)
WHERE c.metric = $tree_cpu AND c.pid IS NOT NULL AND c.host IS NOT NULL AND c.value IS NOT NULL
      AND NOT isnan(c.value)
GROUP BY c.file_id, c.host, c.pid, c.ts_ns, c.value
ORDER BY c.file_id, c.host, c.pid, c.ts_ns;
