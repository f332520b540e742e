"""Generated protobuf modules (run `make protos`); private to `format`."""
