//! Confluent Schema Registry's errors: an HTTP status, an `error_code` and
//! a message, sent as `{"error_code":N,"message":"..."}`.

use serde::Serialize;

/// An error as the REST API reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message} (error {error_code})")]
pub struct ApiError {
    #[serde(skip)]
    pub status: u16,
    pub error_code: u32,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, error_code: u32, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            error_code,
            message: message.into(),
        }
    }

    /// A request body that is not JSON, or not of the expected shape.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, 400, message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            401,
            401,
            "Unauthorized: send HTTP basic credentials of a configured user",
        )
    }

    /// A request refused before it is read: a `Host` that is not the
    /// registry's, or a write from another site's page.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, 403, message)
    }

    pub fn not_found_path(path: &str) -> ApiError {
        ApiError::new(404, 404, format!("HTTP 404 Not Found: no endpoint {path}"))
    }

    /// A path or query parameter that Confluent declares as a Java `int`
    /// (an id, `offset`, `limit`) but that is not one: Jersey cannot
    /// convert it and answers 404 before the resource runs (JAX-RS maps a
    /// `@PathParam` or `@QueryParam` conversion failure to
    /// `NotFoundException`; rest-utils' `WebApplicationExceptionMapper`
    /// sends the status as the `error_code` and "HTTP 404 Not Found" as the
    /// message). The message starts with Confluent's and says which
    /// parameter was refused.
    pub fn param_not_found(name: &str, text: &str) -> ApiError {
        ApiError::new(
            404,
            404,
            format!(
                "HTTP 404 Not Found: {name} {text:?} is not a whole number between -2^31 and 2^31-1"
            ),
        )
    }

    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError::new(
            405,
            405,
            format!("HTTP 405 Method Not Allowed: {method} is not supported on {path}"),
        )
    }

    pub fn subject_not_found(subject: &str) -> ApiError {
        ApiError::new(404, 40401, format!("Subject '{subject}' not found."))
    }

    /// `DELETE /config/{subject}` of a subject without a configuration of
    /// its own: 40401, as Confluent answers.
    pub fn no_subject_config(subject: &str) -> ApiError {
        ApiError::new(
            404,
            40401,
            format!(
                "Subject '{subject}' not found: it has no configuration of its own to delete; \
                 GET /config/{subject}?defaultToGlobal=true shows the one that applies"
            ),
        )
    }

    /// `DELETE /mode/{subject}` of a subject without a mode of its own:
    /// 40401, as Confluent answers.
    pub fn no_subject_mode(subject: &str) -> ApiError {
        ApiError::new(
            404,
            40401,
            format!(
                "Subject '{subject}' not found: it has no mode of its own to delete; \
                 GET /mode/{subject}?defaultToGlobal=true shows the one that applies"
            ),
        )
    }

    pub fn version_not_found(subject: &str, version: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            404,
            40402,
            format!("Version {version} not found for subject '{subject}'."),
        )
    }

    pub fn schema_not_found(what: impl std::fmt::Display) -> ApiError {
        ApiError::new(404, 40403, format!("Schema {what} not found"))
    }

    pub fn subject_soft_deleted(subject: &str) -> ApiError {
        ApiError::new(
            404,
            40404,
            format!(
                "Subject '{subject}' was soft deleted. Set permanent=true to delete permanently"
            ),
        )
    }

    pub fn subject_not_soft_deleted(subject: &str) -> ApiError {
        ApiError::new(
            404,
            40405,
            format!(
                "Subject '{subject}' was not deleted first before being permanently deleted: \
                 delete it without permanent=true first"
            ),
        )
    }

    pub fn version_soft_deleted(subject: &str, version: u32) -> ApiError {
        ApiError::new(
            404,
            40406,
            format!(
                "Version {version} of subject '{subject}' was soft deleted. Set permanent=true to delete permanently"
            ),
        )
    }

    pub fn version_not_soft_deleted(subject: &str, version: u32) -> ApiError {
        ApiError::new(
            404,
            40407,
            format!(
                "Version {version} of subject '{subject}' was not deleted first before being \
                 permanently deleted: delete it without permanent=true first"
            ),
        )
    }

    pub fn subject_level_compatibility_not_configured(subject: &str) -> ApiError {
        ApiError::new(
            404,
            40408,
            format!(
                "Subject '{subject}' does not have subject-level compatibility configured; \
                 add defaultToGlobal=true to see the global level"
            ),
        )
    }

    pub fn subject_level_mode_not_configured(subject: &str) -> ApiError {
        ApiError::new(
            404,
            40409,
            format!(
                "Subject '{subject}' does not have subject-level mode configured; \
                 add defaultToGlobal=true to see the global mode"
            ),
        )
    }

    /// 409 with `error_code` 409 (Confluent through 8.0.3, Karapace) or
    /// 40901 (Confluent 8.0.4 and later), as configured.
    pub fn incompatible(code: u32, subject: &str, details: &[String]) -> ApiError {
        ApiError::new(
            409,
            code,
            format!(
                "Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: [{}]",
                details.join(", ")
            ),
        )
    }

    pub fn invalid_schema(message: impl Into<String>) -> ApiError {
        ApiError::new(422, 42201, message)
    }

    pub fn invalid_version(text: &str) -> ApiError {
        ApiError::new(
            422,
            42202,
            format!(
                "The specified version '{text}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
            ),
        )
    }

    pub fn invalid_compatibility_level(text: &str) -> ApiError {
        ApiError::new(
            422,
            42203,
            format!(
                "Invalid compatibility level {text:?}. Valid values are none, backward, forward, full, \
                 backward_transitive, forward_transitive, and full_transitive"
            ),
        )
    }

    pub fn invalid_mode(text: &str) -> ApiError {
        ApiError::new(
            422,
            42204,
            format!(
                "Invalid mode {text:?}. Valid values are READWRITE, READONLY, READONLY_OVERRIDE, and IMPORT"
            ),
        )
    }

    pub fn not_permitted(message: impl Into<String>) -> ApiError {
        ApiError::new(422, 42205, message)
    }

    /// Confluent's `RestReferenceExistsException`: its sentence names the
    /// version by its `SchemaKey` (`{magic=1,keytype=SCHEMA,subject=S,version=V}`);
    /// evolve adds the ids that refer to it.
    pub fn reference_exists(subject: &str, version: u32, by: &[u32]) -> ApiError {
        ApiError::new(
            422,
            42206,
            format!(
                "One or more references exist to the schema \
                 {{magic=1,keytype=SCHEMA,subject={subject},version={version}}}. \
                 Schema ids {by:?} refer to it; delete those versions first."
            ),
        )
    }

    pub fn id_mismatch(message: impl Into<String>) -> ApiError {
        ApiError::new(422, 42207, message)
    }

    pub fn invalid_subject(message: impl Into<String>) -> ApiError {
        ApiError::new(422, 42208, message)
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            422,
            42209,
            format!("Request body is larger than the limit of {limit} bytes (--max-body-bytes)"),
        )
    }

    /// A schema text over `--max-schema-bytes`: 422 with 42209, as
    /// Confluent answers a schema too large for its Kafka store ("Register
    /// operation failed because schema is too large").
    pub fn schema_too_large(operation: &str, size: usize, limit: usize) -> ApiError {
        ApiError::new(
            422,
            42209,
            format!(
                "{operation} operation failed because schema is too large: {size} bytes, more than the limit of {limit} bytes (--max-schema-bytes)"
            ),
        )
    }

    pub fn store(message: impl Into<String>) -> ApiError {
        ApiError::new(500, 50001, message)
    }

    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(500, 50002, message)
    }

    /// A write that could not be forwarded to the instance that writes a
    /// Kafka store (Confluent's "error while forwarding").
    pub fn forwarding(message: impl Into<String>) -> ApiError {
        ApiError::new(500, 50003, message)
    }

    /// No instance writes a Kafka store and this one may not (Confluent's
    /// "unknown leader").
    pub fn unknown_writer(message: impl Into<String>) -> ApiError {
        ApiError::new(500, 50004, message)
    }
}
