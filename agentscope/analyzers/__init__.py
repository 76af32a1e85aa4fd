"""Analyzers: from the store's spans (and counters) to each task's verdict, with evidence.

* :mod:`.critical_path`: which span held each task up at every instant (Jaeger's walk, for
  a fleet of traces at once);
* :mod:`.evidence`: each span's class shares from what was measured on it (the rules);
* :mod:`.counters`: host, GPU and model-server counters over each critical-path section,
  and how they change a section's classes (the rules);
* :mod:`.verdict`: a task's shares, bottleneck, confidence and evidence sentences, and the
  fleet's figures (the rules);
* :mod:`.engine`: the fleet engine that applies them to a million spans with numpy;
* :mod:`.results`: what it returns (``Fleet``: tasks, sections, summary);
* :mod:`.reference`: the same rules organised the plain way, one trace at a time, that the
  tests check the engine against.

They read what the store gives and return data; they never print and never run SQL. The
front door that loads, analyses and saves is :mod:`agentscope.analysis`.
"""
