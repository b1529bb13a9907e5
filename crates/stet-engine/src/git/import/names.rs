//! Names git would read as `.git` (or as `.gitmodules`) on the case-insensitive file systems it
//! protects against: the import leaves them out of its trees and the base's survey refuses them.

/// Whether git would read this path component as `.git`: in any case; with the characters HFS+
/// ignores; with the trailing dots and spaces, `\`, or `:stream` suffix NTFS drops; or as NTFS's short
/// name `git~1`.
pub(crate) fn names_git_directory(name: &[u8]) -> bool {
    folds_to(name, b".git") || folds_to(name, b"git~1")
}

/// Compares a path component with a lowercase ASCII `needle` the way the case-insensitive file systems
/// git protects against would: ASCII case folded, HFS+'s ignorable code points dropped, and NTFS's
/// trailing dots and spaces, `:` stream suffix or `\` separator after the name cut off.
pub(super) fn folds_to(name: &[u8], needle: &[u8]) -> bool {
    match std::str::from_utf8(name) {
        // Any other non-ASCII character becomes a byte no needle holds.
        Ok(text) => folded_matches(
            text.chars()
                .filter(|character| !is_hfs_ignorable(*character))
                .map(|character| u8::try_from(character.to_ascii_lowercase()).unwrap_or(0xff)),
            needle,
        ),
        Err(_) => folded_matches(name.iter().map(u8::to_ascii_lowercase), needle),
    }
}

fn folded_matches(mut folded: impl Iterator<Item = u8>, needle: &[u8]) -> bool {
    if !needle
        .iter()
        .all(|expected| folded.next() == Some(*expected))
    {
        return false;
    }
    match folded.next() {
        None | Some(b'\\' | b':') => true,
        Some(b' ' | b'.') => folded
            .take_while(|byte| *byte != b':')
            .all(|byte| matches!(byte, b' ' | b'.')),
        Some(_) => false,
    }
}

/// Code points HFS+ drops when it compares names.
fn is_hfs_ignorable(character: char) -> bool {
    matches!(
        character,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
    )
}
