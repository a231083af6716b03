//! Throwaway certificates for clusters with TLS, made with the `openssl`
//! command line: a CA per cluster, a server certificate signed by it (or a
//! self-signed one), and client certificates on request.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::HarnessError;
use crate::os::RunAs;

/// How a cluster uses TLS: see [`Cluster::start_with`](crate::Cluster::start_with).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// The names the server's certificate is issued for (its
    /// subjectAltName): DNS names, or IP addresses. Default: `localhost`
    /// and `127.0.0.1`. The first one is also the certificate's CN.
    pub server_names: Vec<String>,
    /// Refuse sessions without TLS over TCP: `pg_hba.conf` gets `hostssl`
    /// lines only (for `replication` too). Default: `false`, both are
    /// accepted. Unix-socket sessions are always accepted.
    pub require: bool,
    /// Roles that must log in with a client certificate signed by the
    /// cluster's CA whose CN is the role's name (`pg_hba` method `cert`);
    /// see [`Cluster::client_certificate`](crate::Cluster::client_certificate).
    /// Default: none.
    pub cert_auth_users: Vec<String>,
    /// The server's certificate is self-signed and its own CA, as
    /// `openssl req -x509` makes one (`basicConstraints CA:TRUE`, the
    /// names in its subjectAltName): no separate CA is made, and
    /// [`Cluster::ca_cert`](crate::Cluster::ca_cert) is the server's
    /// certificate. Default: `false`, a CA signs the server's certificate.
    pub self_signed: bool,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            server_names: vec!["localhost".into(), "127.0.0.1".into()],
            require: false,
            cert_auth_users: Vec::new(),
            self_signed: false,
        }
    }
}

/// The files of a cluster's TLS, in `<cluster dir>/tls`.
#[derive(Debug)]
pub(crate) struct TlsFiles {
    pub(crate) dir: PathBuf,
    pub(crate) ca_cert: PathBuf,
    pub(crate) ca_key: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
    pub(crate) options: TlsOptions,
}

/// Extensions for each kind of certificate; `@SAN@` is replaced.
const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = evolve-test
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = @SAN@
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[self_signed]
basicConstraints = critical, CA:TRUE
subjectAltName = @SAN@
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// Certificates live for a week: longer than any test run.
const DAYS: &str = "7";

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

impl TlsFiles {
    /// Makes `<cluster_dir>/tls` with a fresh CA and a server certificate
    /// for `options.server_names` (or, under `self_signed`, a server
    /// certificate that is its own CA); the server's files are given to the
    /// server's user, the key readable by it alone (PostgreSQL insists).
    pub(crate) fn create(
        cluster_dir: &Path,
        options: &TlsOptions,
        run_as: Option<RunAs>,
    ) -> Result<TlsFiles, HarnessError> {
        if options.server_names.is_empty() {
            return Err(HarnessError::io(
                "make a server certificate",
                std::io::Error::other("TlsOptions::server_names is empty; give at least one name"),
            ));
        }
        let dir = cluster_dir.join("tls");
        std::fs::create_dir(&dir)
            .map_err(|e| HarnessError::io(format!("create directory {}", dir.display()), e))?;
        let san: Vec<String> = options
            .server_names
            .iter()
            .map(|n| match n.parse::<IpAddr>() {
                Ok(_) => format!("IP:{n}"),
                Err(_) => format!("DNS:{n}"),
            })
            .collect();
        let config = dir.join("openssl.cnf");
        write(&config, &OPENSSL_CONFIG.replace("@SAN@", &san.join(", ")))?;
        let (server_cert, server_key) = (dir.join("server.crt"), dir.join("server.key"));
        let (ca_cert, ca_key) = if options.self_signed {
            (server_cert.clone(), server_key.clone())
        } else {
            (dir.join("ca.crt"), dir.join("ca.key"))
        };
        let files = TlsFiles {
            ca_cert,
            ca_key,
            server_cert,
            server_key,
            dir,
            options: options.clone(),
        };
        if options.self_signed {
            files.self_signed(&options.server_names[0], &config)?;
        } else {
            files.ca(cluster_dir, &config)?;
            files.issue(
                &options.server_names[0],
                "server",
                &files.server_cert,
                &files.server_key,
            )?;
        }
        set_mode(&files.ca_key, 0o600)?;
        set_mode(&files.server_key, 0o600)?;
        if let Some(ids) = run_as {
            for path in [&files.server_cert, &files.server_key] {
                std::os::unix::fs::chown(path, Some(ids.uid), Some(ids.gid)).map_err(|e| {
                    HarnessError::io(format!("give {} to the postgres user", path.display()), e)
                })?;
            }
        }
        Ok(files)
    }

