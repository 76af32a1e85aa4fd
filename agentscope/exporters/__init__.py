"""Exporters: present analysis results (terminal, Markdown, HTML, Prometheus, Grafana, OTLP).

Not built yet: see the reports and Grafana issues. (The span *file writer* is part of
capture: :mod:`agentscope.capture.writer`.)
"""
