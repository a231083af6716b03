//! The imports Confluent Schema Registry resolves without a reference,
//! beside the `google/protobuf/*` well-known types protox bundles:
//! Confluent's own types and Google's common types (`google/type/*`).
//! Confluent's serializers never send these as references (the Python
//! client's `_is_builtin` skips every `confluent/`, `google/protobuf/` and
//! `google/type/` import), so a schema that imports one compiles only if
//! the registry has it.
//!
//! The list is Confluent's `ProtobufSchema.KNOWN_DEPENDENCIES`
//! (protobuf-provider, 7.9.x and master). Sources, both Apache License 2.0:
//! - `confluent/meta.proto`, `confluent/type/decimal.proto`,
//!   `confluent/type/variant.proto`: github.com/confluentinc/schema-registry,
//!   `protobuf-types/src/main/proto/` (master; `meta.proto` there is a
//!   superset of 7.9.x's, which lacks `Meta.rules` and `Rule`).
//! - `google/type/*.proto`: github.com/googleapis/googleapis, as shipped in
//!   the `googleapis-common-protos` 1.76.0 Python package (each file keeps
//!   its license header).

/// Import path → `.proto` text.
const FILES: &[(&str, &str)] = &[
    (
        "confluent/meta.proto",
        include_str!("bundled/confluent/meta.proto"),
    ),
    (
        "confluent/type/decimal.proto",
        include_str!("bundled/confluent/type/decimal.proto"),
    ),
    (
        "confluent/type/variant.proto",
        include_str!("bundled/confluent/type/variant.proto"),
    ),
    (
        "google/type/calendar_period.proto",
        include_str!("bundled/google/type/calendar_period.proto"),
    ),
    (
        "google/type/color.proto",
        include_str!("bundled/google/type/color.proto"),
    ),
    (
        "google/type/date.proto",
        include_str!("bundled/google/type/date.proto"),
    ),
    (
        "google/type/datetime.proto",
        include_str!("bundled/google/type/datetime.proto"),
    ),
    (
        "google/type/dayofweek.proto",
        include_str!("bundled/google/type/dayofweek.proto"),
    ),
    (
        "google/type/decimal.proto",
        include_str!("bundled/google/type/decimal.proto"),
    ),
    (
        "google/type/expr.proto",
        include_str!("bundled/google/type/expr.proto"),
    ),
    (
        "google/type/fraction.proto",
        include_str!("bundled/google/type/fraction.proto"),
    ),
    (
        "google/type/interval.proto",
        include_str!("bundled/google/type/interval.proto"),
    ),
    (
        "google/type/latlng.proto",
        include_str!("bundled/google/type/latlng.proto"),
    ),
    (
        "google/type/money.proto",
        include_str!("bundled/google/type/money.proto"),
    ),
    (
        "google/type/month.proto",
        include_str!("bundled/google/type/month.proto"),
    ),
    (
        "google/type/phone_number.proto",
        include_str!("bundled/google/type/phone_number.proto"),
    ),
    (
        "google/type/postal_address.proto",
        include_str!("bundled/google/type/postal_address.proto"),
    ),
    (
        "google/type/quaternion.proto",
        include_str!("bundled/google/type/quaternion.proto"),
    ),
    (
        "google/type/timeofday.proto",
        include_str!("bundled/google/type/timeofday.proto"),
    ),
];

/// The bundled text of import `name`, if it is one of [`FILES`].
pub(super) fn source(name: &str) -> Option<&'static str> {
    FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// Every bundled import path.
pub fn names() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|(name, _)| *name)
}
