"""A real gRPC server with server reflection for the binding tests.

Its .proto is built in code (descriptor_pb2), so no codegen step:

    package scan.v1;
    message ScanRequest { string path = 1; string min_severity = 2; int32 delay_ms = 3; }
    message ScanReply   { repeated string findings = 1; int32 elapsed = 2; string path = 3; }
    service Scanner {
      rpc Scan (ScanRequest) returns (ScanReply);   // delay_ms > 0: sleep first (cancellable)
      rpc Fail (ScanRequest) returns (ScanReply);   // aborts with NOT_FOUND
    }
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection

SERVICE = "scan.v1.Scanner"


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="ampcap_test_scan.proto", package="scan.v1", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    req = f.message_type.add(name="ScanRequest")
    req.field.add(name="path", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL, json_name="path")
    req.field.add(name="min_severity", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL, json_name="minSeverity")
    req.field.add(name="delay_ms", number=3, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL, json_name="delayMs")
    rep = f.message_type.add(name="ScanReply")
    rep.field.add(name="findings", number=1, type=T.TYPE_STRING, label=T.LABEL_REPEATED, json_name="findings")
    rep.field.add(name="elapsed", number=2, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL, json_name="elapsed")
    rep.field.add(name="path", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL, json_name="path")
    svc = f.service.add(name="Scanner")
    svc.method.add(name="Scan", input_type=".scan.v1.ScanRequest", output_type=".scan.v1.ScanReply")
    svc.method.add(name="Fail", input_type=".scan.v1.ScanRequest", output_type=".scan.v1.ScanReply")
    return f


def _classes() -> tuple[Any, Any]:
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName("ampcap_test_scan.proto")
    except KeyError:
        pool.Add(_file())
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("scan.v1.ScanRequest")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("scan.v1.ScanReply")))


class Recorder:
    def __init__(self) -> None:
        self.calls = 0
        self.cancelled = threading.Event()
        self.time_remaining: float | None = None  # the last call's deadline as the server saw it (seconds)


@contextmanager
def grpc_server(tls: tuple[bytes, bytes] | None = None) -> Iterator[tuple[str, Recorder]]:
    """A running server; ``tls`` = (key PEM, certificate PEM) serves TLS."""
    request_class, reply_class = _classes()
    rec = Recorder()

    def scan(request: Any, context: grpc.ServicerContext) -> Any:
        rec.calls += 1
        rec.time_remaining = context.time_remaining()
        if request.delay_ms:
            context.add_callback(rec.cancelled.set)  # runs when the RPC ends, cancelled or not
            deadline = time.monotonic() + request.delay_ms / 1000
            while time.monotonic() < deadline:
                if not context.is_active():
                    rec.cancelled.set()
                    return reply_class()
                time.sleep(0.01)
        return reply_class(findings=[f"{request.path}:{request.min_severity or 'low'}"], elapsed=7, path=request.path)

    def fail(request: Any, context: grpc.ServicerContext) -> Any:
        rec.calls += 1
        context.abort(grpc.StatusCode.NOT_FOUND, f"no {request.path}")

    handlers = {
        "Scan": grpc.unary_unary_rpc_method_handler(scan, request_deserializer=request_class.FromString,
                                                    response_serializer=reply_class.SerializeToString),
        "Fail": grpc.unary_unary_rpc_method_handler(fail, request_deserializer=request_class.FromString,
                                                    response_serializer=reply_class.SerializeToString),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    reflection.enable_server_reflection((SERVICE, reflection.SERVICE_NAME), server)
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([tls]))
    server.start()
    try:
        yield f"127.0.0.1:{port}", rec
    finally:
        server.stop(0)
