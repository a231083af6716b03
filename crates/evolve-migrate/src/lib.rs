//! evolve-migrate
