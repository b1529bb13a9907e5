//! What people read of sizes and long texts: a byte count in binary units, a text cut at a
//! character boundary. Ground floor: the dispatch, git and the harnesses all show them.

/// The longest start of `text` that fits in `limit` bytes without splitting a character.
pub(crate) fn truncate(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// A size as people read it: `8.0 GiB`, `512 MiB`, `12 KiB`.
pub(crate) fn shown_bytes(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}
