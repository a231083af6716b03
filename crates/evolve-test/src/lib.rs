//! evolve-test
