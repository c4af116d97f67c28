"""A tiny gRPC service with server reflection for examples/bindings/grpc.toml.

python3 examples/bindings/grpc_server.py PORT      (pip install 'ampcap[grpc]')

Its .proto, built in code below (no protoc step):

    syntax = "proto3";
    package calc.v1;
    message AddRequest { int64 a = 1; int64 b = 2; }
    message AddReply { int64 sum = 1; }
    service Calculator { rpc Add (AddRequest) returns (AddReply); }
"""

import sys
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection

SERVICE = "calc.v1.Calculator"


def _register() -> tuple[Any, Any]:
    f = descriptor_pb2.FileDescriptorProto(name="calc.proto", package="calc.v1", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    req = f.message_type.add(name="AddRequest")
    req.field.add(name="a", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL, json_name="a")
    req.field.add(name="b", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL, json_name="b")
    rep = f.message_type.add(name="AddReply")
    rep.field.add(name="sum", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL, json_name="sum")
    f.service.add(name="Calculator").method.add(name="Add", input_type=".calc.v1.AddRequest",
                                                output_type=".calc.v1.AddReply")
    pool = descriptor_pool.Default()
    pool.Add(f)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("calc.v1.AddRequest")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("calc.v1.AddReply")))


def make_server(port: int) -> tuple[grpc.Server, int]:
    request_class, reply_class = _register()

    def add(request: Any, context: grpc.ServicerContext) -> Any:
        return reply_class(sum=request.a + request.b)

    handler = grpc.unary_unary_rpc_method_handler(add, request_deserializer=request_class.FromString,
                                                  response_serializer=reply_class.SerializeToString)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Add": handler}),))
    reflection.enable_server_reflection((SERVICE, reflection.SERVICE_NAME), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    return server, bound


if __name__ == "__main__":
    server, bound = make_server(int(sys.argv[1]))
    server.start()
    server.wait_for_termination()
