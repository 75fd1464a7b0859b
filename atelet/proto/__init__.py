"""Generated gRPC code for ``atelet.proto`` (regenerate with ``python -m atelet.proto.codegen``)."""