    /// The cluster's CA: a self-signed certificate and its key.
    fn ca(&self, cluster_dir: &Path, config: &Path) -> Result<(), HarnessError> {
        let subject = format!(
            "/CN=evolve-test CA {}",
            cluster_dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
        );
        let mut ca = openssl();
        ca.args(["req", "-x509", "-new"])
            .args(EC_KEY)
            .args([
                "-nodes",
                "-days",
                DAYS,
                "-subj",
                &subject,
                "-extensions",
                "ca",
            ])
            .arg("-config")
            .arg(config)
            .arg("-keyout")
            .arg(&self.ca_key)
            .arg("-out")
            .arg(&self.ca_cert);
        run(ca, "openssl req -x509 (the test CA)")
    }

    /// A self-signed server certificate for `cn` (and the configured
    /// names), which is its own CA.
    fn self_signed(&self, cn: &str, config: &Path) -> Result<(), HarnessError> {
        let mut req = openssl();
        req.args(["req", "-x509", "-new"])
            .args(EC_KEY)
            .args(["-nodes", "-days", DAYS, "-subj", &format!("/CN={cn}")])
            .args(["-extensions", "self_signed", "-set_serial", &serial()])
            .arg("-config")
            .arg(config)
            .arg("-keyout")
            .arg(&self.server_key)
            .arg("-out")
            .arg(&self.server_cert);
        run(
            req,
            &format!("openssl req -x509 (a self-signed server certificate for {cn})"),
        )
    }

    /// A certificate for `cn` signed by the CA, with extensions from
    /// section `kind` of the config, and its key.
    pub(crate) fn issue(
        &self,
        cn: &str,
        kind: &str,
        cert: &Path,
        key: &Path,
    ) -> Result<(), HarnessError> {
        let csr = cert.with_extension("csr");
        let config = self.dir.join("openssl.cnf");
        let mut req = openssl();
        req.args(["req", "-new"])
            .args(EC_KEY)
            .args(["-nodes", "-subj", &format!("/CN={cn}")])
            .arg("-config")
            .arg(&config)
            .arg("-keyout")
            .arg(key)
            .arg("-out")
            .arg(&csr);
        run(req, &format!("openssl req (a {kind} key for {cn})"))?;
        let mut sign = openssl();
        sign.args(["x509", "-req", "-days", DAYS, "-extensions", kind])
            .args(["-set_serial", &serial()])
            .arg("-in")
            .arg(&csr)
            .arg("-CA")
            .arg(&self.ca_cert)
            .arg("-CAkey")
            .arg(&self.ca_key)
            .arg("-extfile")
            .arg(&config)
            .arg("-out")
            .arg(cert);
        run(
            sign,
            &format!("openssl x509 -req (sign the {kind} certificate for {cn})"),
        )?;
        let _ = std::fs::remove_file(&csr);
        set_mode(key, 0o600)
    }

    /// The lines appended to postgresql.conf.
    pub(crate) fn settings(&self) -> String {
        format!(
            "ssl = on\n\
             ssl_cert_file = '{}'\n\
             ssl_key_file = '{}'\n\
             ssl_ca_file = '{}'\n",
            quote(&self.server_cert),
            quote(&self.server_key),
            quote(&self.ca_cert),
        )
    }

