//! Flyway-compatible migration versions.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use super::name::NameError;

/// Flyway-compatible version: parts separated by '.' or '_' in the file name,
/// compared numerically part by part with missing parts = 0 (so 1.9 < 1.10 < 2,
/// and 1 == 1.0 == 1.0.0). Arbitrary size (each part is kept as a digit string
/// with leading zeros removed and compared by length, then text).
///
/// Equality, ordering and hashing all follow the numeric rule, so `1` and
/// `1.0` are the same version (Flyway refuses two migrations with equal
/// versions, and so should the caller). [`Version::as_str`] keeps the text as
/// written, which is what Flyway stores in its history table.
#[derive(Clone, Debug)]
pub struct Version {
    /// The version as written, with '_' replaced by '.' (Flyway's stored text).
    text: String,
    /// The numeric value: one digit string per part, leading zeros removed
    /// (so zero is the empty string) and trailing zero parts dropped. Two
    /// versions are equal exactly when these vectors are equal.
    parts: Vec<Box<str>>,
}

impl Version {
    /// Parses a version as it appears in a file name: `1`, `1.1`, `1_1`,
    /// `2024_01_01.3`, `001`. Every part must be a non-empty run of ASCII
    /// digits; there is no sign, no whitespace and no empty part.
    pub fn parse(s: &str) -> Result<Version, NameError> {
        let invalid = |problem: &'static str| NameError::InvalidVersion {
            version: s.to_owned(),
            problem,
        };
        if s.is_empty() {
            return Err(invalid("it is empty"));
        }
        let mut parts: Vec<Box<str>> = Vec::new();
        for part in s.split(['.', '_']) {
            if part.is_empty() {
                return Err(invalid(
                    "it has an empty part (two separators in a row, or one at an end)",
                ));
            }
            if !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid(
                    "it contains something other than digits, '.' and '_'",
                ));
            }
            parts.push(part.trim_start_matches('0').into());
        }
        while parts.last().is_some_and(|p| p.is_empty()) {
            parts.pop();
        }
        Ok(Version {
            text: s.replace('_', "."),
            parts,
        })
    }

    /// Flyway's stored text: the file's version with '_' replaced by '.',
    /// leading zeros kept (`001` stays `001`, `1_1` becomes `1.1`).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Compares two numeric parts stored without leading zeros.
fn cmp_part(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        // Trailing zero parts are dropped, so when one list is a prefix of the
        // other the longer one ends in a non-zero part and is the larger.
        for (a, b) in self.parts.iter().zip(&other.parts) {
            match cmp_part(a, b) {
                Ordering::Equal => {}
                unequal => return unequal,
            }
        }
        self.parts.len().cmp(&other.parts.len())
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.parts == other.parts
    }
}

impl Eq for Version {}

impl Hash for Version {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts.hash(state);
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    /// Parses `input` and checks the stored text, or the error message.
    fn check(input: &str, expected: Result<&str, &str>) {
        let actual = Version::parse(input)
            .map(|v| v.as_str().to_owned())
            .map_err(|e| e.to_string());
        let expected = expected.map(str::to_owned).map_err(str::to_owned);
        assert_eq!(actual, expected, "input {input:?}");
    }

    /// Checks that `a` compares to `b` as `expected`, and that Eq and Hash agree.
    fn check_cmp(a: &str, b: &str, expected: Ordering) {
        let (va, vb) = (Version::parse(a).unwrap(), Version::parse(b).unwrap());
        assert_eq!(va.cmp(&vb), expected, "{a} vs {b}");
        assert_eq!(vb.cmp(&va), expected.reverse(), "{b} vs {a}");
        assert_eq!(va == vb, expected == Ordering::Equal, "{a} == {b}");
        if va == vb {
            assert_eq!(hash(&va), hash(&vb), "hash {a} vs {b}");
        }
    }

    fn hash(v: &Version) -> u64 {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn parse_accepts_flyway_versions() {
        check("1", Ok("1"));
        check("1.1", Ok("1.1"));
        check("1_1", Ok("1.1"));
        check("2024_01_01.3", Ok("2024.01.01.3"));
        check("001", Ok("001"));
        check("0", Ok("0"));
        check(
            "123456789012345678901234567890.1",
            Ok("123456789012345678901234567890.1"),
        );
    }

    #[test]
    fn parse_rejects_malformed_versions() {
        const DIGITS: &str = "write digits separated by '.' or '_', like 1.2 or 2024_01_01";
        let empty = format!("version \"\" is not valid: it is empty; {DIGITS}");
        check("", Err(&empty));
        let gap = "it has an empty part (two separators in a row, or one at an end)";
        check(
            "1..2",
            Err(&format!("version \"1..2\" is not valid: {gap}; {DIGITS}")),
        );
        check(
            "1.",
            Err(&format!("version \"1.\" is not valid: {gap}; {DIGITS}")),
        );
        check(
            "_1",
            Err(&format!("version \"_1\" is not valid: {gap}; {DIGITS}")),
        );
        let other = "it contains something other than digits, '.' and '_'";
        for bad in ["1.a", "-1", " 1", "1 ", "1-2", "v1", "1.2b", "١"] {
            check(
                bad,
                Err(&format!("version {bad:?} is not valid: {other}; {DIGITS}")),
            );
        }
    }

    #[test]
    fn ordering_is_numeric_part_by_part() {
        check_cmp("1.9", "1.10", Ordering::Less);
        check_cmp("1.10", "2", Ordering::Less);
        check_cmp("1.9", "2", Ordering::Less);
        check_cmp("1", "1.0", Ordering::Equal);
        check_cmp("1", "1.0.0", Ordering::Equal);
        check_cmp("1.0", "1_0_0", Ordering::Equal);
        check_cmp("001", "1", Ordering::Equal);
        check_cmp("0", "0.0", Ordering::Equal);
        check_cmp("0", "00", Ordering::Equal);
        check_cmp("1", "1.0.1", Ordering::Less);
        check_cmp("1.0.1", "1.1", Ordering::Less);
        check_cmp("0", "0.0.1", Ordering::Less);
        check_cmp("2024_01_01.3", "2024.1.1.3", Ordering::Equal);
        check_cmp("2024_01_01", "2024_01_01.3", Ordering::Less);
        check_cmp("9", "10", Ordering::Less);
        check_cmp(
            "99999999999999999999",
            "100000000000000000000",
            Ordering::Less,
        );
        check_cmp(
            "123456789012345678901234567890",
            "123456789012345678901234567891",
            Ordering::Less,
        );
    }

    #[test]
    fn display_is_the_stored_text() {
        assert_eq!(
            Version::parse("2024_01_01.3").unwrap().to_string(),
            "2024.01.01.3"
        );
        assert_eq!(Version::parse("001").unwrap().to_string(), "001");
    }
}
