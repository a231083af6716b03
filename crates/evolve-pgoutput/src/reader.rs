//! A cursor over a message's bytes that never panics: every read is checked
//! and a short read becomes a [`DecodeError`] naming the field.

use crate::error::{DecodeError, DecodeErrorKind};
use crate::lsn::Lsn;

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    /// Invariant: `pos <= buf.len()`.
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader at `pos` (clamped to the buffer) naming errors after `what`.
    pub(crate) fn new(buf: &'a [u8], pos: usize, what: &'static str) -> Self {
        Reader {
            buf,
            pos: pos.min(buf.len()),
            what,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        rest
    }

    pub(crate) fn error_at(&self, offset: usize, kind: DecodeErrorKind) -> DecodeError {
        DecodeError {
            what: self.what,
            offset,
            kind,
        }
    }

    fn truncated(&self, expected: &'static str) -> DecodeError {
        self.error_at(self.pos, DecodeErrorKind::Truncated { expected })
    }

    pub(crate) fn bytes(
        &mut self,
        n: usize,
        expected: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let slice = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
            .ok_or_else(|| self.truncated(expected))?;
        self.pos += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, expected: &'static str) -> Result<[u8; N], DecodeError> {
        let array = self
            .buf
            .get(self.pos..)
            .and_then(|rest| rest.first_chunk::<N>())
            .ok_or_else(|| self.truncated(expected))?;
        self.pos += N;
        Ok(*array)
    }

    pub(crate) fn u8(&mut self, expected: &'static str) -> Result<u8, DecodeError> {
        self.array::<1>(expected).map(|[b]| b)
    }

    pub(crate) fn i16(&mut self, expected: &'static str) -> Result<i16, DecodeError> {
        self.array(expected).map(i16::from_be_bytes)
    }

    pub(crate) fn i32(&mut self, expected: &'static str) -> Result<i32, DecodeError> {
        self.array(expected).map(i32::from_be_bytes)
    }

    pub(crate) fn u32(&mut self, expected: &'static str) -> Result<u32, DecodeError> {
        self.array(expected).map(u32::from_be_bytes)
    }

    pub(crate) fn i64(&mut self, expected: &'static str) -> Result<i64, DecodeError> {
        self.array(expected).map(i64::from_be_bytes)
    }

    pub(crate) fn lsn(&mut self, expected: &'static str) -> Result<Lsn, DecodeError> {
        self.array(expected).map(|b| Lsn(u64::from_be_bytes(b)))
    }

    /// A byte that must be 0 or 1.
    pub(crate) fn bool(&mut self, expected: &'static str) -> Result<bool, DecodeError> {
        let at = self.pos;
        match self.u8(expected)? {
            0 => Ok(false),
            1 => Ok(true),
            found => Err(self.error_at(at, DecodeErrorKind::UnexpectedByte { expected, found })),
        }
    }

    /// An Int16 count that must not be negative.
    pub(crate) fn count16(&mut self, field: &'static str) -> Result<usize, DecodeError> {
        let at = self.pos;
        let value = self.i16(field)?;
        usize::try_from(value).map_err(|_| {
            self.error_at(
                at,
                DecodeErrorKind::NegativeLength {
                    field,
                    value: value.into(),
                },
            )
        })
    }

    /// An Int32 length or count that must not be negative.
    pub(crate) fn count32(&mut self, field: &'static str) -> Result<usize, DecodeError> {
        let at = self.pos;
        let value = self.i32(field)?;
        usize::try_from(value).map_err(|_| {
            self.error_at(
                at,
                DecodeErrorKind::NegativeLength {
                    field,
                    value: value.into(),
                },
            )
        })
    }

    /// A NUL-terminated UTF-8 string, without its terminator.
    pub(crate) fn cstr(&mut self, field: &'static str) -> Result<&'a str, DecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| self.truncated(field))?;
        let bytes = rest.get(..len).unwrap_or_default();
        let text = std::str::from_utf8(bytes).map_err(|e| {
            self.error_at(
                self.pos + e.valid_up_to(),
                DecodeErrorKind::InvalidUtf8 { field },
            )
        })?;
        self.pos += len + 1;
        Ok(text)
    }

    /// How many items of at least `min_size` bytes each the rest of the
    /// buffer can hold, at most `claimed`: the capacity to reserve for a list
    /// whose length comes from the input.
    pub(crate) fn capacity_for(&self, claimed: usize, min_size: usize) -> usize {
        claimed.min(self.remaining() / min_size.max(1))
    }
}
