"""A live OTLP traces receiver: what OpenTelemetry exporters send, written as span files.

``agentscope receive --out DIR`` (docs/otlp.md) runs a :class:`Receiver`:

* OTLP/HTTP: ``POST /v1/traces`` with an ``ExportTraceServiceRequest`` as protobuf
  (``application/x-protobuf``) or JSON (``application/json``, camelCase or snake_case), plain
  or ``Content-Encoding: gzip``/``deflate``. Answers as the OTLP spec says: 200 with an
  ``ExportTraceServiceResponse`` in the request's encoding (``partial_success`` counts the
  spans that could not be taken, and says why), 400 with a ``google.rpc.Status`` for a body
  that does not decode, 413 for a body over ``max_body`` (before reading it, and after
  decompressing), 415 for another content type or encoding, 404 for another path, 405 for
  another method, 503 (retry later) when the spans could not be written or it is stopping;
* OTLP/gRPC (``grpc_port``, needs grpcio): ``TraceService/Export``, the same on raw bytes.

Crash safety: the spans of a request are appended as whole lines of one span file
(``spans-<host>-<pid>-<ms>[-<n>].jsonl``, a new part past ``max_file_bytes``), under one lock
so requests never interleave, flushed and ``fsync``'ed before the request is acknowledged. An
acknowledged span is on disk; a crash can leave at most one torn last line, which readers
skip. A failed write is cut back off the file, the file is left for the next part and the
client is told to retry (503 / UNAVAILABLE).
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from .._signals import handle, restore
from ..formats import spanfile
from ..formats.importers import otlp_proto
from ..formats.otlp_common import MAX_BODY, spans_of_request
from .durable import SpanFile

PROTOBUF, JSON = "application/x-protobuf", "application/json"
_MEDIA = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}
TRACES_PATH = "/v1/traces"
GRPC_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
# requests read and decoded at once (each can hold its body, the body decompressed and the
# decoded spans: up to a few times MAX_BODY); the next waits, its body unread in the socket,
# up to SLOT_WAIT_S, then is answered 503 (retry later)
MAX_IN_FLIGHT = 4
SLOT_WAIT_S = 10.0  # how long a request waits for a slot before it is answered 503
_INVALID_ARGUMENT, _RESOURCE_EXHAUSTED, _UNAVAILABLE = 3, 8, 14  # google.rpc.Code


class BadRequest(Exception):
    """A request that does not decode (HTTP 400, gRPC INVALID_ARGUMENT)."""


class Unavailable(Exception):
    """Spans that could not be written now: the client should retry (503, UNAVAILABLE)."""


class Result(NamedTuple):
    accepted: int
    rejected: int
    message: str  # why spans were rejected ("" if none was)


class Receiver:
    """OTLP/HTTP (and, with ``grpc_port``, OTLP/gRPC) traces into span files in ``out_dir``.

    ``port``/``grpc_port`` 0 choose a free port; after :meth:`start` the attributes hold the
    ports in use. Counters: ``requests``, ``spans_accepted``, ``spans_rejected``,
    ``bad_requests``, ``failed_writes``, ``bytes_received`` (bodies as sent, compressed).
    """

    def __init__(self, out_dir: "str | os.PathLike[str]", address: str = "127.0.0.1",
                 port: int = 4318, grpc_port: Optional[int] = None, max_body: int = MAX_BODY,
                 max_file_bytes: int = 256 << 20, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        if max_body < 1:
            raise ValueError("max_body must be at least 1 byte")
        if grpc_port is not None:
            try:
                import grpc  # noqa: F401
            except ImportError:
                raise ValueError("OTLP/gRPC needs the grpcio package: pip install grpcio") \
                    from None
        self.out_dir, self.address, self.port = Path(out_dir), address, port
        self.grpc_port, self.max_body = grpc_port, max_body
        self.file = SpanFile(self.out_dir, max_file_bytes)
        # HTTP requests read and decoded at once: bounds the memory bodies can hold
        self.max_in_flight, self.slot_wait_s = max_in_flight, SLOT_WAIT_S
        self.slots = threading.BoundedSemaphore(max_in_flight)
        self.requests = self.spans_accepted = self.spans_rejected = 0
        self.bad_requests = self.failed_writes = self.bytes_received = 0
        self._count_lock = threading.Lock()
        self._busy = threading.Condition()
        self._in_flight = 0
        self._closing = False
        self._http: Optional[ThreadingHTTPServer] = None
        self._grpc = None

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}{TRACES_PATH}"

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> "Receiver":
        """Listen (raises OSError if the address cannot be had) and serve in threads."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        server_class = _IPv6Server if ":" in self.address else _Server
        self._http = server_class((self.address, self.port), _Handler)
        self._http.receiver = self
        self.port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, name="agentscope-receiver",
                         daemon=True).start()
        if self.grpc_port is not None:
            try:
                self._grpc, self.grpc_port = _grpc_server(self)
            except Exception:
                self.stop()
                raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop listening, finish the requests being written (up to ``timeout`` s), close
        the file. Requests arriving meanwhile are answered 503. Idempotent."""
        with self._busy:
            self._closing = True
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(timeout).wait(timeout)
            self._grpc = None
        with self._busy:
            self._busy.wait_for(lambda: self._in_flight == 0, timeout)
        self.file.close()

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict:
        return {"requests": self.requests, "spans_accepted": self.spans_accepted,
                "spans_rejected": self.spans_rejected, "bad_requests": self.bad_requests,
                "failed_writes": self.failed_writes, "bytes_received": self.bytes_received,
                "files": [str(p) for p in self.file.paths]}

    # ---- one request --------------------------------------------------------------------
    def export(self, body: bytes, media: str) -> Result:
        """Decode one request (``media``: :data:`PROTOBUF` or :data:`JSON`, decompressed) and
        write its spans; returns once they are durable. Raises BadRequest, Unavailable."""
        with self._busy:
            if self._closing:
                raise Unavailable("the receiver is stopping")
            self._in_flight += 1
        try:
            return self._export(body, media)
        finally:
            with self._busy:
                self._in_flight -= 1
                self._busy.notify_all()

    def _export(self, body: bytes, media: str) -> Result:
        errors: list = []
        where = f"POST {TRACES_PATH}"
        try:
            if media == JSON:
                try:
                    request = json.loads(body)
                except (ValueError, RecursionError) as e:
                    raise BadRequest(f"not valid JSON: {e}") from None
                if not isinstance(request, dict):
                    raise BadRequest("expected an ExportTraceServiceRequest JSON object")
                records = list(spans_of_request(request, where, None, errors))
            else:
                try:
                    request = otlp_proto.parse(body)
                except ValueError as e:
                    raise BadRequest(str(e)) from None
                records = list(otlp_proto.spans_of_message(request, where, None, errors))
        except BadRequest:
            self._count(bad_requests=1)
            raise
        lines = []
        for r in records:
            try:
                lines.append(spanfile.encode(r))
            except (TypeError, ValueError) as e:
                errors.append(f"span {r.span_id}: cannot be written ({e})")
        if lines:
            try:
                self.file.append("".join(lines).encode("ascii"))
            except OSError as e:
                self._count(failed_writes=1)
                raise Unavailable(f"cannot write the spans: {e.strerror or e}") from None
        result = Result(len(lines), len(errors), _message(errors))
        self._count(requests=1, spans_accepted=result.accepted, spans_rejected=result.rejected)
        return result

    def _count(self, **add: int) -> None:
        with self._count_lock:
            for name, n in add.items():
                setattr(self, name, getattr(self, name) + n)


def _message(errors: list) -> str:
    if not errors:
        return ""
    reasons = [f"span {e.span_id}: {e.reason}" if getattr(e, "span_id", None) else
               getattr(e, "reason", str(e)) for e in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return f"{len(errors)} spans rejected: " + "; ".join(reasons) + more


# ---- response bodies --------------------------------------------------------------------
def response_body(result: Result, media: str) -> bytes:
    """The ExportTraceServiceResponse for ``result`` in ``media``'s encoding."""
    partial = result.rejected > 0
    if media == JSON:
        body = {"partialSuccess": {"rejectedSpans": str(result.rejected),
                                   "errorMessage": result.message}} if partial else {}
        return json.dumps(body).encode()
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

    if not partial:
        return b""
    return pb.ExportTraceServiceResponse(partial_success=pb.ExportTracePartialSuccess(
        rejected_spans=result.rejected, error_message=result.message)).SerializeToString()


