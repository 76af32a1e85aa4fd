"""The OTLP/JSON-lines span file exporter for an OpenTelemetry SDK ``TracerProvider``
(the Collector file exporter's format). It runs in the agent's process, so it is defined in
:mod:`agentscope.capture.otlp_file` (the agent's floor, which the scenarios may import);
it is named here too, beside the other OTLP exporters."""

from ..capture.otlp_file import OTLPJsonFileExporter, request_json

__all__ = ["OTLPJsonFileExporter", "request_json"]
