//! Log sequence numbers.

use std::fmt;
use std::str::FromStr;

/// A PostgreSQL log sequence number (`XLogRecPtr`, SQL type `pg_lsn`): a byte
/// position in the write-ahead log.
///
/// Written as two hexadecimal numbers, the high and low 32 bits, separated by
/// a slash: `16/B374D848`. [`Display`](fmt::Display) prints upper case
/// without leading zeros, as PostgreSQL does; [`FromStr`] accepts what
/// PostgreSQL's `pg_lsn` input accepts (1 to 8 hex digits on each side, either
/// case, nothing else). LSNs order as the positions they name.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    /// `0/0`, PostgreSQL's `InvalidXLogRecPtr`: "no position".
    pub const INVALID: Lsn = Lsn(0);

    /// Whether this is [`Lsn::INVALID`].
    pub fn is_invalid(self) -> bool {
        self.0 == 0
    }
}

impl From<u64> for Lsn {
    fn from(value: u64) -> Self {
        Lsn(value)
    }
}

impl From<Lsn> for u64 {
    fn from(lsn: Lsn) -> Self {
        lsn.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

/// A string that is not an LSN (see [`Lsn`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid LSN {input:?}: expected two hexadecimal numbers of 1 to 8 digits separated by '/', like 16/B374D848"
)]
pub struct LsnParseError {
    /// The rejected input.
    pub input: String,
}

impl FromStr for Lsn {
    type Err = LsnParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = || LsnParseError {
            input: s.to_owned(),
        };
        let (high, low) = s.split_once('/').ok_or_else(fail)?;
        let high = hex_u32(high).ok_or_else(fail)?;
        let low = hex_u32(low).ok_or_else(fail)?;
        Ok(Lsn((u64::from(high) << 32) | u64::from(low)))
    }
}

/// 1 to 8 hex digits and nothing else (no sign, no space: stricter than
/// `u32::from_str_radix`, which accepts a leading `+`).
fn hex_u32(digits: &str) -> Option<u32> {
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_postgres() {
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn(0).to_string(), "0/0");
        assert_eq!(Lsn(0x1_0000_0000).to_string(), "1/0");
        assert_eq!(Lsn(u64::MAX).to_string(), "FFFFFFFF/FFFFFFFF");
        assert_eq!(format!("{:?}", Lsn(0xABCDEF)), "Lsn(0/ABCDEF)");
    }

    #[test]
    fn parses_like_postgres() {
        assert_eq!("16/B374D848".parse(), Ok(Lsn(0x16_B374_D848)));
        assert_eq!("16/b374d848".parse(), Ok(Lsn(0x16_B374_D848)));
        assert_eq!("0/0".parse(), Ok(Lsn::INVALID));
        assert_eq!("00000001/00000000".parse(), Ok(Lsn(1 << 32)));
        assert_eq!("FFFFFFFF/FFFFFFFF".parse(), Ok(Lsn(u64::MAX)));
    }

    #[test]
    fn rejects_what_postgres_rejects() {
        for bad in [
            "",
            "/",
            "0/",
            "/0",
            "16",
            "16B374D848",
            "0/0/0",
            "+1/0",
            "1/+0",
            "-1/0",
            " 1/0",
            "1/0 ",
            "1 /0",
            "100000000/0",
            "0/123456789",
            "g/0",
            "0x1/0",
            "1/０",
        ] {
            let err = bad.parse::<Lsn>().expect_err(bad);
            assert_eq!(err.input, bad);
            assert!(err.to_string().contains("16/B374D848"), "{err}");
        }
    }

    #[test]
    fn round_trips_and_orders() {
        for value in [0, 1, 0xFFFF_FFFF, 0x1_0000_0000, 0x16_B374_D848, u64::MAX] {
            let lsn = Lsn(value);
            assert_eq!(lsn.to_string().parse::<Lsn>(), Ok(lsn));
            assert_eq!(u64::from(lsn), value);
            assert_eq!(Lsn::from(value), lsn);
        }
        // Numeric order, not string order: 9/0 < 10/0 < A/0 would be wrong.
        let mut lsns: Vec<Lsn> = ["A/0", "9/FFFFFFFF", "10/0", "0/1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        lsns.sort();
        let sorted: Vec<String> = lsns.iter().map(Lsn::to_string).collect();
        assert_eq!(sorted, ["0/1", "9/FFFFFFFF", "A/0", "10/0"]);
        assert!(Lsn::INVALID.is_invalid() && !Lsn(1).is_invalid());
    }
}
