//! Kafka client options: brokers, TLS and SASL, checked once and mapped to
//! librdkafka's settings the same way for every part of evolve that talks
//! to brokers (the pipeline's `kafka://` connections, the registry's
//! `--storage kafka://`).
//!
//! The option names are PostgreSQL's (`sslmode`, `sslrootcert`, `sslcert`,
//! `sslkey`) and SASL's (`sasl_mechanism`, `user`, `password`), so a
//! connection reads the same whatever it reaches. What each means:
//!
//! | option | librdkafka |
//! |---|---|
//! | `sslmode` `disable` (default) | `security.protocol` `plaintext` (`sasl_plaintext` with SASL) |
//! | `sslmode` `require` | `ssl`, `enable.ssl.certificate.verification` `false` |
//! | `sslmode` `verify-ca` | `ssl`, `ssl.endpoint.identification.algorithm` `none` |
//! | `sslmode` `verify-full` | `ssl`, `ssl.endpoint.identification.algorithm` `https` |
//! | `sslrootcert`, `sslcert`, `sslkey` | `ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location` |
//! | `sasl_mechanism`, `user`, `password` | `sasl.mechanisms`, `sasl.username`, `sasl.password` |
//!
//! The password never shows in `Debug` output or in a [`Problem`].

use std::fmt;
use std::path::PathBuf;

/// The `sslmode`s a Kafka connection takes.
pub const SSL_MODES: [&str; 4] = ["disable", "require", "verify-ca", "verify-full"];

