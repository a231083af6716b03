//! How MySQL and MariaDB column types map to PostgreSQL types, and how
//! their values (from the binlog's row images or a snapshot's binary
//! protocol rows) become the text of the mapped type: pure functions,
//! no I/O.

use super::*;

/// How one column's values become text.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Conv {
    Integer,
    /// A signed MEDIUMINT from the binlog: mysql_common reads its three
    /// bytes without sign extension.
    Int24,
    Decimal,
    Float,
    Double,
    Year,
    Date,
    DateTime,
    /// The binlog sends epoch seconds (`epoch`); a snapshot a UTC datetime.
    Timestamp {
        epoch: bool,
    },
    Time,
    Bit {
        bits: u32,
    },
    Text {
        charset: Charset,
    },
    Bytes {
        /// BINARY(n): the binlog drops trailing zero bytes.
        pad: Option<usize>,
    },
    Enum(Arc<[String]>),
    Set(Arc<[String]>),
    Json,
    /// MariaDB's UUID: its 16 bytes (`record`, from the binlog) or its
    /// text (a snapshot).
    Uuid {
        record: bool,
    },
    /// MariaDB's INET4 (`len` 4) and INET6 (`len` 16): the address's bytes
    /// in network order (`record`, from the binlog) or its text (a
    /// snapshot).
    Inet {
        len: usize,
        record: bool,
    },
    /// No mapping: refused at CREATE TABLE unless excluded.
    Unsupported,
}

/// A MariaDB column whose binlog type says less than its declared type:
/// JSON is `longtext` with a `json_valid` check, UUID, INET4 and INET6
/// are fixed binary strings. Read from the catalog
/// (`CatalogColumn::declared`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Declared {
    Json,
    Uuid,
    Inet4,
    Inet6,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Charset {
    Utf8,
    Latin1,
    Other,
}

fn charset_of(name: &str) -> Charset {
    match name {
        "utf8mb4" | "utf8mb3" | "utf8" | "ascii" => Charset::Utf8,
        "latin1" => Charset::Latin1,
        _ => Charset::Other,
    }
}

pub(super) const INT2: u32 = 21;
pub(super) const INT4: u32 = 23;
pub(super) const INT8: u32 = 20;
pub(super) const NUMERIC: u32 = 1700;
pub(super) const FLOAT4: u32 = 700;
pub(super) const FLOAT8: u32 = 701;
pub(super) const BIT: u32 = 1560;
pub(super) const TEXT: u32 = 25;
pub(super) const BYTEA: u32 = 17;
pub(super) const DATE: u32 = 1082;
pub(super) const INTERVAL: u32 = 1186;
pub(super) const TIMESTAMP: u32 = 1114;
pub(super) const TIMESTAMPTZ: u32 = 1184;
pub(super) const UUID: u32 = 2950;
pub(super) const INET: u32 = 869;
pub(super) const JSONB: u32 = 3802;

