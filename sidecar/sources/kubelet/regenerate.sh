#!/bin/sh
# Regenerates api_pb2.py and api_pb2_grpc.py from api.proto, from the repository root, with the
# protoc bundled in grpcio-tools (pip install grpcio-tools==1.85.1, the version that made them), and
# their type stubs api_pb2.pyi and api_pb2_grpc.pyi with mypy-protobuf's plugins (pip install
# mypy-protobuf==5.1.0; protoc-gen-mypy and protoc-gen-mypy_grpc must be on the PATH).
set -eu
cd "$(dirname "$0")/../../.."
python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. \
  sidecar/sources/kubelet/api.proto
