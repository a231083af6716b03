//! The encoding of an interface's feed in the state store: one record per
//! interface and upstream transaction (split into parts of at most
//! [`PART_BYTES`]), holding that transaction's changes to the interface in
//! order. The source appends one record per transaction instead of one
//! row per changed key, and pruning deletes one record per transaction.
//!
//! A part is the concatenation of its entries, each
//!
//! ```text
//! key_len u32 LE | key | old_len u32 LE | old | new_len u32 LE | new
//! ```
//!
//! where a length of `u32::MAX` stands for an absent document (no `old`
//! for an insert, no `new` for a delete) and is followed by no bytes.
//! Decoding checks every length against what is left, so a damaged record
//! is an error, never a panic or a read past its end.

/// A part is closed once its encoded entries reach this many bytes (one
/// entry larger than that makes a part of its own).
pub const PART_BYTES: usize = 1 << 20;

const ABSENT: u32 = u32::MAX;

/// Appends one entry to `buf`. Fails, leaving `buf` as it was, for a key
/// or document of 4 GiB or more (the store's rows cannot hold one: SQLite
/// values end at 1 GB).
pub fn encode_entry(
    buf: &mut Vec<u8>,
    key: &[u8],
    old: Option<&[u8]>,
    new: Option<&[u8]>,
) -> Result<(), String> {
    for b in [Some(key), old, new].into_iter().flatten() {
        if u32::try_from(b.len()).map_or(true, |len| len == ABSENT) {
            return Err(format!("a feed entry of {} bytes is too large", b.len()));
        }
    }
    buf.reserve(12 + key.len() + old.map_or(0, <[u8]>::len) + new.map_or(0, <[u8]>::len));
    put(buf, Some(key));
    put(buf, old);
    put(buf, new);
    Ok(())
}

fn put(buf: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
            buf.extend_from_slice(b);
        }
        None => buf.extend_from_slice(&ABSENT.to_le_bytes()),
    }
}

/// A key or document too large for a feed entry (see [`encode_entry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge(pub String);

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TooLarge {}

impl From<TooLarge> for rusqlite::Error {
    fn from(e: TooLarge) -> Self {
        rusqlite::Error::ToSqlConversionFailure(Box::new(e))
    }
}

impl From<TooLarge> for crate::error::PipelineError {
    fn from(e: TooLarge) -> Self {
        crate::error::PipelineError::Store {
            context: "write the change feed".into(),
            message: e.0,
        }
    }
}

/// One record's parts as its entries are pushed in order: each part that
/// reaches [`PART_BYTES`], and at [`Parts::finish`] the rest, goes to
/// `write` with its number (from 0) and its count of entries.
#[derive(Debug, Default)]
pub struct Parts {
    buf: Vec<u8>,
    part: i64,
    entries: i64,
}