/// The PostgreSQL type (OID, typmod) and conversion of a column described
/// by `information_schema.COLUMNS`; `None` for a type without a mapping.
pub(super) fn map_catalog_type(
    data_type: &str,
    column_type: &str,
    charset: Option<&str>,
    bits: Option<u64>,
    json: bool,
) -> Option<(u32, i32, Conv)> {
    let unsigned = column_type.to_ascii_lowercase().contains("unsigned");
    let text = |charset: Option<&str>| Conv::Text {
        charset: charset_of(charset.unwrap_or("utf8mb4")),
    };
    Some(match data_type.to_ascii_lowercase().as_str() {
        "tinyint" => (INT2, -1, Conv::Integer),
        "smallint" if unsigned => (INT4, -1, Conv::Integer),
        "smallint" => (INT2, -1, Conv::Integer),
        "mediumint" => (INT4, -1, Conv::Integer),
        "int" | "integer" if unsigned => (INT8, -1, Conv::Integer),
        "int" | "integer" => (INT4, -1, Conv::Integer),
        "bigint" if unsigned => (NUMERIC, -1, Conv::Integer),
        "bigint" => (INT8, -1, Conv::Integer),
        "decimal" | "numeric" => (NUMERIC, -1, Conv::Decimal),
        "float" => (FLOAT4, -1, Conv::Float),
        "double" | "real" | "double precision" => (FLOAT8, -1, Conv::Double),
        "year" => (INT2, -1, Conv::Year),
        "date" => (DATE, -1, Conv::Date),
        "time" => (INTERVAL, -1, Conv::Time),
        "datetime" => (TIMESTAMP, -1, Conv::DateTime),
        "timestamp" => (TIMESTAMPTZ, -1, Conv::Timestamp { epoch: false }),
        "bit" => {
            let bits = bits.unwrap_or(1).clamp(1, 64) as u32;
            (BIT, bits as i32, Conv::Bit { bits })
        }
        // A snapshot reads ENUM and SET as their text.
        "enum" | "set" => (TEXT, -1, text(Some("utf8mb4"))),
        "json" => (JSONB, -1, Conv::Json),
        "uuid" => (UUID, -1, Conv::Uuid { record: false }),
        "inet4" => (
            INET,
            -1,
            Conv::Inet {
                len: 4,
                record: false,
            },
        ),
        "inet6" => (
            INET,
            -1,
            Conv::Inet {
                len: 16,
                record: false,
            },
        ),
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" if json => {
            (JSONB, -1, text(charset))
        }
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => {
            (TEXT, -1, text(charset))
        }
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "geometry"
        | "point" | "linestring" | "polygon" | "multipoint" | "multilinestring"
        | "multipolygon" | "geometrycollection" => (BYTEA, -1, Conv::Bytes { pad: None }),
        _ => return None,
    })
}

/// The PostgreSQL type and conversion of column `i` of a table map.
pub(super) fn map_binlog_type(
    column_type: ColumnType,
    meta: &[u8],
    unsigned: bool,
    charset: Option<&str>,
    declared: Option<Declared>,
    enum_values: Option<Arc<[String]>>,
    set_values: Option<Arc<[String]>>,
) -> (u32, i32, Conv) {
    use ColumnType::*;
    let meta_at = |i: usize| usize::from(meta.get(i).copied().unwrap_or(0));
    match column_type {
        MYSQL_TYPE_TINY => (INT2, -1, Conv::Integer),
        MYSQL_TYPE_SHORT if unsigned => (INT4, -1, Conv::Integer),
        MYSQL_TYPE_SHORT => (INT2, -1, Conv::Integer),
        MYSQL_TYPE_INT24 if unsigned => (INT4, -1, Conv::Integer),
        MYSQL_TYPE_INT24 => (INT4, -1, Conv::Int24),
        MYSQL_TYPE_LONG if unsigned => (INT8, -1, Conv::Integer),
        MYSQL_TYPE_LONG => (INT4, -1, Conv::Integer),
        MYSQL_TYPE_LONGLONG if unsigned => (NUMERIC, -1, Conv::Integer),
        MYSQL_TYPE_LONGLONG => (INT8, -1, Conv::Integer),
        MYSQL_TYPE_NEWDECIMAL | MYSQL_TYPE_DECIMAL => (NUMERIC, -1, Conv::Decimal),
        MYSQL_TYPE_FLOAT => (FLOAT4, -1, Conv::Float),
        MYSQL_TYPE_DOUBLE => (FLOAT8, -1, Conv::Double),
        MYSQL_TYPE_YEAR => (INT2, -1, Conv::Year),
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE => (DATE, -1, Conv::Date),
        MYSQL_TYPE_TIME | MYSQL_TYPE_TIME2 => (INTERVAL, -1, Conv::Time),
        MYSQL_TYPE_DATETIME | MYSQL_TYPE_DATETIME2 => (TIMESTAMP, -1, Conv::DateTime),
        MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIMESTAMP2 => {
            (TIMESTAMPTZ, -1, Conv::Timestamp { epoch: true })
        }
        MYSQL_TYPE_BIT => {
            let bits = (meta_at(1) * 8 + meta_at(0)).clamp(1, 64) as u32;
            (BIT, bits as i32, Conv::Bit { bits })
        }
        MYSQL_TYPE_ENUM => (TEXT, -1, enum_values.map_or(Conv::Unsupported, Conv::Enum)),
        MYSQL_TYPE_SET => (TEXT, -1, set_values.map_or(Conv::Unsupported, Conv::Set)),
        MYSQL_TYPE_JSON => (JSONB, -1, Conv::Json),
        MYSQL_TYPE_GEOMETRY => (BYTEA, -1, Conv::Bytes { pad: None }),
        MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_VAR_STRING
        | MYSQL_TYPE_STRING
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB => match charset {
            Some("binary") if declared == Some(Declared::Uuid) => {
                (UUID, -1, Conv::Uuid { record: true })
            }
            Some("binary") if matches!(declared, Some(Declared::Inet4 | Declared::Inet6)) => {
                let len = if declared == Some(Declared::Inet4) {
                    4
                } else {
                    16
                };
                (INET, -1, Conv::Inet { len, record: true })
            }
            Some("binary") => {
                let pad = (column_type == MYSQL_TYPE_STRING).then(|| string_length(meta));
                (BYTEA, -1, Conv::Bytes { pad })
            }
            other => {
                let conv = Conv::Text {
                    charset: charset_of(other.unwrap_or("utf8mb4")),
                };
                let json = declared == Some(Declared::Json);
                (if json { JSONB } else { TEXT }, -1, conv)
            }
        },
        _ => (TEXT, -1, Conv::Unsupported),
    }
}

