//! The few fields of an X.509 certificate that checking a self-signed
//! server certificate needs, read from its DER: what is signed, the
//! signature and its algorithm, issuer and subject, the validity period and
//! the public key. Pure; `None` for anything that is not a certificate.

/// A certificate's fields, borrowed from its DER.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Certificate<'a> {
    /// `tbsCertificate`, tag and length included: the signed bytes.
    pub(crate) tbs: &'a [u8],
    /// The contents of `signatureAlgorithm` (OID and parameters, without
    /// the SEQUENCE's tag and length), as rustls's algorithms name theirs.
    pub(crate) signature_algorithm: &'a [u8],
    /// `signatureValue`, without the BIT STRING's unused-bits octet.
    pub(crate) signature: &'a [u8],
    /// `issuer` and `subject`, tag and length included.
    pub(crate) issuer: &'a [u8],
    pub(crate) subject: &'a [u8],
    /// `notBefore` and `notAfter`, in seconds since the Unix epoch.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
    /// The contents of the public key's `algorithm`, like
    /// `signature_algorithm`.
    pub(crate) key_algorithm: &'a [u8],
    /// `subjectPublicKey`, without the unused-bits octet.
    pub(crate) key: &'a [u8],
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const VERSION: u8 = 0xa0;

/// Reads `der`, a whole certificate.
pub(crate) fn parse(der: &[u8]) -> Option<Certificate<'_>> {
    let (cert, rest) = expect(der, SEQUENCE)?;
    if !rest.is_empty() {
        return None;
    }
    let (tbs_contents, tbs, cert) = tlv(cert, SEQUENCE)?;
    let (signature_algorithm, cert) = expect(cert, SEQUENCE)?;
    let (signature, cert) = bit_string(cert)?;
    if !cert.is_empty() {
        return None;
    }
    let mut t = tbs_contents;
    if t.first() == Some(&VERSION) {
        t = expect(t, VERSION)?.1;
    }
    let (_serial, t) = expect(t, INTEGER)?;
    let (_signature, t) = expect(t, SEQUENCE)?;
    let (_, issuer, t) = tlv(t, SEQUENCE)?;
    let (validity, t) = expect(t, SEQUENCE)?;
    let (_, subject, t) = tlv(t, SEQUENCE)?;
    let (spki, _extensions) = expect(t, SEQUENCE)?;
    let (key_algorithm, spki) = expect(spki, SEQUENCE)?;
    let (key, _) = bit_string(spki)?;
    let (not_before, validity) = time(validity)?;
    let (not_after, _) = time(validity)?;
    Some(Certificate {
        tbs,
        signature_algorithm,
        signature,
        issuer,
        subject,
        not_before,
        not_after,
        key_algorithm,
        key,
    })
}

/// One element with tag `tag`: `(contents, whole element, rest)`.
fn tlv(input: &[u8], tag: u8) -> Option<(&[u8], &[u8], &[u8])> {
    if *input.first()? != tag {
        return None;
    }
    let first = *input.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let bytes = input.get(2..2 + n)?;
        let len = bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    let whole = input.get(..end)?;
    Some((&whole[header..], whole, &input[end..]))
}

fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    tlv(input, tag).map(|(contents, _, rest)| (contents, rest))
}

/// A BIT STRING with no unused bits: `(bits, rest)`.
fn bit_string(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (contents, rest) = expect(input, BIT_STRING)?;
    match contents.split_first()? {
        (0, bits) => Some((bits, rest)),
        _ => None,
    }
}

/// A UTCTime (`YYMMDDHHMMSSZ`, years 1950 to 2049) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`) as seconds since the Unix epoch: `(seconds, rest)`.
fn time(input: &[u8]) -> Option<(i64, &[u8])> {
    let (text, year, rest) = match *input.first()? {
        UTC_TIME => {
            let (text, rest) = expect(input, UTC_TIME)?;
            let yy = digits(text.get(..2)?)?;
            (
                text.get(2..)?,
                if yy < 50 { 2000 + yy } else { 1900 + yy },
                rest,
            )
        }
        GENERALIZED_TIME => {
            let (text, rest) = expect(input, GENERALIZED_TIME)?;
            (text.get(4..)?, digits(text.get(..4)?)?, rest)
        }
        _ => return None,
    };
    if text.len() != 11 || text[10] != b'Z' {
        return None;
    }
    let field = |i: usize| digits(&text[i..i + 2]);
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3_600 + minute * 60 + second, rest))
}

fn digits(s: &[u8]) -> Option<i64> {
    s.iter().try_fold(0i64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0'))
    })
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian
/// calendar (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_dates_become_unix_seconds() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        let utc = [
            UTC_TIME, 13, b'2', b'4', b'0', b'2', b'2', b'9', b'1', b'2', b'3', b'4', b'5', b'6',
            b'Z',
        ];
        assert_eq!(
            time(&utc),
            Some((19_782 * 86_400 + 12 * 3600 + 34 * 60 + 56, &[][..]))
        );
        let generalized = [
            GENERALIZED_TIME,
            15,
            b'2',
            b'0',
            b'5',
            b'0',
            b'0',
            b'1',
            b'0',
            b'1',
            b'0',
            b'0',
            b'0',
            b'0',
            b'0',
            b'0',
            b'Z',
        ];
        assert_eq!(
            time(&generalized).map(|t| t.0),
            Some(days_from_civil(2050, 1, 1) * 86_400)
        );
        let mut bad = utc;
        bad[4] = b'x';
        assert_eq!(time(&bad), None);
    }

    #[test]
    fn lengths_are_bounds_checked() {
        assert_eq!(tlv(&[SEQUENCE, 0x82, 0x01], SEQUENCE), None);
        assert_eq!(tlv(&[SEQUENCE, 3, 1, 2], SEQUENCE), None);
        assert_eq!(tlv(&[SEQUENCE, 0x85, 1, 1, 1, 1, 1], SEQUENCE), None);
        assert_eq!(
            tlv(&[SEQUENCE, 0x81, 1, 7, 9], SEQUENCE),
            Some((&[7][..], &[SEQUENCE, 0x81, 1, 7][..], &[9][..]))
        );
        assert_eq!(parse(&[]), None);
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(der in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse(&der);
        }

        #[test]
        fn parsing_never_panics_on_nested_sequences(
            body in proptest::collection::vec(
                proptest::sample::select(vec![0x30u8, 0x02, 0x03, 0x17, 0x18, 0xa0, 0x00, 0x01, 0x0d, 0x81, 0x82, b'0', b'Z']),
                0..120,
            )
        ) {
            let mut der = vec![SEQUENCE, 0x81, body.len() as u8];
            der.extend(&body);
            let _ = parse(&der);
        }
    }
}
