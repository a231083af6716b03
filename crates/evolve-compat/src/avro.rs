//! avro compatibility (in progress).
