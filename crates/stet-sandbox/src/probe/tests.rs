//! Unit tests of `crate::probe`, in a file of their own so the module reads as code.

use super::*;

const STATUS: &str = "Name:\tstet\nUmask:\t0022\nState:\tR (running)\nTgid:\t7\nPid:\t7\n\
        Uid:\t1000\t65532\t65532\t65532\nGid:\t1001\t65533\t65533\t65533\nGroups:\t\n\
        CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
        CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n";

fn status_path() -> &'static Path {
    Path::new("/proc/self/status")
}

#[test]
fn status_gives_effective_ids_and_caps() {
    let status = parse_status(STATUS, status_path()).unwrap();
    assert_eq!(status.uid, 65532);
    assert_eq!(status.gid, 65533);
    assert_eq!(status.cap_eff, "0000000000000000");
    assert!(status.no_new_privs);
    assert!(status.caps_all_dropped().unwrap());
}

#[test]
fn root_default_bounding_set_is_not_all_dropped() {
    let text = STATUS
        .replace("CapBnd:\t0000000000000000", "CapBnd:\t00000000a80425fb")
        .replace("NoNewPrivs:\t1", "NoNewPrivs:\t0");
    let status = parse_status(&text, status_path()).unwrap();
    assert_eq!(status.cap_eff, "0000000000000000");
    assert_eq!(status.cap_bnd, "00000000a80425fb");
    assert!(!status.no_new_privs);
    assert!(!status.caps_all_dropped().unwrap());
}

#[test]
fn old_kernel_without_ambient_set_parses() {
    let text = STATUS.replace("CapAmb:\t0000000000000000\n", "");
    let status = parse_status(&text, status_path()).unwrap();
    assert_eq!(status.cap_amb, None);
    assert!(status.caps_all_dropped().unwrap());
}

#[test]
fn missing_and_malformed_fields_are_named() {
    let err = parse_status("Name:\tstet\n", status_path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "/proc/self/status: no `Uid:` line",
        "{err:?}"
    );
    let text = STATUS.replace("CapEff:\t0000000000000000", "CapEff:\tzz");
    let err = parse_status(&text, status_path()).unwrap_err();
    assert!(err.to_string().contains("`CapEff`"), "{err}");
    assert!(err.to_string().contains("\"zz\""), "{err}");
    let text = STATUS.replace("Uid:\t1000\t65532\t65532\t65532", "Uid:\tnobody");
    let err = parse_status(&text, status_path()).unwrap_err();
    assert!(err.to_string().contains("`Uid`"), "{err}");
}

#[test]
fn cap_hex_parses_kernel_masks_and_refuses_others() {
    assert_eq!(parse_cap_hex("CapEff", "0000000000000000").unwrap(), 0);
    assert_eq!(
        parse_cap_hex("CapEff", "000001ffffffffff").unwrap(),
        0x1ff_ffff_ffff
    );
    assert_eq!(parse_cap_hex("CapEff", "a80425fb").unwrap(), 0xa804_25fb);
    for bad in ["", "0x00", "-1", "g000000000000000", "00000000000000000"] {
        assert!(parse_cap_hex("CapEff", bad).is_err(), "{bad:?}");
    }
}

#[test]
fn mounts_unescape_spaces_tabs_and_backslashes() {
    let text = "overlay / overlay ro,relatime,lowerdir=/a 0 0\n\
            /dev/vda /work\\040space ext4 rw,relatime 0 0\n\
            tmpfs /tmp tmpfs rw,nosuid,nodev,noexec,relatime,uid=65532,gid=65532 0 0\n\
            my\\011dev /back\\134slash ext4 rw 0 0\n";
    let mounts = parse_mounts(text, Path::new("/proc/self/mounts")).unwrap();
    assert_eq!(mounts.len(), 4);
    assert_eq!(
        mounts[0],
        Mount {
            source: "overlay".into(),
            target: "/".into(),
            fstype: "overlay".into(),
            options: "ro,relatime,lowerdir=/a".into(),
        }
    );
    assert_eq!(mounts[1].target, "/work space");
    assert_eq!(mounts[2].options.split(',').next_back(), Some("gid=65532"));
    assert_eq!(mounts[3].source, "my\tdev");
    assert_eq!(mounts[3].target, "/back\\slash");
}

#[test]
fn unescape_keeps_what_is_not_an_octal_escape() {
    assert_eq!(unescape_mount_field("a\\04"), "a\\04");
    assert_eq!(unescape_mount_field("a\\089b"), "a\\089b");
    assert_eq!(unescape_mount_field("\\777"), "\\777");
    assert_eq!(unescape_mount_field("\\040\\040"), "  ");
}

#[test]
fn short_mount_line_is_refused_with_its_number() {
    let err =
        parse_mounts("a b c d 0 0\nbroken line\n", Path::new("/proc/self/mounts")).unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[test]
fn cmdline_scan_finds_the_value_and_ignores_other_entries() {
    let proc_root = tempfile::tempdir().unwrap();
    let write = |pid: &str, cmdline: &[u8]| {
        let dir = proc_root.path().join(pid);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("cmdline"), cmdline).unwrap();
    };
    write("12", b"agent\0--token\0s3cr3t-value\0");
    write("7", b"agent\0--flag\0");
    write("40", b"x\0prefix-s3cr3t-value-suffix\0");
    write("self", b"s3cr3t-value\0");
    fs::create_dir(proc_root.path().join("99")).unwrap();
    let found = pids_with_cmdline_containing(proc_root.path(), OsStr::new("s3cr3t-value"));
    assert_eq!(found, vec![12, 40]);
}

#[test]
fn unset_variable_matches_nothing() {
    let found = find_env_in_cmdlines("STET_PROBE_TEST_SURELY_UNSET_VARIABLE", Path::new("/proc"));
    assert_eq!(
        found,
        CmdlineMatches {
            name: "STET_PROBE_TEST_SURELY_UNSET_VARIABLE".into(),
            env_has_value: false,
            pids: Vec::new(),
        }
    );
}

#[test]
fn allocation_reports_what_it_touched() {
    let mut progress = Vec::new();
    let outcome = allocate_and_touch(3, &mut progress);
    assert_eq!(
        String::from_utf8(progress).unwrap(),
        "stet probe: allocated and touched 3 MiB\n"
    );
    assert_eq!(
        outcome,
        AllocateOutcome {
            allocated_mb: 3,
            error: None
        }
    );
}

#[test]
fn the_emitted_line_is_one_line_of_bytes_that_are_not_utf8() {
    let mut out = Vec::new();
    emit_line(2, &mut out).unwrap();
    assert_eq!(out.len(), 2 * 1024 * 1024 + 1);
    assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
    assert!(std::str::from_utf8(&out).is_err());
}

#[test]
fn hold_returns_at_end_of_input() {
    hold(&mut std::io::Cursor::new(b"anything".to_vec())).unwrap();
}
