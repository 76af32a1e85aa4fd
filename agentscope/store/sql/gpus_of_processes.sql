-- Which GPUs each process holds memory on, from NVML's per-process GPU memory samples
-- ($metric): (host, pid, device).
SELECT DISTINCT host, pid, device
FROM samples
WHERE metric = $metric AND pid IS NOT NULL AND device IS NOT NULL AND host IS NOT NULL
