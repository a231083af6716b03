//! HTTP basic auth for the registry: a users file of `name:hash` lines,
//! each hash an argon2 PHC string (`$argon2id$...`) or a bcrypt hash
//! (`$2b$...`). Passwords are never stored or logged; a verified
//! `Authorization` header is remembered (in memory, bounded) so that a
//! client does not pay for a slow hash on every request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderMap, header};
use base64::Engine;

/// How many verified credentials are remembered.
const CACHE_LIMIT: usize = 1024;

/// The configured users. `Debug` shows names only.
pub struct Users {
    hashes: HashMap<String, String>,
    verified: Mutex<HashMap<String, String>>,
    /// Password hashes computed, known user or not.
    hashed: AtomicU64,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.hashes.keys().collect();
        names.sort();
        f.debug_struct("Users").field("names", &names).finish()
    }
}

impl Users {
    /// Reads a users file's text. Errors name the line and say what is
    /// wrong, never echoing a hash.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut hashes = HashMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((name, hash)) = line.split_once(':') else {
                return Err(format!(
                    "line {}: expected NAME:HASH (an argon2 or bcrypt hash)",
                    number + 1
                ));
            };
            if name.is_empty() {
                return Err(format!("line {}: the user name is empty", number + 1));
            }
            if !(hash.starts_with("$argon2") || is_bcrypt(hash)) {
                return Err(format!(
                    "line {}: the hash of user {name:?} is neither argon2 ($argon2id$...) nor bcrypt ($2b$...); \
                     plain-text passwords are not accepted",
                    number + 1
                ));
            }
            if hashes.insert(name.to_owned(), hash.to_owned()).is_some() {
                return Err(format!("line {}: user {name:?} appears twice", number + 1));
            }
        }
        if hashes.is_empty() {
            return Err("the users file names no user".into());
        }
        Ok(Users {
            hashes,
            verified: Mutex::new(HashMap::new()),
            hashed: AtomicU64::new(0),
        })
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// How many password hashes requests have cost: one per request that
    /// is not answered from the cache, whether its user exists or not.
    pub fn hashes_computed(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The user a request's basic credentials belong to, if they verify.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<String> {
        let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        if let Some(user) = self.verified.lock().ok()?.get(value) {
            return Some(user.clone());
        }
        // The scheme's name is case-insensitive (RFC 9110, 11.1).
        let (scheme, encoded) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (name, password) = decoded.split_once(':')?;
        let Some(hash) = self.hashes.get(name) else {
            // The same work as for a user the file has, whose outcome is
            // thrown away: answering an unknown name at once would tell
            // which names exist (400 ms against 1 ms with argon2).
            if let Some(any) = self.hashes.values().next() {
                self.hashed.fetch_add(1, Ordering::Relaxed);
                let _ = verify(password, any);
            }
            return None;
        };
        self.hashed.fetch_add(1, Ordering::Relaxed);
        if !verify(password, hash) {
            return None;
        }
        if let Ok(mut cache) = self.verified.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(value.to_owned(), name.to_owned());
        }
        Some(name.to_owned())
    }
}

fn is_bcrypt(hash: &str) -> bool {
    ["$2a$", "$2b$", "$2x$", "$2y$"]
        .iter()
        .any(|p| hash.starts_with(p))
}

fn verify(password: &str, hash: &str) -> bool {
    if is_bcrypt(hash) {
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    match PasswordHash::new(hash) {
        Ok(parsed) => argon2::Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// An argon2id hash of `password` with a random salt, for `evolve registry
/// hash-password`.
pub fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let mut salt = [0u8; 16];
    getrandom(&mut salt)?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| e.to_string())?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

fn getrandom(buf: &mut [u8]) -> Result<(), String> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(|e| format!("cannot read random bytes for a salt: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {token}").parse().unwrap(),
        );
        headers
    }

    #[test]
    fn argon2_and_bcrypt_users_verify_and_others_do_not() {
        let argon = hash_password("s3cret").expect("hash");
        let bcrypt_hash = bcrypt::hash("hunter2", 4).expect("bcrypt");
        let users =
            Users::parse(&format!("# users\nalice:{argon}\nbob:{bcrypt_hash}\n")).expect("parse");
        assert_eq!(users.len(), 2);
        assert_eq!(
            users.authenticate(&basic("alice", "s3cret")).as_deref(),
            Some("alice")
        );
        // Twice: the second answer comes from the cache.
        assert_eq!(
            users.authenticate(&basic("alice", "s3cret")).as_deref(),
            Some("alice")
        );
        assert_eq!(
            users.authenticate(&basic("bob", "hunter2")).as_deref(),
            Some("bob")
        );
        assert_eq!(users.authenticate(&basic("alice", "wrong")), None);
        // The scheme's name in any case; another scheme is not basic.
        for scheme in ["BASIC", "bAsIc", "Bearer"] {
            let mut headers = basic("bob", "hunter2");
            let value = headers[header::AUTHORIZATION].to_str().unwrap().to_string();
            let token = value.split_once(' ').unwrap().1;
            headers.insert(
                header::AUTHORIZATION,
                format!("{scheme} {token}").parse().unwrap(),
            );
            assert_eq!(
                users.authenticate(&headers).is_some(),
                scheme != "Bearer",
                "{scheme}"
            );
        }
        // An unknown user costs a hash too, so the time of the answer does
        // not tell which names exist.
        let before = users.hashes_computed();
        assert_eq!(users.authenticate(&basic("carol", "s3cret")), None);
        assert_eq!(users.hashes_computed(), before + 1);
        assert_eq!(users.authenticate(&HeaderMap::new()), None);
    }

    #[test]
    fn bad_users_files_name_the_line() {
        assert!(
            Users::parse("alice:plaintext")
                .unwrap_err()
                .contains("line 1")
        );
        assert!(Users::parse("\nnocolon").unwrap_err().contains("line 2"));
        assert!(Users::parse("# nobody").is_err());
    }
}
