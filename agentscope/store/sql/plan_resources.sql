-- What the capacity plan reads of the samples over the analysed tasks' time (needs the
-- analysis tables): the memory of each host (the most system.memory.limit it reported), and
-- the energy each device's cumulative counter (joules) rose by meanwhile (hw.gpu.energy from
-- NVML, hw.cpu.energy from RAPL; a device needs two readings in the window).
WITH w AS (SELECT min(start_ns) AS a, max(start_ns + duration_ns) AS b FROM task_results)
SELECT 'memory' AS what, s.host, NULL AS device, max(s.value) AS value
FROM samples s
WHERE s.metric = $memory_limit AND s.host IS NOT NULL
GROUP BY ALL
UNION ALL
SELECT CASE WHEN s.metric = $gpu_energy THEN 'gpu_energy' ELSE 'cpu_energy' END AS what,
       s.host, s.device, max(s.value) - min(s.value) AS value
FROM samples s, w
WHERE s.metric IN ($gpu_energy, $cpu_energy) AND s.ts_ns BETWEEN w.a AND w.b
  AND NOT isnan(s.value)
GROUP BY ALL
HAVING count(*) >= 2
ORDER BY what, host, device
