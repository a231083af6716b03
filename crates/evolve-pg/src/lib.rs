//! evolve-pg
