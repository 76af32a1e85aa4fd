"""Exporters: present an :class:`~agentscope.analysis.Analysis`, never compute one.

* :mod:`.table`: the terminal (rich) and Markdown views; :mod:`.views`: what they share with
  the HTML report (typical tasks, a critical path as rows and bars);
* :mod:`.html_report`: the self-contained HTML report (``agentscope report``);
* :mod:`.prometheus`: the analysis and the latest counters as Prometheus metrics
  (``agentscope serve``, ``analyze --push-gateway``); :mod:`.otlp_metrics`: the same over
  OTLP/HTTP; :mod:`.grafana`: dashboards over them;
* :mod:`.otlp_traces`: every stored span as OTLP traces, with the verdicts as
  ``agentscope.analysis.*`` attributes (``agentscope export otlp``).

They read the analysis (and, through its methods, the spans and counters of its store); they
never hold a store connection. The JSON report is the analysis' own
(:meth:`Analysis.to_json`). The span *file writer* is part of capture
(:mod:`agentscope.capture.writer`).
"""
