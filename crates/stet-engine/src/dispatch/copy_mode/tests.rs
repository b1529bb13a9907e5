//! The archive copy mode writes, read back by the untrusted reader: what goes in comes out the same.

use std::os::unix::fs::PermissionsExt as _;

use super::*;

#[test]
fn what_goes_in_reads_back_the_same_through_the_untrusted_reader() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    std::fs::create_dir_all(source.join(".git/objects")).unwrap();
    std::fs::write(source.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let long = "n".repeat(200);
    std::fs::create_dir_all(source.join(&long)).unwrap();
    std::fs::write(source.join(&long).join("deep.txt"), vec![7u8; 300_000]).unwrap();
    std::fs::write(source.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        source.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/passwd", source.join("link")).unwrap();
    let user = SandboxUser {
        uid: 4242,
        gid: 4343,
    };
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    append_tree(&mut builder, &source, Path::new("."), user).unwrap();
    let archive = builder.into_inner().unwrap();

    let mut owners = tar::Archive::new(&archive[..]);
    for entry in owners.entries().unwrap() {
        let entry = entry.unwrap();
        assert_eq!(entry.header().uid().unwrap(), 4242);
        assert_eq!(entry.header().gid().unwrap(), 4343);
    }

    let limits = TarLimits {
        max_entries: 100,
        max_file_bytes: 1 << 20,
        max_total_bytes: 1 << 21,
        max_depth: 8,
    };
    let back = dir.path().join("back");
    extract_until(&archive[..], &back, limits, &|| false).unwrap();
    assert_eq!(
        std::fs::read(back.join(&long).join("deep.txt")).unwrap(),
        vec![7u8; 300_000]
    );
    assert_eq!(
        std::fs::read_to_string(back.join(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    assert!(back.join(".git/objects").is_dir());
    assert_eq!(
        std::fs::read_link(back.join("link")).unwrap(),
        Path::new("/etc/passwd")
    );
    let mode = std::fs::metadata(back.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o100, 0o100);
}