/// A CHAR/BINARY column's length in bytes from its table-map metadata.
fn string_length(meta: &[u8]) -> usize {
    let byte0 = usize::from(meta.first().copied().unwrap_or(0));
    let byte1 = usize::from(meta.get(1).copied().unwrap_or(0));
    if (byte0 & 0x30) != 0x30 {
        byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    } else {
        byte1
    }
}

/// cp1252's 0x80..0x9F (MySQL's latin1), the rest being Latin-1.
const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{81}', '\u{201A}', '\u{192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{2C6}', '\u{2030}', '\u{160}', '\u{2039}', '\u{152}', '\u{8D}', '\u{17D}', '\u{8F}',
    '\u{90}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{2DC}', '\u{2122}', '\u{161}', '\u{203A}', '\u{153}', '\u{9D}', '\u{17E}', '\u{178}',
];

fn latin1_to_utf8(bytes: &[u8]) -> Vec<u8> {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        out.push(match b {
            0x80..=0x9F => CP1252_HIGH[usize::from(b - 0x80)],
            _ => char::from(b),
        });
    }
    out.into_bytes()
}

fn hex_bytea(bytes: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(2 + bytes.len() * 2);
    out.extend_from_slice(b"\\x");
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
    out
}

/// `.ffffff` without trailing zeros, empty for none.
pub(super) fn fraction(micros: u32) -> String {
    if micros == 0 {
        return String::new();
    }
    let digits = format!(".{micros:06}");
    digits.trim_end_matches('0').to_string()
}

/// Appends `v` in decimal, zero-padded to `width` digits.
fn push_padded(out: &mut Vec<u8>, v: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = v;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for _ in (digits.len() - at)..width {
        out.push(b'0');
    }
    out.extend_from_slice(&digits[at..]);
}

