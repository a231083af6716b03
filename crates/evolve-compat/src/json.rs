//! json compatibility (in progress).
