//! Column types as the rules compare them, and which changes rewrite.

/// Lower case, single spaces, common aliases spelled one way
/// (`character varying(20)` and `VARCHAR (20)` are both `varchar(20)`).
pub(crate) fn normalize_type(ty: &str) -> String {
    let t = ty
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    let t = t.replace(" (", "(").replace(", ", ",").replace("( ", "(");
    let t = t.strip_prefix("pg_catalog.").unwrap_or(&t).to_string();
    for (alias, canonical) in [
        ("character varying", "varchar"),
        ("timestamp without time zone", "timestamp"),
        ("timestamp with time zone", "timestamptz"),
        ("time without time zone", "time"),
        ("time with time zone", "timetz"),
        ("double precision", "float8"),
        ("bit varying", "varbit"),
        ("character", "char"),
        ("decimal", "numeric"),
        ("integer", "int4"),
        ("bigint", "int8"),
        ("smallint", "int2"),
        ("boolean", "bool"),
        ("real", "float4"),
    ] {
        if let Some(rest) = t.strip_prefix(alias)
            && (rest.is_empty() || rest.starts_with('(') || rest.starts_with('['))
        {
            return format!("{canonical}{rest}");
        }
    }
    for (base, with, canonical) in [
        ("timestamp", " without time zone", "timestamp"),
        ("timestamp", " with time zone", "timestamptz"),
        ("time", " without time zone", "time"),
        ("time", " with time zone", "timetz"),
    ] {
        if let Some(mid) = t.strip_prefix(base).and_then(|r| r.strip_suffix(with)) {
            return format!("{canonical}{mid}");
        }
    }
    if t == "int" { "int4".into() } else { t }
}

/// Splits `varchar(20)` into ("varchar", [20]).
pub(crate) fn type_args(ty: &str) -> (&str, Vec<u32>) {
    match ty.split_once('(') {
        Some((base, rest)) => {
            let args = rest
                .trim_end_matches(')')
                .split(',')
                .filter_map(|a| a.trim().parse().ok())
                .collect();
            (base, args)
        }
        None => (ty, Vec::new()),
    }
}

/// Whether PostgreSQL rewrites the table to change a column from `old` to
/// `new` (both normalized): everything except the binary-coercible changes
/// it skips. `utc` says the session's TimeZone is UTC, under which
/// timestamp and timestamptz convert without a rewrite (PostgreSQL 12+).
pub(crate) fn rewrites(old: &str, new: &str, utc: bool) -> bool {
    if old == new {
        return false;
    }
    let (ob, oa) = type_args(old);
    let (nb, na) = type_args(new);
    let widened = || na.is_empty() || oa.first().zip(na.first()).is_some_and(|(o, n)| n >= o);
    // Fractional seconds: more of them, or the most there are (what a
    // column without a precision has), keep every value.
    let more_digits = || {
        widened()
            || na.first().is_some_and(|n| {
                i32::try_from(*n) == Ok(crate::migration::effects::MAX_TEMPORAL_PRECISION)
            })
    };
    match (ob, nb) {
        ("varchar", "varchar") | ("varbit", "varbit") => !widened(),
        ("varchar", "text") | ("text", "varchar") if na.is_empty() => false,
        ("char", "text" | "varchar") if na.is_empty() => true,
        ("numeric", "numeric") => {
            if na.is_empty() {
                return false;
            }
            if oa.is_empty() {
                return true;
            }
            let (op, os) = (oa[0], oa.get(1).copied().unwrap_or(0));
            let (np, ns) = (na[0], na.get(1).copied().unwrap_or(0));
            !(np >= op && ns == os)
        }
        ("timestamp", "timestamptz") | ("timestamptz", "timestamp") => !(utc && more_digits()),
        ("timestamp" | "timestamptz" | "time" | "timetz", _) if ob == nb => !more_digits(),
        ("cidr", "inet") => false,
        // citext's casts to and from text and varchar are binary-coercible
        // (CREATE CAST ... WITHOUT FUNCTION): no rewrite on PostgreSQL 15.
        ("citext", "text" | "varchar") | ("text" | "varchar", "citext") if na.is_empty() => false,
        _ => true,
    }
}

/// Whether a TimeZone setting has offset zero at every date, the condition
/// for a timestamp <-> timestamptz change without a rewrite.
pub(crate) fn is_utc(zone: &str) -> bool {
    matches!(
        zone.trim().to_ascii_lowercase().as_str(),
        "utc"
            | "etc/utc"
            | "gmt"
            | "etc/gmt"
            | "zulu"
            | "etc/zulu"
            | "uct"
            | "etc/uct"
            | "universal"
            | "etc/universal"
            | "z"
            | "+00"
            | "-00"
            | "00:00"
            | "+00:00"
    )
}

/// Names of built-in functions that are not VOLATILE (from `pg_proc` of
/// PostgreSQL 15: `provolatile <> 'v'`, the ones migrations use as defaults).
/// A default that calls any other function is taken as volatile, which is
/// also PostgreSQL's default for a function created without a volatility.
pub(crate) const NON_VOLATILE_FUNCTIONS: &[&str] = &[
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtimestamp",
    "localtime",
    "transaction_timestamp",
    "statement_timestamp",
    "timezone",
    "current_user",
    "session_user",
    "current_schema",
    "current_setting",
    "current_database",
    "user",
    "lower",
    "upper",
    "concat",
    "coalesce",
    "nullif",
    "greatest",
    "least",
    "to_jsonb",
    "to_json",
    "json_build_object",
    "jsonb_build_object",
    "json_build_array",
    "jsonb_build_array",
    "array",
    "make_date",
    "make_timestamp",
    "make_timestamptz",
    "make_interval",
    "to_timestamp",
    "to_date",
    "to_char",
    "date_trunc",
    "length",
    "abs",
    "round",
    "trim",
    "btrim",
    "replace",
    "md5",
    "encode",
    "decode",
    "uuid_nil",
    "date",
    "int4",
    "int8",
    "text",
    "numeric",
    "interval",
    "pg_catalog.now",
    // STABLE in pg_proc: one value per transaction.
    "txid_current",
    "pg_current_xact_id",
];

/// Functions known to be VOLATILE, named in the message.
pub(crate) const VOLATILE_FUNCTIONS: &[&str] = &[
    "random",
    "gen_random_uuid",
    "uuid_generate_v1",
    "uuid_generate_v1mc",
    "uuid_generate_v4",
    "uuidv4",
    "uuidv7",
    "clock_timestamp",
    "timeofday",
    "nextval",
    "gen_random_bytes",
];
