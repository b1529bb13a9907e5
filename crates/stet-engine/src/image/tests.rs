//! Unit tests of `crate::image`, in a file of their own so the module reads as code.

use std::io::Read;

use super::*;

struct Entry {
    path: String,
    kind: tar::EntryType,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    data: Vec<u8>,
}

fn entries(archive: &[u8]) -> Vec<Entry> {
    let mut reader = tar::Archive::new(archive);
    reader
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let header = entry.header().clone();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            Entry {
                path: entry.path().unwrap().to_string_lossy().into_owned(),
                kind: header.entry_type(),
                mode: header.mode().unwrap(),
                uid: header.uid().unwrap(),
                gid: header.gid().unwrap(),
                mtime: header.mtime().unwrap(),
                data,
            }
        })
        .collect()
}

fn find<'e>(entries: &'e [Entry], path: &str) -> &'e Entry {
    entries
        .iter()
        .find(|e| e.path.trim_end_matches('/') == path)
        .unwrap_or_else(|| panic!("no entry {path}"))
}

/// The test binary itself: dynamically linked like stet.
fn this_binary() -> PathBuf {
    std::env::current_exe().unwrap()
}

#[test]
fn rootfs_holds_binary_users_dirs_and_libraries() {
    let binary = this_binary();
    let tar = rootfs_tar(&binary).unwrap();
    let entries = entries(&tar);

    let stet = find(&entries, "usr/local/bin/stet");
    assert_eq!(stet.kind, tar::EntryType::Regular);
    assert_eq!(stet.mode, 0o755);
    assert_eq!(stet.data, std::fs::read(&binary).unwrap());

    let passwd = String::from_utf8(find(&entries, "etc/passwd").data.clone()).unwrap();
    assert!(passwd.lines().any(|l| l.starts_with("root:x:0:0:")));
    assert!(
        passwd
            .lines()
            .any(|l| l == "stet:x:65532:65532::/home/stet:/usr/local/bin/stet")
    );
    let group = String::from_utf8(find(&entries, "etc/group").data.clone()).unwrap();
    assert!(group.lines().any(|l| l.starts_with("stet:x:65532:")));

    let tmp = find(&entries, "tmp");
    assert_eq!((tmp.kind, tmp.mode), (tar::EntryType::Directory, 0o1777));
    for dir in [
        "workspace",
        "outputs",
        "proc",
        "dev",
        "etc",
        "usr/local/bin",
    ] {
        assert_eq!(find(&entries, dir).kind, tar::EntryType::Directory, "{dir}");
    }
    let home = find(&entries, "home/stet");
    assert_eq!((home.uid, home.gid), (65532, 65532));

    let libraries = linked_libraries(&binary).unwrap();
    assert!(
        libraries
            .iter()
            .any(|l| l.to_string_lossy().contains("ld-linux")),
        "the loader is among {libraries:?}"
    );
    for library in &libraries {
        let inside = find(&entries, relative(&library.to_string_lossy()));
        assert_eq!(inside.kind, tar::EntryType::Regular, "{library:?}");
        assert_eq!(inside.data, std::fs::read(library).unwrap(), "{library:?}");
    }

    for entry in &entries {
        assert_eq!(entry.mtime, 0, "{}", entry.path);
        assert!(!entry.path.starts_with('/'), "{}", entry.path);
        if entry.path != "home/stet/" {
            assert_eq!((entry.uid, entry.gid), (0, 0), "{}", entry.path);
        }
    }
    let paths: Vec<&str> = entries
        .iter()
        .map(|e| e.path.trim_end_matches('/'))
        .collect();
    let mut sorted = paths.clone();
    sorted.sort_unstable();
    assert_eq!(paths, sorted);
}

#[test]
fn rootfs_is_deterministic() {
    let binary = this_binary();
    assert!(rootfs_tar(&binary).unwrap() == rootfs_tar(&binary).unwrap());
}