/// `YYYY-MM-DD HH:MI:SS`, the fraction as [`fraction`] writes it, then
/// `zone`: what `format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}{}",
/// fraction(us))` gives, without the formatter (once per value of every
/// row the binlog sends).
#[allow(clippy::too_many_arguments)]
pub(super) fn datetime_text(
    y: i64,
    mo: u32,
    d: u32,
    h: u32,
    mi: u32,
    s: u32,
    us: u32,
    zone: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    if y < 0 {
        out.push(b'-');
    }
    push_padded(&mut out, y.unsigned_abs(), if y < 0 { 3 } else { 4 });
    out.push(b'-');
    push_padded(&mut out, mo.into(), 2);
    out.push(b'-');
    push_padded(&mut out, d.into(), 2);
    out.push(b' ');
    push_padded(&mut out, h.into(), 2);
    out.push(b':');
    push_padded(&mut out, mi.into(), 2);
    out.push(b':');
    push_padded(&mut out, s.into(), 2);
    if us != 0 {
        let mut frac = [0u8; 6];
        let mut rest = us;
        for digit in frac.iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        let len = 6 - frac.iter().rev().take_while(|b| **b == b'0').count();
        out.push(b'.');
        out.extend_from_slice(&frac[..len]);
    }
    out.extend_from_slice(zone);
    out
}

/// Whether year `y`, month `m`, day `d` is a date PostgreSQL has. MySQL
/// stores dates with a zero year, month or day (`2024-00-15`, `0000-00-00`)
/// unless `sql_mode` has `NO_ZERO_IN_DATE` and `NO_ZERO_DATE`, and days
/// past their month's end (`2024-02-31`) with `ALLOW_INVALID_DATES`; they
/// are sent as NULL, as zero dates are.
fn real_date(y: u16, m: u8, d: u8) -> bool {
    let leap = y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400));
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    y != 0 && (1..=days).contains(&d)
}

fn int_text(value: &Value) -> Option<String> {
    match value {
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        Value::Bytes(b) => std::str::from_utf8(b).ok().map(str::to_string),
        _ => None,
    }
}

