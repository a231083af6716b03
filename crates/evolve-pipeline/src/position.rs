//! Positions in a source's stream of committed transactions.
//!
//! Everything past the source (the state store, the feed, the bus, sinks,
//! subscribers, the admin API) orders transactions by [`Position`] and
//! nothing else: a value per committed upstream transaction, totally
//! ordered, the same for every reader of that source, never decreasing
//! along the stream. Only the source that makes positions knows what they
//! mean. For a PostgreSQL source a position is the end LSN of the
//! transaction's commit record ([`Position::from_lsn`], [`Position::lsn`]),
//! and positions are written in PostgreSQL's LSN notation (`16/B374D848`)
//! wherever users read them; other kinds of source map their own stream
//! coordinates onto the same order-preserving 64 bits.

use std::fmt;
use std::str::FromStr;

use evolve_pgoutput::Lsn;

/// A position in one source's stream; see the module docs.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position(u64);

impl Position {
    /// Before every transaction.
    pub const ZERO: Position = Position(0);

    /// The position's order-preserving 64-bit form, as the state store
    /// keeps it.
    pub const fn from_u64(value: u64) -> Position {
        Position(value)
    }

    /// See [`Position::from_u64`].
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The position of a PostgreSQL transaction whose commit record ends
    /// at `lsn`.
    pub const fn from_lsn(lsn: Lsn) -> Position {
        Position(lsn.0)
    }

    /// The LSN a PostgreSQL source's position stands for.
    pub const fn lsn(self) -> Lsn {
        Lsn(self.0)
    }

    /// The store's signed form (SQLite integers are signed; the order of
    /// positions below 2^63, every LSN a server can reach, is kept).
    pub(crate) fn to_sql(self) -> i64 {
        self.0 as i64
    }

    /// See [`Position::to_sql`].
    pub(crate) fn from_sql(value: i64) -> Position {
        Position(value as u64)
    }
}

impl From<Lsn> for Position {
    fn from(lsn: Lsn) -> Position {
        Position::from_lsn(lsn)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.lsn(), f)
    }
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Position({self})")
    }
}

/// A position that is not in LSN notation.
pub type PositionParseError = evolve_pgoutput::LsnParseError;

impl FromStr for Position {
    type Err = PositionParseError;

    fn from_str(s: &str) -> Result<Position, PositionParseError> {
        s.parse::<Lsn>().map(Position::from_lsn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_text_and_the_store_form_round_trip() {
        let a: Position = "0/16B3748".parse().unwrap();
        let b: Position = "1/0".parse().unwrap();
        assert!(Position::ZERO < a && a < b);
        assert_eq!(b.to_string(), "1/0");
        assert_eq!(Position::from_sql(b.to_sql()), b);
        assert_eq!(Position::from_lsn(a.lsn()), a);
        assert_eq!(format!("{a:?}"), "Position(0/16B3748)");
        assert!("16B3748".parse::<Position>().is_err());
    }
}
