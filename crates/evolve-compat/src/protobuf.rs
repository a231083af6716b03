//! protobuf compatibility (in progress).