def status_body(code: int, message: str, media: str) -> bytes:
    """A ``google.rpc.Status`` (``code``, ``message``) in ``media``'s encoding."""
    if media == JSON:
        return json.dumps({"code": code, "message": message}).encode()
    text = message.encode("utf-8")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


class _TooLarge(Exception):
    pass


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` decoded (gzip, or zlib for deflate: the header says which; every gzip member);
    raises _TooLarge past ``limit`` bytes, zlib.error or BadRequest for bad data."""
    if encoding in ("", "identity"):
        return body
    parts, size, rest = [], 0, body
    while rest:
        d = zlib.decompressobj(32 + zlib.MAX_WBITS)
        out = d.decompress(rest, limit - size + 1)
        size += len(out)
        if size > limit or d.unconsumed_tail:
            raise _TooLarge()
        if not d.eof:
            raise BadRequest(f"truncated {encoding} body")
        parts.append(out)
        rest = d.unused_data
    return b"".join(parts)


# ---- OTLP/HTTP ----------------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    receiver: Receiver

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: no reverse DNS lookup
        self.server_name, self.server_port = self.server_address[:2]


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agentscope-receiver"
    timeout = 60  # an idle keep-alive connection is closed after this many seconds
    disable_nagle_algorithm = True  # headers and body leave at once (no delayed-ACK stall)
    server: _Server

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != TRACES_PATH:
            return self._text(404, f"404 not found: OTLP traces go to POST {TRACES_PATH}",
                              close=True)
        mime = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        media = _MEDIA.get(mime)
        if media is None:
            return self._text(415, f"415 unsupported media type {mime!r}, supported: "
                                   f"{PROTOBUF}, {JSON}", close=True)
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity", "gzip", "deflate"):
            return self._text(415, f"415 unsupported content encoding {encoding!r}, "
                                   "supported: gzip, deflate, identity", close=True)
        receiver = self.server.receiver
        if not receiver.slots.acquire(timeout=receiver.slot_wait_s):  # its body waits unread
            return self._status(503, _UNAVAILABLE, f"busy: {receiver.max_in_flight} requests "
                                "are being taken; retry", media, close=True, retry_after=1)
        try:
            return self._post(receiver, media, encoding)
        finally:
            receiver.slots.release()

    def _post(self, receiver: "Receiver", media: str, encoding: str) -> None:
        limit = receiver.max_body
        try:
            body = self._body(limit)
        except _TooLarge:
            return self._status(413, _RESOURCE_EXHAUSTED, f"body over the limit of {limit} "
                                "bytes", media, close=True)
        except BadRequest as e:
            return self._status(400, _INVALID_ARGUMENT, str(e), media, close=True)
        if body is None:  # the client went away mid-body
            self.close_connection = True
            return None
        receiver._count(bytes_received=len(body))
        try:
            raw = _decompress(body, encoding, limit)
        except _TooLarge:
            return self._status(413, _RESOURCE_EXHAUSTED, "decompressed body over the limit of "
                                f"{limit} bytes", media)
        except (BadRequest, zlib.error) as e:
            receiver._count(bad_requests=1)
            reason = str(e) if isinstance(e, BadRequest) else f"not valid {encoding} data: {e}"
            return self._status(400, _INVALID_ARGUMENT, reason, media)
        try:
            result = receiver.export(raw, media)
        except BadRequest as e:
            return self._status(400, _INVALID_ARGUMENT, str(e), media)
        except Unavailable as e:
            return self._status(503, _UNAVAILABLE, str(e), media, retry_after=1)
        return self._send(200, response_body(result, media), media)

    def _body(self, limit: int) -> Optional[bytes]:
        """The request body (Content-Length or chunked), None if the connection ended early;
        raises _TooLarge past ``limit`` (before reading, when the length is announced)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._chunked(limit)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise BadRequest("a Content-Length (or chunked transfer encoding) is required") \
                from None
        if length < 0:
            raise BadRequest(f"invalid Content-Length {length}")
        if length > limit:
            raise _TooLarge()
        body = self.rfile.read(length)
        return body if len(body) == length else None

    def _chunked(self, limit: int) -> Optional[bytes]:
        parts, size = [], 0
        while True:
            line = self.rfile.readline(1024)
            if not line.endswith(b"\n"):
                return None
            try:
                n = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadRequest(f"bad chunk size line {line[:40]!r}") from None
            if n == 0:
                while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                    pass  # trailer fields
                return b"".join(parts)
            size += n
            if size > limit:
                raise _TooLarge()
            chunk = self.rfile.read(n)
            if len(chunk) < n or self.rfile.readline(8) not in (b"\r\n", b"\n"):
                return None
            parts.append(chunk)

    def _not_allowed(self) -> None:
        if self.path.split("?", 1)[0] != TRACES_PATH:
            return self._text(404, f"404 not found: OTLP traces go to POST {TRACES_PATH}",
                              close=True)
        return self._text(405, "405 method not allowed, supported: POST", allow="POST",
                          close=True)

    do_GET = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def do_HEAD(self) -> None:
        self._not_allowed()

    def _status(self, code: int, rpc_code: int, message: str, media: str,
                close: bool = False, retry_after: Optional[int] = None) -> None:
        self._send(code, status_body(rpc_code, message, media), media, close=close,
                   retry_after=retry_after)

    def _text(self, code: int, message: str, close: bool = False,
              allow: Optional[str] = None) -> None:
        self._send(code, (message + "\n").encode(), "text/plain; charset=utf-8", close=close,
                   allow=allow)

    def _send(self, code: int, body: bytes, media: str, close: bool = False,
              retry_after: Optional[int] = None, allow: Optional[str] = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        if allow is not None:
            self.send_header("Allow", allow)
        if close:  # the body (if any) was not read: the connection cannot be reused
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # no line per request on stderr; the receiver counts them


# ---- OTLP/gRPC ----------------------------------------------------------------------------
def _grpc_server(receiver: Receiver):
    """A started grpcio server of TraceService/Export on raw bytes, and its port."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    def export(request: bytes, context) -> bytes:
        receiver._count(bytes_received=len(request))
        try:
            return response_body(receiver.export(request, PROTOBUF), PROTOBUF)
        except BadRequest as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except Unavailable as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    handler = grpc.method_handlers_generic_handler(GRPC_SERVICE, {
        "Export": grpc.unary_unary_rpc_method_handler(export)})
    server = grpc.server(ThreadPoolExecutor(max_workers=receiver.max_in_flight,
                                            thread_name_prefix="agentscope-grpc"),
                         handlers=(handler,),
                         # at most this many requests held at once (memory), as over HTTP:
                         # beyond it grpcio answers RESOURCE_EXHAUSTED and the exporter retries
                         maximum_concurrent_rpcs=receiver.max_in_flight,
                         options=[("grpc.max_receive_message_length", receiver.max_body)])
    host = f"[{receiver.address}]" if ":" in receiver.address else receiver.address
    port = server.add_insecure_port(f"{host}:{receiver.grpc_port}")
    if port == 0:
        raise OSError(f"cannot listen for OTLP/gRPC on {host}:{receiver.grpc_port}")
    server.start()
    return server, port


def serve(out_dir: "str | os.PathLike[str]", *, address: str = "127.0.0.1", port: int = 4318,
          grpc_port: Optional[int] = None, max_body: int = MAX_BODY,
          ready: Optional[Callable[[Receiver], None]] = None,
          stop: Optional[threading.Event] = None) -> Receiver:
    """Receive into ``out_dir`` until SIGINT or SIGTERM (handled when called from the main
    thread) or ``stop`` is set; ``ready(receiver)`` is called once it listens. Returns the
    stopped receiver (its file closed). Raises ValueError for a bad setting (grpcio missing),
    OSError if the address cannot be had."""
    receiver = Receiver(out_dir, address, port, grpc_port, max_body).start()
    stop = stop or threading.Event()
    previous = handle(("SIGINT", "SIGTERM"), lambda *_: stop.set())
    try:
        if ready is not None:
            ready(receiver)
        while not stop.wait(0.5):
            pass
    finally:
        restore(previous)
        receiver.stop()
    return receiver
