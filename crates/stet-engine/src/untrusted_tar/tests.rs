//! The tar reader from the attacker's side: every stream an agent could leave for the archive API to
//! hand back, and what the host ends up with (nothing, on any refusal).

use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use super::*;

/// What Docker 20.10's archive API returned for `GET /containers/{id}/archive?path=/workspace/.` of a
/// tmpfs-backed volume, the workspace made by: `mkdir -p d/e; echo hi > d/f; ln -s /etc/passwd link;
/// ln d/f hard; printf x > "$(printf 'a\nb')"; printf y > "$(printf '\377bad')"; n=$(printf %0150d 0);
/// echo long > d/$n; printf '#!/bin/sh\n' > run.sh; chmod +x run.sh; ln -s $n d/longlink$n`.
const DOCKER_CAPTURE: &[u8] = include_bytes!("docker-20.10-archive.tar");

fn limits() -> TarLimits {
    TarLimits {
        max_entries: 1000,
        max_file_bytes: 1024 * 1024,
        max_total_bytes: 4 * 1024 * 1024,
        max_depth: 16,
    }
}

/// A ustar header block for `name` of `kind`, its checksum right.
fn header(name: &[u8], kind: u8, size: u64, link: &[u8]) -> Vec<u8> {
    let mut block = vec![0u8; BLOCK];
    block[..name.len()].copy_from_slice(name);
    block[100..108].copy_from_slice(b"0000644\0");
    block[108..116].copy_from_slice(b"0001750\0");
    block[116..124].copy_from_slice(b"0001750\0");
    if size < 8u64.pow(11) {
        block[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    } else {
        // GNU's base-256 form, for a claim octal cannot hold in 11 digits.
        block[124] = 0x80;
        block[128..136].copy_from_slice(&size.to_be_bytes());
    }
    block[136..148].copy_from_slice(b"00000000000\0");
    block[156] = kind;
    block[157..157 + link.len()].copy_from_slice(link);
    block[257..263].copy_from_slice(b"ustar\0");
    block[263..265].copy_from_slice(b"00");
    seal(&mut block);
    block
}

/// Writes the checksum of `block`.
fn seal(block: &mut [u8]) {
    block[148..156].copy_from_slice(b"        ");
    let sum: u32 = block.iter().map(|byte| u32::from(*byte)).sum();
    block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

/// `data` padded to whole blocks.
fn padded(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    out.resize(data.len().div_ceil(BLOCK) * BLOCK, 0);
    out
}

fn file(name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = header(name, b'0', data.len() as u64, b"");
    out.extend(padded(data));
    out
}

/// A PAX extended header carrying `records` (`key`, `value`).
fn pax(records: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut data = Vec::new();
    for (key, value) in records {
        let body = key.len() + value.len() + 3;
        let mut length = body + 1;
        while length.to_string().len() + body != length {
            length += 1;
        }
        data.extend(length.to_string().as_bytes());
        data.push(b' ');
        data.extend(*key);
        data.push(b'=');
        data.extend(*value);
        data.push(b'\n');
    }
    let mut out = header(b"PaxHeader", b'x', data.len() as u64, b"");
    out.extend(padded(&data));
    out
}

fn end() -> Vec<u8> {
    vec![0; 2 * BLOCK]
}

fn stream(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = parts.concat();
    out.extend(end());
    out
}

struct Place {
    _dir: tempfile::TempDir,
    outside: PathBuf,
    destination: PathBuf,
}

fn place() -> Place {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let destination = dir.path().join("result");
    Place {
        outside,
        destination,
        _dir: dir,
    }
}

fn extract(place: &Place, bytes: &[u8], limits: TarLimits) -> Result<Extracted, TarError> {
    extract_until(bytes, &place.destination, limits, &|| false)
}

/// Refused, with nothing left: no destination, nothing written next to it.
fn refused(bytes: &[u8], limits: TarLimits) -> TarError {
    let place = place();
    let error = extract(&place, bytes, limits).unwrap_err();
    assert!(
        !place.destination.exists(),
        "{error}: the destination is left"
    );
    assert_eq!(std::fs::read_dir(&place.outside).unwrap().count(), 0);
    assert_eq!(
        std::fs::read_dir(place.destination.parent().unwrap())
            .unwrap()
            .count(),
        1,
        "{error}: something was written next to the destination"
    );
    error
}

#[test]
fn a_real_docker_archive_is_written_as_the_workspace_was() {
    let place = place();
    let done = extract(&place, DOCKER_CAPTURE, limits()).unwrap();
    let root = &place.destination;
    assert_eq!(std::fs::read(root.join("d/f")).unwrap(), b"hi\n");
    assert_eq!(std::fs::read(root.join("hard")).unwrap(), b"hi\n");
    assert!(
        !std::fs::symlink_metadata(root.join("hard"))
            .unwrap()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_link(root.join("link")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert_eq!(std::fs::read(root.join("a\nb")).unwrap(), b"x");
    let invalid = std::ffi::OsStr::from_bytes(b"\xffbad");
    assert_eq!(std::fs::read(root.join(invalid)).unwrap(), b"y");
    let long = "0".repeat(150);
    assert_eq!(
        std::fs::read(root.join("d").join(&long)).unwrap(),
        b"long\n"
    );
    assert_eq!(
        std::fs::read_link(root.join("d").join(format!("longlink{long}"))).unwrap(),
        Path::new(&long)
    );
    assert!(root.join("d/e").is_dir());
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(root.join("run.sh"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o100, 0o100);
    assert_eq!(done.entries, 10);
}

#[test]
fn a_parent_component_is_refused() {
    let bytes = stream(&[file(b"ok", b"1"), file(b"../escape", b"owned")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::ParentComponent { .. }
    ));
    let bytes = stream(&[file(b"a/../../escape", b"owned")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::ParentComponent { .. }
    ));
}

#[test]
fn an_absolute_path_is_refused() {
    let bytes = stream(&[file(b"/tmp/stet-owned", b"owned")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::Absolute { .. }
    ));
    let bytes = stream(&[
        pax(&[(b"path", b"/tmp/stet-owned")]),
        file(b"innocent", b"x"),
    ]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::Absolute { .. }
    ));
}

#[test]
fn a_file_through_a_symlink_is_refused_and_never_reaches_its_target() {
    let place = place();
    let outside = place.outside.as_os_str().as_bytes().to_vec();
    let bytes = stream(&[
        header(b"link", b'2', 0, &outside),
        file(b"link/owned", b"owned"),
    ]);
    let error = extract(&place, &bytes, limits()).unwrap_err();
    assert!(matches!(error, TarError::ThroughLink { .. }), "{error}");
    assert_eq!(std::fs::read_dir(&place.outside).unwrap().count(), 0);
    assert!(!place.destination.exists());
    // A link to a directory inside the archive is no way through either.
    let bytes = stream(&[
        header(b"d/", b'5', 0, b""),
        header(b"link", b'2', 0, b"d"),
        file(b"link/f", b"x"),
    ]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::ThroughLink { .. }
    ));
    // Nor is a file standing where a directory should be.
    let bytes = stream(&[file(b"f", b"x"), file(b"f/g", b"y")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::ThroughLink { .. }
    ));
}

#[test]
fn a_file_over_a_symlink_is_refused_not_written_through_it() {
    let place = place();
    let target = place.outside.join("victim");
    let bytes = stream(&[
        header(b"link", b'2', 0, target.as_os_str().as_bytes()),
        file(b"link", b"owned"),
    ]);
    let error = extract(&place, &bytes, limits()).unwrap_err();
    assert!(matches!(error, TarError::Duplicate { .. }), "{error}");
    assert!(!target.exists());
}

#[test]
fn a_hard_link_to_outside_is_refused() {
    for target in [&b"/etc/passwd"[..], b"../outside/x", b"missing", b""] {
        let bytes = stream(&[header(b"h", b'1', 0, target)]);
        assert!(
            matches!(refused(&bytes, limits()), TarError::BadHardLink { .. }),
            "{target:?}"
        );
    }
    // Nor to a link, which would be followed to wherever it points.
    let bytes = stream(&[
        header(b"link", b'2', 0, b"/etc/passwd"),
        header(b"h", b'1', 0, b"link"),
    ]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::BadHardLink { .. }
    ));
}

#[test]
fn devices_and_fifos_are_refused() {
    for (kind, named) in [
        (b'3', "character device"),
        (b'4', "block device"),
        (b'6', "fifo"),
    ] {
        let bytes = stream(&[file(b"ok", b"1"), header(b"special", kind, 0, b"")]);
        match refused(&bytes, limits()) {
            TarError::Special { kind, .. } => assert_eq!(kind, named),
            other => panic!("{other}"),
        }
    }
}

#[test]
fn an_unknown_entry_type_is_refused() {
    let bytes = stream(&[header(b"x", b'S', 0, b"")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::UnknownType { .. }
    ));
}

#[test]
fn a_huge_extension_header_is_refused_before_it_is_read() {
    for kind in [b'x', b'g', b'L', b'K'] {
        // Claims a terabyte and holds nothing: the refusal comes from the claim, not from reading.
        let bytes = header(b"PaxHeader", kind, 1 << 40, b"");
        match refused(&bytes, limits()) {
            TarError::ExtensionTooLarge { size, .. } => assert_eq!(size, 1 << 40),
            other => panic!("{other}"),
        }
    }
}

#[test]
fn a_malformed_pax_record_is_refused() {
    let mut bad = header(b"PaxHeader", b'x', 12, b"");
    bad.extend(padded(b"999 path=x\n\0"));
    assert!(matches!(
        refused(&stream(&[bad, file(b"f", b"x")]), limits()),
        TarError::BadHeader(_)
    ));
}

#[test]
fn a_billion_entry_claim_stops_at_the_entry_limit() {
    let few = TarLimits {
        max_entries: 3,
        ..limits()
    };
    // A stream that would go on for a billion entries, generated lazily: it is refused at the fourth.
    let entries = (0u64..1_000_000_000).flat_map(|index| file(format!("f{index}").as_bytes(), b""));
    let reader = std::io::Cursor::new(entries.take(10 * BLOCK).collect::<Vec<u8>>());
    let place = place();
    let error = extract_until(reader, &place.destination, few, &|| false).unwrap_err();
    assert!(
        matches!(error, TarError::TooManyEntries { limit: 3 }),
        "{error}"
    );
    assert!(!place.destination.exists());
    // Extension headers count too: a chain of them cannot go on for ever.
    let chain: Vec<Vec<u8>> = (0..5).map(|_| pax(&[(b"comment", b"x")])).collect();
    assert!(matches!(
        refused(&stream(&chain), few),
        TarError::TooManyEntries { .. }
    ));
}

#[test]
fn a_truncated_stream_is_refused() {
    let whole = stream(&[file(b"a", b"1"), file(b"b", &[7; 3000])]);
    // Cut inside the data, inside a header, at an entry boundary, and with no end marker.
    for cut in [
        2 * BLOCK + 100,
        BLOCK + 10,
        2 * BLOCK,
        whole.len() - 2 * BLOCK,
    ] {
        assert!(
            matches!(refused(&whole[..cut], limits()), TarError::Truncated),
            "cut at {cut}"
        );
    }
    assert!(matches!(refused(b"", limits()), TarError::Truncated));
}

#[test]
fn a_file_bigger_than_the_limit_is_refused_from_its_claim() {
    let small = TarLimits {
        max_file_bytes: 10,
        ..limits()
    };
    let bytes = stream(&[file(b"big", &[1; 11])]);
    assert!(matches!(
        refused(&bytes, small),
        TarError::FileTooLarge { size: 11, .. }
    ));
    // A claim with no data behind it, in the header's base-256 form: refused before any read.
    let mut huge = header(b"huge", b'0', 0, b"");
    huge[124..136].copy_from_slice(&[
        0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    ]);
    seal(&mut huge);
    assert!(matches!(
        refused(&huge, limits()),
        TarError::FileTooLarge { .. }
    ));
    // And a PAX size overriding a small header.
    let bytes = stream(&[pax(&[(b"size", b"99999999999")]), file(b"f", b"")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::FileTooLarge { .. }
    ));
}

#[test]
fn files_adding_up_past_the_total_are_refused() {
    let total = TarLimits {
        max_total_bytes: 15,
        ..limits()
    };
    let bytes = stream(&[file(b"a", &[1; 10]), file(b"b", &[1; 10])]);
    assert!(matches!(
        refused(&bytes, total),
        TarError::TotalTooLarge { .. }
    ));
}

#[test]
fn nesting_past_the_depth_limit_is_refused() {
    let shallow = TarLimits {
        max_depth: 3,
        ..limits()
    };
    let bytes = stream(&[
        header(b"a/", b'5', 0, b""),
        header(b"a/b/", b'5', 0, b""),
        header(b"a/b/c/", b'5', 0, b""),
        file(b"a/b/c/d", b"x"),
    ]);
    assert!(matches!(refused(&bytes, shallow), TarError::TooDeep { .. }));
}

#[test]
fn names_follow_the_tree_walks_rules() {
    // A NUL cannot be in a file name: a PAX record that puts one there is refused.
    let bytes = stream(&[pax(&[(b"path", b"a\0b")]), file(b"x", b"1")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::BadName { .. }
    ));
    // A link target with a NUL, or an empty one, likewise.
    let bytes = stream(&[pax(&[(b"linkpath", b"a\0b")]), header(b"l", b'2', 0, b"")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::BadName { .. }
    ));
    // A component longer than NAME_MAX, a path longer than PATH_MAX.
    let long = vec![b'n'; 256];
    let bytes = stream(&[pax(&[(b"path", &long)]), file(b"x", b"1")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::BadName { .. }
    ));
    // A newline and bytes that are not UTF-8 are names a directory can hold: written as they are,
    // for the import to judge as it judges a workspace.
    let place = place();
    let bytes = stream(&[file(b"new\nline", b"1"), file(b"\xff\xfe", b"2")]);
    extract(&place, &bytes, limits()).unwrap();
    assert_eq!(
        std::fs::read(place.destination.join("new\nline")).unwrap(),
        b"1"
    );
    let invalid = std::ffi::OsStr::from_bytes(b"\xff\xfe");
    assert_eq!(
        std::fs::read(place.destination.join(invalid)).unwrap(),
        b"2"
    );
}

#[test]
fn an_entry_named_twice_is_refused() {
    let bytes = stream(&[file(b"f", b"1"), file(b"f", b"2")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::Duplicate { .. }
    ));
}

#[test]
fn a_bad_checksum_is_refused() {
    let mut bytes = stream(&[file(b"f", b"1")]);
    bytes[0] = b'g';
    assert!(matches!(refused(&bytes, limits()), TarError::BadHeader(_)));
}

#[test]
fn anything_after_the_end_marker_is_refused() {
    let mut bytes = file(b"f", b"1");
    bytes.extend(vec![0; BLOCK]);
    bytes.extend(file(b"smuggled", b"2"));
    assert!(matches!(refused(&bytes, limits()), TarError::BadHeader(_)));
}

#[test]
fn an_interrupted_extraction_writes_nothing() {
    let place = place();
    let bytes = stream(&[file(b"f", b"1")]);
    let error = extract_until(&bytes[..], &place.destination, limits(), &|| true).unwrap_err();
    assert!(matches!(error, TarError::Interrupted));
    assert!(!place.destination.exists());
}

#[test]
fn an_existing_destination_is_never_written_into() {
    let place = place();
    std::fs::create_dir(&place.destination).unwrap();
    let error = extract(&place, &stream(&[file(b"f", b"1")]), limits()).unwrap_err();
    assert!(matches!(error, TarError::DestinationExists { .. }));
    assert!(place.destination.exists());
    assert!(!place.destination.join("f").exists());
}

/// Red team (redpump): a PAX or GNU long name is held to the same rules as the header's own, whatever
/// safe name the header carries under it, and a GNU long link target too.
#[test]
fn an_extension_name_overriding_a_safe_header_name_is_checked_as_its_own() {
    let long = |kind: u8, name: &[u8]| {
        let mut out = header(b"././@LongLink", kind, name.len() as u64 + 1, b"");
        out.extend(padded(&[name, b"\0"].concat()));
        out
    };
    for bytes in [
        stream(&[pax(&[(b"path", b"../outside/owned")]), file(b"safe", b"x")]),
        stream(&[
            pax(&[(b"path", b"a/../../outside/owned")]),
            file(b"safe", b"x"),
        ]),
        stream(&[long(b'L', b"../outside/owned"), file(b"safe", b"x")]),
        // A GNU long name and a PAX path together: whichever is used, it is checked.
        stream(&[
            long(b'L', b"fine"),
            pax(&[(b"path", b"../outside/owned")]),
            file(b"safe", b"x"),
        ]),
        stream(&[
            pax(&[(b"path", b"fine")]),
            long(b'L', b"../outside/owned"),
            file(b"safe", b"x"),
        ]),
    ] {
        assert!(matches!(
            refused(&bytes, limits()),
            TarError::ParentComponent { .. }
        ));
    }
    let bytes = stream(&[pax(&[(b"path", b"/tmp/owned")]), file(b"safe", b"x")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::Absolute { .. }
    ));
    // A hard link's target given by a GNU long link or a PAX linkpath, pointing outside.
    for bytes in [
        stream(&[
            file(b"f", b"x"),
            long(b'K', b"../outside/x"),
            header(b"h", b'1', 0, b"f"),
        ]),
        stream(&[
            file(b"f", b"x"),
            pax(&[(b"linkpath", b"/etc/passwd")]),
            header(b"h", b'1', 0, b"f"),
        ]),
    ] {
        assert!(matches!(
            refused(&bytes, limits()),
            TarError::BadHardLink { .. }
        ));
    }
    // A PAX size over a small header size is the size the limits see.
    let bytes = stream(&[
        pax(&[(b"size", b"99999999999")]),
        header(b"big", b'0', 0, b""),
    ]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::FileTooLarge { .. }
    ));
}

/// Red team (redpump): one name given twice in any order of kinds (a directory then a file, a file
/// then a link, a directory then a link, a link then a directory) is refused, and no link ever
/// stands where the archive first put something else.
#[test]
fn a_name_given_again_as_another_kind_is_refused() {
    let cases = [
        vec![header(b"d/", b'5', 0, b""), file(b"d", b"x")],
        vec![file(b"f", b"x"), header(b"f", b'2', 0, b"/etc/passwd")],
        vec![
            header(b"d/", b'5', 0, b""),
            file(b"d/inner", b"x"),
            header(b"d", b'2', 0, b"/etc"),
        ],
        vec![header(b"l", b'2', 0, b"/etc"), header(b"l/", b'5', 0, b"")],
        vec![file(b"f", b"x"), header(b"f/", b'5', 0, b"")],
        vec![
            file(b"f", b"x"),
            header(b"g", b'1', 0, b"f"),
            file(b"g", b"y"),
        ],
    ];
    for parts in cases {
        let error = refused(&stream(&parts), limits());
        assert!(matches!(error, TarError::Duplicate { .. }), "{error}");
    }
}

/// Red team (redpump): a hard link to a symlink, or to a directory, is refused rather than followed
/// or copied as something else.
#[test]
fn a_hard_link_to_a_link_or_a_directory_is_refused() {
    for parts in [
        vec![
            header(b"d/", b'5', 0, b""),
            header(b"l", b'2', 0, b"d"),
            header(b"h", b'1', 0, b"l"),
        ],
        vec![header(b"d/", b'5', 0, b""), header(b"h", b'1', 0, b"d")],
        vec![
            header(b"d/", b'5', 0, b""),
            file(b"d/f", b"x"),
            header(b"l", b'2', 0, b"d"),
            header(b"h", b'1', 0, b"l/f"),
        ],
    ] {
        let error = refused(&stream(&parts), limits());
        assert!(matches!(error, TarError::BadHardLink { .. }), "{error}");
    }
}

/// Red team (redpump): setuid, setgid, sticky and world-writable bits in the archive reach no file
/// or directory of the host's copy.
#[test]
fn mode_bits_past_the_owners_execute_bit_are_not_carried() {
    use std::os::unix::fs::PermissionsExt as _;
    let place = place();
    let mut file_header = header(b"suid", b'0', 1, b"");
    file_header[100..108].copy_from_slice(b"0007777\0");
    seal(&mut file_header);
    file_header.extend(padded(b"x"));
    let mut dir_header = header(b"d/", b'5', 0, b"");
    dir_header[100..108].copy_from_slice(b"0007777\0");
    seal(&mut dir_header);
    extract(&place, &stream(&[file_header, dir_header]), limits()).unwrap();
    for name in ["suid", "d"] {
        let mode = std::fs::symlink_metadata(place.destination.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7022, 0, "{name}: {mode:o}");
    }
}

/// Red team (redpump): a GNU sparse file, which claims a size its data does not hold, is refused
/// before anything of it is read.
#[test]
fn a_sparse_entry_claiming_a_huge_size_is_refused() {
    let bytes = stream(&[header(b"sparse", b'S', u64::MAX >> 2, b"")]);
    assert!(matches!(
        refused(&bytes, limits()),
        TarError::UnknownType { kind: 'S', .. }
    ));
}

/// Red team (redpump): `./`, `//` and a trailing `/` spell names inside the destination, never the
/// destination's parent nor the destination replaced by a file.
#[test]
fn dot_and_slash_spellings_stay_inside() {
    let place = place();
    let bytes = stream(&[
        header(b"./", b'5', 0, b""),
        header(b".//d//", b'5', 0, b""),
        file(b"./d/./f", b"1"),
        file(b"d//g/", b"2"),
    ]);
    extract(&place, &bytes, limits()).unwrap();
    assert_eq!(std::fs::read(place.destination.join("d/f")).unwrap(), b"1");
    assert_eq!(std::fs::read(place.destination.join("d/g")).unwrap(), b"2");
    for name in [&b"./"[..], b"//", b"."] {
        let error = refused(&stream(&[file(name, b"x")]), limits());
        assert!(
            matches!(error, TarError::BadName { .. } | TarError::Absolute { .. }),
            "{error}"
        );
    }
}