/// One value's text form for the mapped PostgreSQL type; `Ok(None)` for
/// NULL (and zero dates); `Err` says what could not be converted.
pub(super) fn value_text(
    value: Value,
    conv: &Conv,
) -> std::result::Result<Option<Vec<u8>>, String> {
    if value == Value::NULL {
        return Ok(None);
    }
    let unexpected = |value: &Value| format!("unexpected value {value:?} for {conv:?}");
    let text: Vec<u8> = match conv {
        Conv::Integer | Conv::Decimal => match value {
            Value::Bytes(b) => b,
            other => int_text(&other)
                .ok_or_else(|| unexpected(&other))?
                .into_bytes(),
        },
        Conv::Float => match value {
            Value::Float(f) => f.to_string().into_bytes(),
            Value::Double(f) => (f as f32).to_string().into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Double => match value {
            Value::Double(f) => f.to_string().into_bytes(),
            Value::Float(f) => f64::from(f).to_string().into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Int24 => match value {
            Value::Int(v) if v >= 1 << 23 => (v - (1 << 24)).to_string().into_bytes(),
            other => int_text(&other)
                .ok_or_else(|| unexpected(&other))?
                .into_bytes(),
        },
        Conv::Year => {
            let year = int_text(&value).ok_or_else(|| unexpected(&value))?;
            // The binlog's byte 0 is year 0000, which mysql_common reads
            // as 1900 (not a valid YEAR otherwise).
            if year == "1900" {
                "0".to_string()
            } else {
                year
            }
            .into_bytes()
        }
        Conv::Date => match value {
            Value::Date(y, m, d, ..) if !real_date(y, m, d) => return Ok(None),
            Value::Date(y, m, d, ..) => format!("{y:04}-{m:02}-{d:02}").into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::DateTime => match value {
            Value::Date(y, m, d, ..) if !real_date(y, m, d) => return Ok(None),
            Value::Date(y, mo, d, h, mi, s, us) => {
                let (mo, d, h, mi, s) = (mo.into(), d.into(), h.into(), mi.into(), s.into());
                datetime_text(y.into(), mo, d, h, mi, s, us, b"")
            }
            other => return Err(unexpected(&other)),
        },
        Conv::Timestamp { epoch: true } => {
            let Value::Bytes(b) = &value else {
                return Err(unexpected(&value));
            };
            let text = std::str::from_utf8(b).map_err(|_| unexpected(&value))?;
            let (secs, micros) = text.split_once('.').unwrap_or((text, "0"));
            let secs: i64 = secs.parse().map_err(|_| unexpected(&value))?;
            let micros: u32 = micros.parse().map_err(|_| unexpected(&value))?;
            if secs == 0 && micros == 0 {
                return Ok(None);
            }
            let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
            let t = secs.rem_euclid(86_400) as u32;
            datetime_text(y, mo, d, t / 3600, t % 3600 / 60, t % 60, micros, b"+00")
        }
        Conv::Timestamp { epoch: false } => match value {
            Value::Date(y, m, d, ..) if !real_date(y, m, d) => return Ok(None),
            Value::Date(y, mo, d, h, mi, s, us) => {
                let (mo, d, h, mi, s) = (mo.into(), d.into(), h.into(), mi.into(), s.into());
                datetime_text(y.into(), mo, d, h, mi, s, us, b"+00")
            }
            other => return Err(unexpected(&other)),
        },
        Conv::Time => match value {
            Value::Time(negative, days, h, m, s, us) => format!(
                "{}{:02}:{m:02}:{s:02}{}",
                if negative { "-" } else { "" },
                u64::from(days) * 24 + u64::from(h),
                fraction(us)
            )
            .into_bytes(),
            other => return Err(unexpected(&other)),
        },
        Conv::Bit { bits } => {
            let bytes = match value {
                Value::Bytes(b) => b,
                Value::Int(i) => i.to_be_bytes().to_vec(),
                Value::UInt(u) => u.to_be_bytes().to_vec(),
                other => return Err(unexpected(&other)),
            };
            let total = bytes.len() * 8;
            let bits = *bits as usize;
            (0..bits)
                .map(|i| {
                    // The last `bits` bits, most significant first.
                    let at = (total + i).checked_sub(bits);
                    let set = at.is_some_and(|at| bytes[at / 8] & (0x80 >> (at % 8)) != 0);
                    if set { b'1' } else { b'0' }
                })
                .collect()
        }
        Conv::Text { charset } => {
            let Value::Bytes(b) = value else {
                return Err(unexpected(&value));
            };
            match charset {
                Charset::Utf8 => match String::from_utf8(b) {
                    Ok(s) => s.into_bytes(),
                    Err(_) => return Err("a text value is not valid UTF-8".into()),
                },
                Charset::Latin1 => latin1_to_utf8(&b),
                Charset::Other => {
                    return Err("a text value is in a charset evolve does not convert".into());
                }
            }
        }
        Conv::Bytes { pad } => {
            let Value::Bytes(mut b) = value else {
                return Err(unexpected(&value));
            };
            if let Some(n) = pad
                && b.len() < *n
            {
                b.resize(*n, 0);
            }
            hex_bytea(&b)
        }
        Conv::Enum(names) => match value {
            Value::Int(0) | Value::UInt(0) => Vec::new(),
            Value::Int(i) => names
                .get(usize::try_from(i - 1).unwrap_or(usize::MAX))
                .ok_or_else(|| format!("ENUM index {i} is out of range"))?
                .clone()
                .into_bytes(),
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Set(names) => match value {
            Value::Bytes(b) => {
                let mut members = Vec::new();
                for (i, name) in names.iter().enumerate() {
                    if b.get(i / 8).is_some_and(|byte| byte & (1 << (i % 8)) != 0) {
                        members.push(name.as_str());
                    }
                }
                members.join(",").into_bytes()
            }
            other => return Err(unexpected(&other)),
        },
        Conv::Json => match value {
            Value::Bytes(b) => b,
            other => return Err(unexpected(&other)),
        },
        Conv::Uuid { record } => {
            let Value::Bytes(b) = value else {
                return Err(unexpected(&value));
            };
            let bytes = if *record {
                uuid_from_binlog(&b)
            } else {
                uuid_from_text(&b)
            }
            .ok_or_else(|| format!("{} is not a UUID", String::from_utf8_lossy(&b)))?;
            uuid_text(&bytes).into_bytes()
        }
        Conv::Inet { len, record } => {
            let Value::Bytes(mut b) = value else {
                return Err(unexpected(&value));
            };
            let address = if *record {
                // A fixed binary string: the binlog drops its trailing zero bytes.
                if b.len() > *len {
                    return Err(format!("{} bytes for an address of {len}", b.len()));
                }
                b.resize(*len, 0);
                match <[u8; 4]>::try_from(b.as_slice()) {
                    Ok(v4) => std::net::IpAddr::from(v4),
                    Err(_) => std::net::IpAddr::from(
                        <[u8; 16]>::try_from(b.as_slice())
                            .map_err(|_| format!("{} bytes for an address of {len}", b.len()))?,
                    ),
                }
            } else {
                std::str::from_utf8(&b)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        format!("{} is not an IP address", String::from_utf8_lossy(&b))
                    })?
            };
            inet_text(address).into_bytes()
        }
        Conv::Unsupported => return Err("a value of a type evolve does not map".into()),
    };
    Ok(Some(text))
}

/// A MariaDB UUID's bytes from the binlog: the server writes its
/// canonical byte order there (whatever order its records keep, so that
/// a UUID replicates into a BINARY(16)), without trailing zero bytes.
pub(super) fn uuid_from_binlog(bytes: &[u8]) -> Option<[u8; 16]> {
    if bytes.len() > 16 {
        return None;
    }
    let mut out = [0u8; 16];
    out[..bytes.len()].copy_from_slice(bytes);
    Some(out)
}

/// A UUID's bytes from its text (32 hex digits, dashes anywhere).
pub(super) fn uuid_from_text(text: &[u8]) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    let mut digits = text.iter().filter(|&&c| c != b'-');
    for byte in &mut out {
        let hi = char::from(*digits.next()?).to_digit(16)?;
        let lo = char::from(*digits.next()?).to_digit(16)?;
        *byte = (hi * 16 + lo) as u8;
    }
    digits.next().is_none().then_some(out)
}

/// PostgreSQL's text of a `uuid`: lowercase, `8-4-4-4-12`.
pub(super) fn uuid_text(bytes: &[u8; 16]) -> String {
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// PostgreSQL's text of an `inet` of a single address (no prefix shown):
/// IPv4 dotted; IPv6 in lowercase hex groups without leading zeros, the
/// first longest run of at least two zero groups as `::`, and the last 32
/// bits dotted when the address is IPv4-compatible (`::a.b.c.d`, six zero
/// groups before them) or IPv4-mapped (`::ffff:a.b.c.d`), as its
/// `inet_net_ntop` writes them.
pub(super) fn inet_text(address: std::net::IpAddr) -> String {
    let v6 = match address {
        std::net::IpAddr::V4(v4) => return v4.to_string(),
        std::net::IpAddr::V6(v6) => v6,
    };
    let words = v6.segments();
    // The first longest run of zero words, at least two long.
    // (first word, length) of zero runs.
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for (i, w) in words.iter().enumerate() {
        if *w == 0 {
            cur = Some(cur.map_or((i, 1), |(base, len)| (base, len + 1)));
        } else if let Some(c) = cur.take()
            && best.is_none_or(|b| c.1 > b.1)
        {
            best = Some(c);
        }
    }
    if let Some(c) = cur
        && best.is_none_or(|b| c.1 > b.1)
    {
        best = Some(c);
    }
    let best = best.filter(|b| b.1 >= 2);
    let mut out = String::with_capacity(40);
    for (i, w) in words.iter().enumerate() {
        if let Some((base, len)) = best
            && (base..base + len).contains(&i)
        {
            if i == base {
                out.push(':');
            }
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6
            && let Some((0, len)) = best
            && (len == 6 || (len == 5 && words[5] == 0xffff))
        {
            let o = v6.octets();
            out.push_str(&format!("{}.{}.{}.{}", o[12], o[13], o[14], o[15]));
            return out;
        }
        out.push_str(&format!("{w:x}"));
    }
    if best.is_some_and(|(base, len)| base + len == 8) {
        out.push(':');
    }
    out
}
