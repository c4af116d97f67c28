"""A gRPC binding: a capability served by a unary gRPC method (R17), with
grpcio (imported when the first such binding runs).

The method's message types come from the server's reflection service
(``grpc.reflection.v1alpha``), asked once per method and kept; params
(renamed by ``mapping``) become the request through protobuf's own JSON
mapping (``json_format.ParseDict``: unknown fields are refused), and the
reply becomes the result the same way (``MessageToDict`` with the proto
field names, fields left at their defaults included), renamed by
``output_mapping``.

grpcio's call futures run on its own threads: the call is started with the
binding's timeout as its gRPC deadline, and its completion is handed to
trio through the trio token (no thread waits for it). Cancellation (the
binding's timeout, the invoke's deadline, a drain) cancels the gRPC call.
Reaching the server is checked before the first call of a method: a server
that is not there is :class:`~ampcap.caps.binding.other_protocols.NotRun` (5002) and a
capability's next binding may run; once a call was sent, its status is the
answer: DEADLINE_EXCEEDED 5003, UNAVAILABLE 5002, any other 5001.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import trio

from ..caps.binding.context import InvocationContext, binding_timeout_ms
from ..caps.binding.other_protocols import GrpcBinding, NotRun, map_fields
from ..display import shown
from ..errors import AmpError

__all__ = ["GrpcRunner"]

log = logging.getLogger("ampcap.bindings")

INTERNAL = 5001
UNAVAILABLE = 5002
TIMEOUT = 5003
BAD_PARAMS = 4001
CONNECT_TIMEOUT_S = 10.0
MAX_MESSAGE_BYTES = 4 << 20

_ChannelKey = tuple[str, bool, Path | None]


def _connects(channel: Any) -> bool:
    """Does the channel reach READY? False at its first TRANSIENT_FAILURE
    (refused, unresolvable: grpcio would keep retrying for ever) or after
    the connect timeout. Blocks: called in a worker thread."""
    import threading

    import grpc

    settled = threading.Event()
    last: list[Any] = []

    def watch(state: Any) -> None:
        last.append(state)
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
            settled.set()

    channel.subscribe(watch, try_to_connect=True)
    try:
        settled.wait(CONNECT_TIMEOUT_S)
    finally:
        channel.unsubscribe(watch)
    return bool(last) and last[-1] is grpc.ChannelConnectivity.READY


class GrpcRunner:
    """One channel per target, message classes per method, for the daemon."""

    def __init__(self) -> None:
        import grpc  # noqa: F401 - fail now, with the binding, if grpcio is missing

        self._channels: dict[_ChannelKey, Any] = {}
        self._methods: dict[tuple[_ChannelKey, str], tuple[Any, Any, Any]] = {}

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._methods.clear()

    def _channel(self, binding: GrpcBinding) -> tuple[_ChannelKey, Any]:
        import grpc

        key = (binding.target, binding.tls, binding.ca_file)
        channel = self._channels.get(key)
        if channel is None:
            options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                       ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
            if binding.tls:
                try:
                    roots = binding.ca_file.read_bytes() if binding.ca_file else None
                except OSError as exc:
                    raise NotRun(UNAVAILABLE, f"cannot read the CA file {binding.ca_file}: {exc.strerror}") from None
                channel = grpc.secure_channel(binding.target, grpc.ssl_channel_credentials(roots), options)
            else:
                channel = grpc.insecure_channel(binding.target, options)
            self._channels[key] = channel
        return key, channel

    async def _method(self, binding: GrpcBinding, key: _ChannelKey, channel: Any) -> tuple[Any, Any, Any]:
        """(request class, reply class, callable) of ``binding.method``, by reflection."""
        found = self._methods.get((key, binding.method))
        if found is None:
            found = await trio.to_thread.run_sync(self._reflect, binding, channel, abandon_on_cancel=True)
            self._methods[(key, binding.method)] = found
        return found

    @staticmethod
    def _reflect(binding: GrpcBinding, channel: Any) -> tuple[Any, Any, Any]:
        # Runs in a worker thread: grpcio's reflection client blocks.
        import grpc
        from google.protobuf import descriptor_pool, message_factory
        from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

        if not _connects(channel):
            raise NotRun(UNAVAILABLE, f"cannot connect to the gRPC server {binding.target}")
        service_name, _, method_name = binding.method.partition("/")
        try:
            pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
            service = pool.FindServiceByName(service_name)
            method = service.methods_by_name.get(method_name)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            raise NotRun(UNAVAILABLE, f"the gRPC server {binding.target} cannot describe {service_name} "
                                      f"(reflection: {code.name if code else 'failed'})") from None
        except KeyError:
            raise NotRun(UNAVAILABLE, f"the gRPC server {binding.target} has no service {service_name}") from None
        if method is None:
            raise NotRun(UNAVAILABLE, f"the gRPC service {service_name} has no method {method_name}")
        if method.client_streaming or method.server_streaming:
            raise NotRun(UNAVAILABLE, f"{binding.method} streams; a gRPC binding calls unary methods only")
        request_class = message_factory.GetMessageClass(method.input_type)
        reply_class = message_factory.GetMessageClass(method.output_type)
        call = channel.unary_unary(binding.path, request_serializer=request_class.SerializeToString,
                                   response_deserializer=reply_class.FromString)
        return request_class, reply_class, call

    async def run(self, binding: GrpcBinding, params: Any, context: InvocationContext) -> Any:
        import grpc
        from google.protobuf import json_format

        key, channel = self._channel(binding)
        request_class, _, call = await self._method(binding, key, channel)
        try:
            request = json_format.ParseDict(map_fields(params if params is not None else {}, binding.mapping),
                                            request_class())
        except (json_format.ParseError, TypeError, ValueError) as exc:
            raise AmpError(BAD_PARAMS, f"params do not fit {request_class.DESCRIPTOR.full_name}: {shown(exc)}") \
                from None
        # The gRPC deadline: the binding's timeout, or less when the invoke's
        # budget has less left (R23); the server sees it as grpc-timeout.
        deadline_ms = binding_timeout_ms(binding.timeout_ms, context) or binding.timeout_ms
        future = call.future(request, timeout=deadline_ms / 1000)
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def finished(_: Any) -> None:
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        future.add_done_callback(finished)
        try:
            await done.wait()
        except BaseException:
            future.cancel()  # the timeout, the invoke's deadline, a drain: the call ends on the server too
            raise
        try:
            reply = future.result()
        except grpc.RpcError as exc:
            status = exc.code()
            detail = shown(exc.details() or "")
            if status is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise AmpError(TIMEOUT, f"{binding.method} did not finish within {deadline_ms} ms") from None
            code = UNAVAILABLE if status is grpc.StatusCode.UNAVAILABLE else INTERNAL
            raise AmpError(code, f"{binding.method} failed: {status.name}{': ' + detail if detail else ''}",
                           details={"grpc_status": status.name}) from None
        result = json_format.MessageToDict(reply, preserving_proto_field_name=True,
                                           always_print_fields_with_no_presence=True)
        return map_fields(result, binding.output_mapping)
