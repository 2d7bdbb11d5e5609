"""The node's kubelet, asked which pod is which: its pod-resources gRPC API (``pod_resources``,
stubs generated from ``api.proto``) and its Pods API over HTTP (``pods_api``). Both optional:
grpcio and protobuf come with the ``kubernetes`` extra, and every call says why it had no answer."""