impl Parts {
    /// Adds one entry to the record being built.
    pub fn push<E: From<TooLarge>>(
        &mut self,
        key: &[u8],
        old: Option<&[u8]>,
        new: Option<&[u8]>,
        write: &mut impl FnMut(i64, i64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        encode_entry(&mut self.buf, key, old, new).map_err(TooLarge)?;
        self.entries += 1;
        if self.buf.len() >= PART_BYTES {
            self.flush(write)?;
        }
        Ok(())
    }

    /// Writes what is left of the record; the next entry pushed starts
    /// another record.
    pub fn finish<E>(
        &mut self,
        write: &mut impl FnMut(i64, i64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let written = if self.entries > 0 {
            self.flush(write)
        } else {
            Ok(())
        };
        self.part = 0;
        written
    }

    fn flush<E>(
        &mut self,
        write: &mut impl FnMut(i64, i64, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let written = write(self.part, self.entries, &self.buf);
        self.buf.clear();
        self.part += 1;
        self.entries = 0;
        written
    }
}

/// A feed record that does not decode: the state store is damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a feed record does not decode ({})", self.0)
    }
}

impl std::error::Error for Damaged {}

/// Calls `each` with (key, old, new) for every entry of one part, in
/// order; stops at the first error `each` returns.
pub fn decode_entries<E: From<Damaged>>(
    mut part: &[u8],
    mut each: impl FnMut(&[u8], Option<&[u8]>, Option<&[u8]>) -> Result<(), E>,
) -> Result<(), E> {
    while !part.is_empty() {
        let key = take(&mut part)?.ok_or_else(|| Damaged("an entry without a key".into()))?;
        let old = take(&mut part)?;
        let new = take(&mut part)?;
        each(key, old, new)?;
    }
    Ok(())
}

fn take<'a>(part: &mut &'a [u8]) -> Result<Option<&'a [u8]>, Damaged> {
    let Some((len, rest)) = part.split_first_chunk::<4>() else {
        return Err(Damaged(format!(
            "{} bytes where a length was due",
            part.len()
        )));
    };
    let len = u32::from_le_bytes(*len);
    if len == ABSENT {
        *part = rest;
        return Ok(None);
    }
    let len = len as usize;
    if len > rest.len() {
        return Err(Damaged(format!(
            "a length of {len} bytes with {} left",
            rest.len()
        )));
    }
    let (bytes, rest) = rest.split_at(len);
    *part = rest;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Entry = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>);

    fn decode(part: &[u8]) -> Result<Vec<Entry>, Damaged> {
        let mut out = Vec::new();
        decode_entries(part, |k, o, n| {
            out.push((k.to_vec(), o.map(<[u8]>::to_vec), n.map(<[u8]>::to_vec)));
            Ok::<_, Damaged>(())
        })?;
        Ok(out)
    }

    #[test]
    fn parts_split_a_record_at_the_part_size_and_number_its_parts() {
        let doc = vec![b'x'; PART_BYTES / 3];
        let mut written: Vec<(i64, i64, usize)> = Vec::new();
        let mut write = |part: i64, entries: i64, bytes: &[u8]| {
            written.push((part, entries, decode(bytes).unwrap().len()));
            Ok::<_, TooLarge>(())
        };
        let mut parts = Parts::default();
        for i in 0..7u8 {
            parts.push(&[i], None, Some(&doc), &mut write).unwrap();
        }
        parts.finish(&mut write).unwrap();
        // A second record starts at part 0 again.
        parts.push(b"k", None, None, &mut write).unwrap();
        parts.finish(&mut write).unwrap();
        // Nothing pushed: nothing written.
        parts.finish(&mut write).unwrap();
        assert_eq!(written, vec![(0, 3, 3), (1, 3, 3), (2, 1, 1), (0, 1, 1)]);
    }

    #[test]
    fn inserts_updates_and_deletes_round_trip() {
        let entries: Vec<Entry> = vec![
            (b"{\"id\": 1}".to_vec(), None, Some(b"{\"a\": 1}".to_vec())),
            (
                b"{\"id\": 2}".to_vec(),
                Some(b"{}".to_vec()),
                Some(Vec::new()),
            ),
            (b"{\"id\": 3}".to_vec(), Some(b"{\"a\": 3}".to_vec()), None),
        ];
        let mut part = Vec::new();
        for (k, o, n) in &entries {
            encode_entry(&mut part, k, o.as_deref(), n.as_deref()).unwrap();
        }
        assert_eq!(decode(&part).unwrap(), entries);
        assert_eq!(decode(&[]).unwrap(), Vec::<Entry>::new());
    }

    #[test]
    fn damaged_parts_are_errors() {
        let mut part = Vec::new();
        encode_entry(&mut part, b"k", Some(b"old"), Some(b"new")).unwrap();
        // Every truncation but the whole part fails, and says why.
        for cut in 1..part.len() {
            assert!(decode(&part[..cut]).is_err(), "cut at {cut}");
        }
        // An absent key.
        let mut keyless = Vec::new();
        keyless.extend_from_slice(&ABSENT.to_le_bytes());
        keyless.extend_from_slice(&ABSENT.to_le_bytes());
        keyless.extend_from_slice(&ABSENT.to_le_bytes());
        let err = decode(&keyless).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a feed record does not decode (an entry without a key)"
        );
        // A length past the end.
        let err = decode(&[9, 0, 0, 0, b'x']).unwrap_err();
        assert!(err.0.contains("length of 9 bytes with 1 left"), "{err}");
    }

    proptest! {
        #[test]
        fn any_entries_round_trip(entries in prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 0..40),
                prop::option::of(prop::collection::vec(any::<u8>(), 0..80)),
                prop::option::of(prop::collection::vec(any::<u8>(), 0..80)),
            ),
            0..20,
        )) {
            let mut part = Vec::new();
            for (k, o, n) in &entries {
                encode_entry(&mut part, k, o.as_deref(), n.as_deref()).unwrap();
            }
            prop_assert_eq!(decode(&part).unwrap(), entries);
        }

        #[test]
        fn any_bytes_decode_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }
}