    /// The whole pg_hba.conf: Unix sockets trusted, TCP over TLS with
    /// `method` (certificate users with `cert`), plain TCP with `method`
    /// unless TLS is required.
    pub(crate) fn hba(&self, method: &str) -> String {
        let mut hba = String::from(
            "# evolve-test (TLS)\n\
             local all all trust\n\
             local replication all trust\n",
        );
        for user in &self.options.cert_auth_users {
            let user = hba_quote(user);
            hba.push_str(&format!(
                "hostssl all {user} 127.0.0.1/32 cert\n\
                 hostssl replication {user} 127.0.0.1/32 cert\n\
                 host all {user} 127.0.0.1/32 reject\n\
                 host replication {user} 127.0.0.1/32 reject\n"
            ));
        }
        hba.push_str(&format!(
            "hostssl all all 127.0.0.1/32 {method}\n\
             hostssl replication all 127.0.0.1/32 {method}\n"
        ));
        if !self.options.require {
            hba.push_str(&format!(
                "host all all 127.0.0.1/32 {method}\n\
                 host replication all 127.0.0.1/32 {method}\n"
            ));
        }
        hba
    }
}

const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

fn openssl() -> Command {
    let mut cmd = Command::new("openssl");
    cmd.stdin(Stdio::null());
    cmd
}

fn run(mut cmd: Command, what: &str) -> Result<(), HarnessError> {
    let out = cmd.output().map_err(|e| {
        HarnessError::io(
            format!(
                "run openssl, needed for clusters with TLS (install the openssl package): {what}"
            ),
            e,
        )
    })?;
    if out.status.success() {
        return Ok(());
    }
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Err(HarnessError::Tool {
        tool: what.to_string(),
        status: out.status,
        output,
    })
}

/// A serial number unique in this process and unlikely to repeat across
/// processes (the CA is fresh for each cluster anyway).
fn serial() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "0x{:x}{:04x}",
        nanos,
        NEXT_SERIAL.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}

fn write(path: &Path, text: &str) -> Result<(), HarnessError> {
    std::fs::write(path, text).map_err(|e| HarnessError::io(format!("write {}", path.display()), e))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), HarnessError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| HarnessError::io(format!("chmod {mode:o} {}", path.display()), e))
}

/// A path inside a postgresql.conf string literal.
fn quote(path: &Path) -> String {
    path.to_string_lossy().replace('\'', "''")
}

/// A role name in pg_hba.conf.
fn hba_quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hba_lines_follow_the_options() {
        let files = |options: TlsOptions| TlsFiles {
            dir: PathBuf::from("/d/tls"),
            ca_cert: PathBuf::from("/d/tls/ca.crt"),
            ca_key: PathBuf::from("/d/tls/ca.key"),
            server_cert: PathBuf::from("/d/tls/server.crt"),
            server_key: PathBuf::from("/d/tls/server.key"),
            options,
        };
        let both = files(TlsOptions::default()).hba("trust");
        assert!(both.contains("hostssl all all 127.0.0.1/32 trust\n"));
        assert!(both.contains("\nhost all all 127.0.0.1/32 trust\n"));
        let only = files(TlsOptions {
            require: true,
            cert_auth_users: vec!["app".into()],
            ..TlsOptions::default()
        })
        .hba("scram-sha-256");
        assert!(!only.contains("\nhost all all"), "{only}");
        assert!(only.contains("hostssl replication all 127.0.0.1/32 scram-sha-256\n"));
        let cert = only.find("hostssl all \"app\" 127.0.0.1/32 cert").unwrap();
        assert!(cert < only.find("hostssl all all").unwrap(), "{only}");
        let conf = files(TlsOptions::default()).settings();
        assert!(conf.contains("ssl = on\n") && conf.contains("ssl_key_file = '/d/tls/server.key'"));
    }
}
