//! evolve-core
