//! Numbers as jsonb stores them: the text read by `numeric_in`, printed by
//! `numeric_out` (PostgreSQL 15's `set_var_from_str`, `make_result` and
//! `get_str_from_var`).
//!
//! `numeric_in` keeps every digit it is given and a display scale of
//! `max(0, digits after the point - exponent)`; `numeric_out` prints the
//! integer part without leading zeros (at least `0`), then exactly that many
//! fraction digits. Zero is never negative. So `1.500e1` is `15.00`, `100e-1`
//! is `10.0`, `1e+300` is a 1 and 300 zeros, `-0.0` is `0.0`.

use super::ValueProblem;

/// `numeric`'s limits: the display scale is a 14-bit field, the weight (of
/// the first non-zero base-10000 digit) an `int16`.
const DSCALE_MAX: i64 = 0x3FFF;
const WEIGHT_MAX: i64 = i16::MAX as i64;
const WEIGHT_MIN: i64 = i16::MIN as i64;
/// `set_var_from_str` refuses exponents from `INT_MAX / 2` on.
const EXPONENT_LIMIT: i64 = (i32::MAX / 2) as i64;

/// C's `isspace` in the "C" locale.
pub(super) fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Reads `text` as `numeric_in` does (finite values only: the caller has
/// already turned `NaN` and the infinities into strings) and writes it as
/// `numeric_out` would.
pub(super) fn write_numeric(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueProblem> {
    let mut i = 0;
    while i < text.len() && is_c_space(text[i]) {
        i += 1;
    }
    let mut negative = false;
    if let Some(&sign @ (b'+' | b'-')) = text.get(i) {
        negative = sign == b'-';
        i += 1;
    }
    let int_start = i;
    while i < text.len() && text[i].is_ascii_digit() {
        i += 1;
    }
    let int_digits = &text[int_start..i];
    let mut frac_digits: &[u8] = &[];
    if text.get(i) == Some(&b'.') {
        i += 1;
        let frac_start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        frac_digits = &text[frac_start..i];
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(ValueProblem::Number);
    }
    let mut exponent: i64 = 0;
    if let Some(b'e' | b'E') = text.get(i) {
        i += 1;
        // strtol: optional white space, an optional sign, at least one digit.
        while i < text.len() && is_c_space(text[i]) {
            i += 1;
        }
        let mut exp_negative = false;
        if let Some(&sign @ (b'+' | b'-')) = text.get(i) {
            exp_negative = sign == b'-';
            i += 1;
        }
        let exp_start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            exponent = exponent
                .saturating_mul(10)
                .saturating_add(i64::from(text[i] - b'0'));
            i += 1;
        }
        if i == exp_start {
            return Err(ValueProblem::Number);
        }
        if exp_negative {
            exponent = -exponent;
        }
        if exponent >= EXPONENT_LIMIT || exponent <= -EXPONENT_LIMIT {
            return Err(ValueProblem::NumericOverflow);
        }
    }
    while i < text.len() && is_c_space(text[i]) {
        i += 1;
    }
    if i != text.len() {
        return Err(ValueProblem::Number);
    }
    write_decimal(negative, int_digits, frac_digits, exponent, out)
}

/// Writes the value `±int_digits.frac_digits × 10^exponent` as
/// `numeric_out` prints it, after `numeric_in`'s range checks.
fn write_decimal(
    negative: bool,
    int_digits: &[u8],
    frac_digits: &[u8],
    exponent: i64,
    out: &mut Vec<u8>,
) -> Result<(), ValueProblem> {
    // Slice lengths are at most isize::MAX, so they fit an i64.
    let k = int_digits.len() as i64;
    let m = frac_digits.len() as i64;
    let dscale = (m - exponent).max(0);
    if dscale > DSCALE_MAX {
        return Err(ValueProblem::NumericOverflow);
    }
    // The digit string D = int_digits ++ frac_digits; the point sits after
    // position `point` of D (which may lie outside D).
    let digit = |j: i64| -> u8 {
        if j < 0 || j >= k + m {
            b'0'
        } else if j < k {
            int_digits[j as usize]
        } else {
            frac_digits[(j - k) as usize]
        }
    };
    let first_nonzero = int_digits
        .iter()
        .chain(frac_digits)
        .position(|&d| d != b'0')
        .map(|p| p as i64);
    let point = k + exponent;
    let Some(first) = first_nonzero else {
        // Zero: positive, with its display scale.
        out.push(b'0');
        if dscale > 0 {
            out.push(b'.');
            out.resize(out.len() + dscale as usize, b'0');
        }
        return Ok(());
    };
    // The decimal exponent of the first non-zero digit, and the weight of
    // the base-10000 digit holding it.
    let decimal_weight = point - 1 - first;
    let weight = decimal_weight.div_euclid(4);
    if !(WEIGHT_MIN..=WEIGHT_MAX).contains(&weight) {
        return Err(ValueProblem::NumericOverflow);
    }
    if negative {
        out.push(b'-');
    }
    if first < point {
        out.reserve((point - first) as usize);
        for j in first..point {
            out.push(digit(j));
        }
    } else {
        out.push(b'0');
    }
    if dscale > 0 {
        out.push(b'.');
        out.reserve(dscale as usize);
        for j in point..point + dscale {
            out.push(digit(j));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(text: &str) -> Result<String, ValueProblem> {
        let mut out = Vec::new();
        write_numeric(text.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn plain_numbers_are_kept() {
        for s in [
            "0",
            "1",
            "-1",
            "1.50",
            "0.00000000000000000001",
            "123456789012345678901234567890",
        ] {
            assert_eq!(num(s).unwrap(), s);
        }
    }

    #[test]
    fn exponents_become_plain_decimal_with_numeric_in_scale() {
        // Each pair checked against PostgreSQL 15 (`select to_jsonb('<in>'::json)`).
        let cases = [
            ("1.0e2", "100"),
            ("1E+02", "100"),
            ("1.500e1", "15.00"),
            ("100e-1", "10.0"),
            ("0.1e-2", "0.001"),
            ("1e-0", "1"),
            ("1.5e-07", "0.00000015"),
            ("-0", "0"),
            ("-0.000", "0.000"),
            ("0e99999999", "0"),
            ("0e1073741822", "0"),
            ("3.4028235e+38", "340282350000000000000000000000000000000"),
            (" 1 ", "1"),
            ("+.5", "0.5"),
            ("1.", "1"),
        ];
        for (input, expected) in cases {
            assert_eq!(num(input).unwrap(), expected, "{input}");
        }
        let big = num("1e+300").unwrap();
        assert_eq!(big.len(), 301);
        assert!(big.starts_with('1') && big[1..].bytes().all(|b| b == b'0'));
    }

    #[test]
    fn numeric_range_limits_match_the_server() {
        assert!(num("1e-16383").is_ok());
        assert_eq!(num("1e-16384"), Err(ValueProblem::NumericOverflow));
        assert_eq!(num("0e-16384"), Err(ValueProblem::NumericOverflow));
        assert!(num("9.9e131071").is_ok());
        assert_eq!(num("1e131072"), Err(ValueProblem::NumericOverflow));
        assert_eq!(num("0e1073741823"), Err(ValueProblem::NumericOverflow));
        assert_eq!(
            num("1e99999999999999999999999"),
            Err(ValueProblem::NumericOverflow)
        );
    }

    #[test]
    fn garbage_is_refused() {
        for s in ["", "-", ".", "e5", "1e", "1x", "1.2.3", "--1", "1 2"] {
            assert_eq!(num(s), Err(ValueProblem::Number), "{s:?}");
        }
    }
}