#[test]
fn missing_binary_is_named() {
    let err = rootfs_tar(Path::new("/nonexistent/stet")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/stet"), "{err}");
}

#[test]
fn ldd_output_of_a_dynamic_binary() {
    let output = "\tlinux-vdso.so.1 (0x00007ffd5a1e2000)\n\
            \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f0e1c2a1000)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e1c0c0000)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f0e1c2e0000)\n";
    let libraries = parse_ldd(Path::new("stet"), output).unwrap();
    assert_eq!(
        libraries,
        vec![
            PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
            PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
            PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
        ]
    );
}

#[test]
fn ldd_output_of_a_static_binary_names_nothing() {
    let libraries = parse_ldd(Path::new("stet"), "\tstatically linked\n").unwrap();
    assert!(libraries.is_empty());
}

#[test]
fn ldd_not_found_is_refused_with_the_library_name() {
    let output = "\tlinux-vdso.so.1 (0x00007ffd5a1e2000)\n\tlibssl.so.3 => not found\n";
    let err = parse_ldd(Path::new("/opt/stet"), output).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("libssl.so.3"), "{text}");
    assert!(text.contains("/opt/stet"), "{text}");
    assert!(text.contains("not found"), "{text}");
}

#[test]
fn ldd_relative_or_traversing_paths_are_refused() {
    for line in [
        "\tlibc.so.6 => lib/libc.so.6 (0x1)\n",
        "\tlibc.so.6 => /lib/../etc/libc.so.6 (0x1)\n",
        "\tsomething odd here\n",
    ] {
        assert!(parse_ldd(Path::new("stet"), line).is_err(), "{line:?}");
    }
}

#[test]
fn tag_uses_twelve_hex_digits() {
    let sha = "0123456789abcdef".repeat(4);
    assert_eq!(tag_for(&sha), "stet-sandbox:0123456789ab");
}

#[test]
fn save_archive_references_the_layer_by_its_digest() {
    let layer = b"pretend this is a layer".to_vec();
    let sha = "ab".repeat(32);
    let archive = docker_save_archive(&layer, &sha, &tag_for(&sha)).unwrap();
    let entries = entries(&archive);
    let manifest: serde_json::Value =
        serde_json::from_slice(&find(&entries, "manifest.json").data).unwrap();
    let config_name = manifest[0]["Config"].as_str().unwrap();
    let config_entry = find(&entries, config_name);
    assert_eq!(
        config_name,
        format!("{}.json", hex(&Sha256::digest(&config_entry.data)))
    );
    let config: serde_json::Value = serde_json::from_slice(&config_entry.data).unwrap();
    let layer_hex = hex(&Sha256::digest(&layer));
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!("sha256:{layer_hex}")
    );
    assert_eq!(config["config"]["Labels"][BINARY_SHA256_LABEL], sha);
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(manifest[0]["RepoTags"][0], tag_for(&sha));
    let layer_name = manifest[0]["Layers"][0].as_str().unwrap();
    assert_eq!(layer_name, format!("{layer_hex}/layer.tar"));
    assert_eq!(find(&entries, layer_name).data, layer);
    assert!(archive == docker_save_archive(&layer, &sha, &tag_for(&sha)).unwrap());
}

#[test]
fn only_an_executable_for_the_engines_machine_is_taken() {
    let running = std::env::current_exe().unwrap();
    let native = std::fs::read(&running).unwrap();
    let here = std::env::consts::ARCH;
    check_executable(&running, &native, here).unwrap();
    check_executable(&running, &native, docker_architecture()).unwrap();
    let refused = |contents: &[u8], arch: &str| {
        check_executable(Path::new("/x"), contents, arch)
            .unwrap_err()
            .to_string()
    };
    let text = refused(
        b"root:x:0:0:root:/root:/bin/sh\nstet:x:1:1::/:/bin/sh\n",
        here,
    );
    assert!(
        text.starts_with("/x is a text file, not an executable for the engine's platform (linux/"),
        "{text}"
    );
    assert!(refused(b"#!/bin/sh\necho this is not stet at all\n", here).contains("is a script"));
    assert!(refused(b"\x7fELF", here).contains("4 bytes long"));
    // The same executable, said to be for another machine.
    let mut foreign = native.clone();
    let other = if docker_architecture() == "arm64" {
        0x3eu16
    } else {
        0xb7u16
    };
    foreign[18..20].copy_from_slice(&other.to_le_bytes());
    let text = refused(&foreign, here);
    assert!(
        text.contains("an ELF executable for ") && text.contains("(64-bit)"),
        "{text}"
    );
    // And the engine on another machine than this one.
    let elsewhere = if docker_architecture() == "arm64" {
        "x86_64"
    } else {
        "aarch64"
    };
    assert!(refused(&native, elsewhere).contains(&format!("linux/{}", docker_name(elsewhere))));
}