/// The SASL mechanisms a Kafka connection takes (upper case; given in any
/// case).
pub const SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// TLS and SASL options of a Kafka client (and, in the pipeline, the
/// `user`, `password` and `sslrootcert` of a schema registry connection).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// `disable` (plain TCP, the default), `require` (TLS, certificate not
    /// checked), `verify-ca` (checked against `sslrootcert` or the system's
    /// roots) or `verify-full` (and the host name).
    pub sslmode: Option<String>,
    /// The CA certificates (PEM) that verify the brokers.
    pub sslrootcert: Option<PathBuf>,
    /// A client certificate (PEM), with `sslkey`.
    pub sslcert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub sslkey: Option<PathBuf>,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`, with `user` and
    /// `password`.
    pub sasl_mechanism: Option<String>,
    /// The SASL user.
    pub user: Option<String>,
    password: Option<String>,
}

/// What is wrong with a [`ClientOptions`]: the option (none when the
/// problem is between options) and a sentence that says what to do. It
/// never holds the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub option: Option<&'static str>,
    pub problem: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.option {
            Some(option) => write!(f, "{option}: {}", self.problem),
            None => f.write_str(&self.problem),
        }
    }
}

impl ClientOptions {
    /// The SASL password, for connecting only.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Options with a SASL password.
    pub fn with_password(mut self, password: impl Into<String>) -> ClientOptions {
        self.password = Some(password.into());
        self
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == ClientOptions::default()
    }

    /// Whether the connection uses TLS (an `sslmode` other than `disable`).
    pub fn tls(&self) -> bool {
        self.sslmode.as_deref().is_some_and(|m| m != "disable")
    }

    /// Checks the options of a Kafka connection, and writes the SASL
    /// mechanism in upper case: an `sslmode` and mechanism this knows, TLS
    /// files only with TLS, `sslcert` and `sslkey` together, and
    /// `sasl_mechanism`, `user` and `password` all three or none.
    pub fn check(&mut self) -> Result<(), Problem> {
        let problem = |option, problem: String| Err(Problem { option, problem });
        if let Some(mode) = &self.sslmode
            && !SSL_MODES.contains(&mode.as_str())
        {
            return problem(
                Some("sslmode"),
                format!("{mode:?} is not one of {}", SSL_MODES.join(", ")),
            );
        }
        let tls = self.tls();
        for (option, set) in [
            ("sslrootcert", self.sslrootcert.is_some()),
            ("sslcert", self.sslcert.is_some()),
            ("sslkey", self.sslkey.is_some()),
        ] {
            if set && !tls {
                return problem(
                    Some(option),
                    "it is set but sslmode is not; set sslmode to verify-full (or require, verify-ca) to use TLS"
                        .into(),
                );
            }
        }
        if self.sslcert.is_some() != self.sslkey.is_some() {
            return problem(
                None,
                "sslcert and sslkey go together; set both for a client certificate, or neither"
                    .into(),
            );
        }
        if let Some(m) = &self.sasl_mechanism {
            let upper = m.to_ascii_uppercase();
            if !SASL_MECHANISMS.contains(&upper.as_str()) {
                return problem(
                    Some("sasl_mechanism"),
                    format!("{m:?} is not one of {}", SASL_MECHANISMS.join(", ")),
                );
            }
            self.sasl_mechanism = Some(upper);
        }
        if self.sasl_mechanism.is_some() != (self.user.is_some() && self.password.is_some())
            || self.user.is_some() != self.password.is_some()
        {
            return problem(
                None,
                "sasl_mechanism, user and password go together; set all three for SASL, or none"
                    .into(),
            );
        }
        Ok(())
    }

    /// librdkafka's settings for these options, with `bootstrap.servers`
    /// `brokers` and `client.id` `client_id` (see the module's table).
    pub fn settings(&self, brokers: &str, client_id: &str) -> Vec<(&'static str, String)> {
        let mut settings = vec![
            ("bootstrap.servers", brokers.to_string()),
            ("client.id", client_id.to_string()),
            ("log_level", "3".to_string()),
        ];
        let tls = self.tls();
        let protocol = match (tls, self.sasl_mechanism.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        settings.push(("security.protocol", protocol.to_string()));
        if tls {
            settings.push(match self.sslmode.as_deref() {
                Some("require") => ("enable.ssl.certificate.verification", "false".into()),
                Some("verify-ca") => ("ssl.endpoint.identification.algorithm", "none".into()),
                _ => ("ssl.endpoint.identification.algorithm", "https".into()),
            });
            for (key, file) in [
                ("ssl.ca.location", &self.sslrootcert),
                ("ssl.certificate.location", &self.sslcert),
                ("ssl.key.location", &self.sslkey),
            ] {
                if let Some(file) = file {
                    settings.push((key, file.to_string_lossy().into_owned()));
                }
            }
        }
        if let Some(mechanism) = &self.sasl_mechanism {
            settings.push(("sasl.mechanisms", mechanism.clone()));
            settings.push(("sasl.username", self.user.clone().unwrap_or_default()));
            settings.push(("sasl.password", self.password.clone().unwrap_or_default()));
        }
        settings
    }
}

impl fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientOptions")
            .field("sslmode", &self.sslmode)
            .field("sslrootcert", &self.sslrootcert)
            .field("sslcert", &self.sslcert)
            .field("sslkey", &self.sslkey)
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Checks `host:port[,host:port...]`, each host non-empty and each port a
/// number from 1 to 65535. A problem names the broker that is wrong and
/// shows `example` as the way to write it; user information before the
/// hosts (`user:password@`) is refused without repeating it, with
/// `credentials` saying where they go instead.
pub fn check_brokers(brokers: &str, example: &str, credentials: &str) -> Result<(), String> {
    if brokers.is_empty() {
        return Err(format!("kafka:// names no broker; write {example}"));
    }
    // Neither is repeated: user information or options may hold a
    // password.
    if brokers.contains('@') {
        return Err(format!(
            "a kafka:// url takes no user or password before the host; {credentials}"
        ));
    }
    if brokers.contains('?') {
        return Err(format!(
            "a kafka:// url here takes no options after '?'; {credentials}"
        ));
    }
    for broker in brokers.split(',') {
        let ok = broker.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && !host.contains(['/', '@', '?', ' '])
                && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !ok {
            return Err(format!(
                "{:?} is not host:port; write {example}",
                broker.chars().take(80).collect::<String>()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(f: impl FnOnce(&mut ClientOptions)) -> ClientOptions {
        let mut o = ClientOptions::default();
        f(&mut o);
        o
    }

    fn setting<'a>(settings: &'a [(&'static str, String)], key: &str) -> Option<&'a str> {
        settings
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn each_sslmode_and_sasl_maps_to_its_librdkafka_settings() {
        let plain = ClientOptions::default().settings("a:1,b:2", "evolve-test");
        assert_eq!(setting(&plain, "bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(setting(&plain, "client.id"), Some("evolve-test"));
        assert_eq!(setting(&plain, "security.protocol"), Some("plaintext"));
        assert_eq!(
            setting(&plain, "ssl.endpoint.identification.algorithm"),
            None
        );

        for (mode, key, value) in [
            ("require", "enable.ssl.certificate.verification", "false"),
            ("verify-ca", "ssl.endpoint.identification.algorithm", "none"),
            (
                "verify-full",
                "ssl.endpoint.identification.algorithm",
                "https",
            ),
        ] {
            let o = options(|o| {
                o.sslmode = Some(mode.into());
                o.sslrootcert = Some("/ca.pem".into());
            });
            let s = o.settings("a:1", "c");
            assert_eq!(setting(&s, "security.protocol"), Some("ssl"), "{mode}");
            assert_eq!(setting(&s, key), Some(value), "{mode}");
            assert_eq!(setting(&s, "ssl.ca.location"), Some("/ca.pem"), "{mode}");
        }

        let mut o = options(|o| {
            o.sslmode = Some("verify-full".into());
            o.sasl_mechanism = Some("scram-sha-256".into());
            o.user = Some("ev".into());
        })
        .with_password("s3cret");
        o.check().expect("valid");
        let s = o.settings("a:1", "c");
        assert_eq!(setting(&s, "security.protocol"), Some("sasl_ssl"));
        assert_eq!(setting(&s, "sasl.mechanisms"), Some("SCRAM-SHA-256"));
        assert_eq!(setting(&s, "sasl.username"), Some("ev"));
        assert_eq!(setting(&s, "sasl.password"), Some("s3cret"));
        assert!(!format!("{o:?}").contains("s3cret"));

        let o = options(|o| o.sslmode = Some("disable".into()));
        let s = o.settings("a:1", "c");
        assert_eq!(setting(&s, "security.protocol"), Some("plaintext"));
    }

    #[test]
    fn bad_options_name_the_option_and_never_the_password() {
        let cases: [(ClientOptions, Option<&str>, &str); 6] = [
            (
                options(|o| o.sslmode = Some("on".into())),
                Some("sslmode"),
                "\"on\" is not one of disable, require, verify-ca, verify-full",
            ),
            (
                options(|o| o.sslrootcert = Some("/ca.pem".into())),
                Some("sslrootcert"),
                "sslmode is not",
            ),
            (
                options(|o| {
                    o.sslmode = Some("require".into());
                    o.sslcert = Some("/c.pem".into());
                }),
                None,
                "sslcert and sslkey go together",
            ),
            (
                options(|o| {
                    o.sasl_mechanism = Some("GSSAPI".into());
                    o.user = Some("u".into());
                })
                .with_password("secret"),
                Some("sasl_mechanism"),
                "is not one of PLAIN",
            ),
            (
                options(|o| o.user = Some("u".into())).with_password("secret"),
                None,
                "go together",
            ),
            (
                options(|o| o.sasl_mechanism = Some("PLAIN".into())),
                None,
                "go together",
            ),
        ];
        for (mut o, option, expected) in cases {
            let p = o.check().expect_err(expected);
            assert_eq!(p.option, option, "{p}");
            assert!(p.problem.contains(expected), "{p}");
            assert!(!p.to_string().contains("secret"), "{p}");
        }
    }

    #[test]
    fn brokers_are_host_port_lists() {
        let check = |b: &str| check_brokers(b, "kafka://host:port", "put them elsewhere");
        assert!(check("a:1").is_ok());
        assert!(check("a:1,[::1]:9092").is_ok());
        for (bad, expected) in [
            ("", "names no broker; write kafka://host:port"),
            (
                "u:secret@a:1",
                "takes no user or password before the host; put them",
            ),
            (
                "a:1?sasl_mechanism=PLAIN&user=u&password=secret",
                "takes no options after '?'; put them",
            ),
            ("a", "\"a\" is not host:port"),
            ("a:0", "is not host:port"),
            ("a:99999", "is not host:port"),
            (":1", "is not host:port"),
            ("a:1,", "\"\" is not host:port"),
            ("a b:1", "is not host:port"),
        ] {
            let e = check(bad).expect_err(bad);
            assert!(e.contains(expected), "{bad}: {e}");
            assert!(!e.contains("secret"), "{bad}: {e}");
        }
    }
}
