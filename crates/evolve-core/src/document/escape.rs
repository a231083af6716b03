//! JSON string output exactly as PostgreSQL's `escape_json` writes it.

/// Writes `s` as a JSON string: `"` and `\` escaped, `\b \f \n \r \t` by
/// name, every other byte below 0x20 as `\u00xx` (lowercase hex), everything
/// else (`/`, DEL, non-ASCII) as is. The caller has checked `s` is UTF-8.
pub(super) fn write_json_string(s: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&s[start..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&s[start..i]);
        out.extend_from_slice(short);
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
    out.push(b'"');
}
