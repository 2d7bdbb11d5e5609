#!/bin/sh
# Regenerates api_pb2.py and api_pb2_grpc.py from api.proto, from the repository root, with the
# protoc bundled in grpcio-tools (pip install grpcio-tools==1.85.1, the version that made them).
set -eu
cd "$(dirname "$0")/../../.."
python -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. sidecar/sources/kubelet/api.proto
