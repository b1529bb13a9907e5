//! Red team of issue 36 parts 1–5, as a hostile repository would attack the host (DESIGN §5 rows
//! 16 and 23): its base tree (links to the host, a name written twice as a link and a directory,
//! gitlinks, attributes naming filters, replace refs, names no checkout writes or a terminal would
//! read as escapes), its inbox (links, a FIFO, a sparse file of a TiB, TOML built to be costly) and
//! every sink a field of it reaches (the headless JSON lines and progress, errors, `stet doctor`,
//! `stet sweep`), each proven by effect: markers never created, files outside left as they were,
//! bytes captured from a real terminal (`script`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use git2::{FileMode, ObjectType, Oid, Repository, Signature};
use stet_engine::brief::{Brief, BriefError};
use stet_engine::credential::random_token;
use stet_engine::git::workspace::{BaseLimits, WorkspaceError, materialize_within};
use stet_engine::inbox::{Inbox, InboxError, InboxLimits};
use stet_engine::runtime::{DEFAULT_SANDBOX_UID, SandboxUser};
use stet_sanitize::branch::CommitSha;

use super::headless::{Home, Project, STET_VARIABLES, scenario};
use super::hostile_display::{hidden_characters, on_a_terminal};
use super::support::git;

// ---------------------------------------------------------------------------------------------
// The base tree
// ---------------------------------------------------------------------------------------------

/// A repository of the test's own where hostile bases are made, beside a directory standing for
/// the rest of the host.
struct Hostile {
    root: tempfile::TempDir,
    repo: PathBuf,
}

impl Hostile {
    fn new() -> Hostile {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        Hostile { root, repo }
    }

    fn open(&self) -> Repository {
        Repository::open(&self.repo).unwrap()
    }

    /// A directory outside the repository, holding one file, whose state the test compares.
    fn outside(&self, name: &str) -> PathBuf {
        let dir = self.root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("keep"), b"the host's own\n").unwrap();
        dir
    }

    fn blob(&self, content: &[u8]) -> Oid {
        self.open().blob(content).unwrap()
    }

    /// A tree of `entries` in exactly the order given, written without libgit2's checks (a
    /// repository ships whatever tree objects it likes; `git clone` checks none by default).
    fn raw_tree(&self, entries: &[(&[u8], Oid, FileMode)]) -> Oid {
        let mut raw = Vec::new();
        for (name, id, mode) in entries {
            raw.extend_from_slice(format!("{:o} ", i32::from(*mode)).as_bytes());
            raw.extend_from_slice(name);
            raw.push(0);
            raw.extend_from_slice(id.as_bytes());
        }
        self.open()
            .odb()
            .unwrap()
            .write(ObjectType::Tree, &raw)
            .unwrap()
    }

    fn commit(&self, tree: Oid) -> CommitSha {
        let repo = self.open();
        let tree = repo.find_tree(tree).unwrap();
        let signature = Signature::now("hostile", "hostile@example.invalid").unwrap();
        let id = repo
            .commit(None, &signature, &signature, "hostile", &tree, &[])
            .unwrap();
        CommitSha::parse(&id.to_string()).unwrap()
    }

    /// Materializes `base` into a fresh directory as a dispatch would (handed to the sandbox user).
    fn materialize(&self, base: &CommitSha) -> (Result<(), WorkspaceError>, PathBuf) {
        let destination = self
            .root
            .path()
            .join(format!("workspace-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&destination).unwrap();
        let owner = SandboxUser::for_invoker(DEFAULT_SANDBOX_UID).unwrap();
        let result = materialize_within(
            &self.repo,
            base,
            &destination,
            owner,
            &BaseLimits::default(),
        )
        .map(|_| ());
        (result, destination)
    }
}

/// What a directory outside holds, and the owner, mode and times of each entry: compared before
/// and after, it says whether anything was written, chowned or chmoded through a link.
fn state_of(dir: &Path) -> Vec<(PathBuf, u32, u32, u32, i64, i64, u64)> {
    let mut state = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        state.push((
            path.clone(),
            metadata.uid(),
            metadata.gid(),
            metadata.mode(),
            metadata.mtime(),
            metadata.ctime(),
            metadata.len(),
        ));
        if metadata.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        }
    }
    state.sort();
    state
}

/// A link named `a` to a directory of the host, then a directory also named `a` holding a file:
/// a checkout that followed the link would write the file into the host's directory. In either
/// order (git's, the link first; and the reverse, which a raw tree may hold) the second `a` is
/// refused and the host's directory is untouched.
#[test]
fn a_name_written_as_a_link_and_as_a_directory_never_writes_through_the_link() {
    let hostile = Hostile::new();
    let outside = hostile.outside("host-dir");
    let before = state_of(&outside);
    let target = outside.as_os_str().as_encoded_bytes().to_vec();
    let link = hostile.blob(&target);
    let payload = hostile.blob(b"written through the link\n");
    let inner = hostile.raw_tree(&[(b"pwned", payload, FileMode::Blob)]);
    for entries in [
        [
            (&b"a"[..], link, FileMode::Link),
            (&b"a"[..], inner, FileMode::Tree),
        ],
        [
            (&b"a"[..], inner, FileMode::Tree),
            (&b"a"[..], link, FileMode::Link),
        ],
    ] {
        let base = hostile.commit(hostile.raw_tree(&entries));
        let (result, _) = hostile.materialize(&base);
        assert!(result.is_err(), "a name written twice was materialized");
        assert!(!outside.join("pwned").exists(), "written through the link");
        assert_eq!(state_of(&outside), before, "the host's directory changed");
    }
    // A submodule (an empty directory) and a link of the same name: the same.
    let commit = Oid::from_str("1234567890123456789012345678901234567890").unwrap();
    let base = hostile.commit(hostile.raw_tree(&[
        (b"m", link, FileMode::Link),
        (b"m", commit, FileMode::Commit),
    ]));
    let (result, _) = hostile.materialize(&base);
    assert!(result.is_err(), "a gitlink over a link was materialized");
    assert_eq!(state_of(&outside), before, "the host's directory changed");
}

/// A base that is a farm of links to the host (its `/etc`, the user's home, a directory of the
/// host's own, `/proc/self/environ`) is written as links only: handing the workspace to the
/// sandbox user changes no owner, mode or time of anything they point at, and no file of the host
/// is read into the workspace.
#[test]
fn a_symlink_farm_to_the_host_is_written_as_links_and_nothing_it_points_at_changes() {
    let hostile = Hostile::new();
    let outside = hostile.outside("host-home");
    std::fs::set_permissions(outside.join("keep"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = state_of(&outside);
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".to_owned());
    let targets: Vec<(String, Vec<u8>)> = vec![
        ("etc".into(), b"/etc".to_vec()),
        ("passwd".into(), b"/etc/passwd".to_vec()),
        ("home".into(), home.into_bytes()),
        ("environ".into(), b"/proc/self/environ".to_vec()),
        (
            "dir".into(),
            outside.as_os_str().as_encoded_bytes().to_vec(),
        ),
        (
            "file".into(),
            outside.join("keep").as_os_str().as_encoded_bytes().to_vec(),
        ),
        ("up".into(), b"../../../../../../../../".to_vec()),
    ];
    let mut entries = Vec::new();
    for (name, target) in &targets {
        entries.push((name.as_bytes(), hostile.blob(target), FileMode::Link));
    }
    entries.sort_by_key(|entry| entry.0.to_vec());
    let base = hostile.commit(hostile.raw_tree(&entries));
    let (result, workspace) = hostile.materialize(&base);
    result.unwrap();
    for (name, target) in &targets {
        let path = workspace.join(name);
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        assert!(metadata.file_type().is_symlink(), "{name} is not a link");
        assert_eq!(
            std::fs::read_link(&path)
                .unwrap()
                .as_os_str()
                .as_encoded_bytes(),
            target.as_slice()
        );
    }
    assert_eq!(state_of(&outside), before, "a link's target changed");
    let passwd = std::fs::metadata("/etc/passwd").unwrap();
    assert_eq!((passwd.uid(), passwd.mode() & 0o777), (0, 0o644));
}

/// The user's repository configures filter drivers (as git-lfs does, for every repository) and
/// the base's `.gitattributes` names them, with `ident`, `eol=crlf` and `working-tree-encoding`:
/// materializing runs no driver (the marker each would create never appears) and writes every
/// file byte for byte as its blob, so what the host wrote is exactly what was surveyed.
#[test]
fn attributes_naming_filters_run_nothing_on_the_host_and_change_no_byte() {
    let hostile = Hostile::new();
    let marker = hostile.root.path().join("filter-ran");
    let command = format!("touch {}", marker.display());
    for key in [
        "filter.evil.smudge",
        "filter.evil.clean",
        "filter.evil.process",
        "filter.lfs.smudge",
        "filter.lfs.process",
        "diff.evil.textconv",
    ] {
        git(&hostile.repo, &["config", key, &command]);
    }
    git(&hostile.repo, &["config", "filter.evil.required", "true"]);
    let attributes = b"* filter=evil diff=evil ident eol=crlf\n*.txt working-tree-encoding=UTF-16\n*.bin filter=lfs\n";
    let text = b"$Id$\nline one\nline two\n";
    let files: [(&[u8], &[u8]); 4] = [
        (b".gitattributes", attributes),
        (b"a.txt", text),
        (
            b"b.bin",
            b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n",
        ),
        (b"c.rs", b"fn main() {}\n$Id$\n"),
    ];
    let entries: Vec<(&[u8], Oid, FileMode)> = files
        .iter()
        .map(|(name, content)| (*name, hostile.blob(content), FileMode::Blob))
        .collect();
    let base = hostile.commit(hostile.raw_tree(&entries));
    let (result, workspace) = hostile.materialize(&base);
    result.unwrap();
    assert!(!marker.exists(), "a filter driver ran on the host");
    for (name, content) in files {
        let written =
            std::fs::read(workspace.join(String::from_utf8_lossy(name).as_ref())).unwrap();
        assert_eq!(written, content, "{}", String::from_utf8_lossy(name));
    }
}

/// Replace refs, grafts and a `shallow` file in the user's repository (where a fetch of
/// `refs/replace/*` or a tool could leave them) change nothing of what is materialized: the file
/// holds the base's blob, not its replacement, and the replacement's size is never counted.
#[test]
fn replace_refs_and_grafts_do_not_change_what_is_materialized() {
    let hostile = Hostile::new();
    let original = hostile.blob(b"the base's own content\n");
    let replacement = hostile.blob(b"the replacement's content, which must never be written\n");
    let base = hostile.commit(hostile.raw_tree(&[(b"f", original, FileMode::Blob)]));
    git(
        &hostile.repo,
        &["replace", &original.to_string(), &replacement.to_string()],
    );
    let info = hostile.repo.join(".git/info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("grafts"),
        format!("{} {}\n", base.as_str(), "0".repeat(40)),
    )
    .unwrap();
    std::fs::write(
        hostile.repo.join(".git/shallow"),
        format!("{}\n", base.as_str()),
    )
    .unwrap();
    let (result, workspace) = hostile.materialize(&base);
    result.unwrap();
    assert_eq!(
        std::fs::read(workspace.join("f")).unwrap(),
        b"the base's own content\n"
    );
}

/// Names with invalid UTF-8, terminal escapes (an OSC 52 clipboard write, a CSI, C1 controls),
/// bidi and invisible characters, and names differing only in case are written byte for byte (a
/// Linux file system takes them), and nothing lands beside the workspace.
#[test]
fn hostile_names_are_written_byte_for_byte_inside_the_workspace() {
    let hostile = Hostile::new();
    let payload = random_token(8).unwrap();
    let escape = format!("\u{1b}]52;c;{payload}\u{7}x\u{9b}2J\u{202e}\u{200b}");
    let names: Vec<Vec<u8>> = vec![
        b"\xff\xfe-not-utf8".to_vec(),
        escape.into_bytes(),
        b"README".to_vec(),
        b"readme".to_vec(),
        b"ReadMe".to_vec(),
        b"..\xc0\xaf".to_vec(),
    ];
    let content = hostile.blob(b"x\n");
    let mut entries: Vec<(&[u8], Oid, FileMode)> = names
        .iter()
        .map(|name| (name.as_slice(), content, FileMode::Blob))
        .collect();
    entries.sort_by_key(|entry| entry.0.to_vec());
    let base = hostile.commit(hostile.raw_tree(&entries));
    let beside: Vec<_> = std::fs::read_dir(hostile.root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let (result, workspace) = hostile.materialize(&base);
    result.unwrap();
    for name in &names {
        let path = workspace.join(OsStr::from_bytes(name));
        assert_eq!(std::fs::read(&path).unwrap(), b"x\n");
    }
    let mut after: Vec<_> = std::fs::read_dir(hostile.root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    after.retain(|name| !beside.contains(name) && name != workspace.file_name().unwrap());
    assert_eq!(
        after,
        Vec::<std::ffi::OsString>::new(),
        "written beside the workspace"
    );
}

// ---------------------------------------------------------------------------------------------
// The inbox
// ---------------------------------------------------------------------------------------------

/// A brief stet could dispatch, with `canary` in its item.
fn brief_text(title: &str, canary: &str) -> String {
    format!(
        "title = \"{title}\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"test/notes\"\nbase = \"main\"\n\n[[items]]\ntext = \"Say {canary}.\"\n"
    )
}

/// Runs `load` on a thread of its own and gives up loudly after a minute: an inbox entry that
/// blocks its reader (a FIFO opened to read) would otherwise hang the test.
fn within_a_minute<T: Send + 'static>(what: &str, load: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(load());
    });
    receiver
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} did not return within a minute: it blocked"))
}

/// Inbox entries a checkout of a repository (or a tool beside it) can leave: a FIFO, a link to a
/// device, a link to a brief outside the repository, a directory named like a brief. None blocks
/// the listing, none is read, and each is shown as an invalid entry; a sparse brief of a TiB
/// refuses the inbox from its metadata alone.
#[test]
fn inbox_entries_that_are_fifos_devices_links_or_a_sparse_tib_are_never_read() {
    let root = tempfile::tempdir().unwrap();
    let inbox = root.path().join(".stet/briefs");
    std::fs::create_dir_all(&inbox).unwrap();
    let canary = random_token(12).unwrap();
    let outside = root.path().join("private.toml");
    std::fs::write(&outside, brief_text("Private", &canary)).unwrap();
    let made = Command::new("mkfifo")
        .arg(inbox.join("fifo.toml"))
        .status()
        .unwrap();
    assert!(made.success());
    symlink("/dev/zero", inbox.join("zero.toml")).unwrap();
    symlink(&outside, inbox.join("outside.toml")).unwrap();
    std::fs::create_dir(inbox.join("dir.toml")).unwrap();
    std::fs::write(inbox.join("real.toml"), brief_text("Real", "x")).unwrap();

    let listed = inbox.clone();
    let loaded = within_a_minute("listing the inbox", move || {
        Inbox::load_within(&listed, &InboxLimits::default())
    })
    .unwrap();
    let mut shown = Vec::new();
    for entry in loaded.entries() {
        let name = entry
            .path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        match &entry.brief {
            Ok(brief) => shown.push(format!("{name}: ok {}", brief.title)),
            Err(BriefError::NotAFile { .. }) => shown.push(format!("{name}: not a file")),
            Err(BriefError::Link { .. }) => shown.push(format!("{name}: link")),
            Err(other) => panic!("{name}: {other}"),
        }
    }
    assert_eq!(
        shown,
        [
            "fifo.toml: not a file",
            "outside.toml: link",
            "real.toml: ok Real",
            "zero.toml: link",
        ]
    );
    let fifo = inbox.join("fifo.toml");
    let read = within_a_minute("reading the FIFO as a brief", move || {
        Brief::from_file(&fifo).map(|_| ())
    });
    assert!(matches!(read, Err(BriefError::NotAFile { .. })), "{read:?}");

    let sparse = std::fs::File::create(inbox.join("huge.toml")).unwrap();
    sparse.set_len(1 << 40).unwrap();
    let listed = inbox.clone();
    let refused = within_a_minute("listing an inbox holding a TiB", move || {
        Inbox::load_within(&listed, &InboxLimits::default()).map(|_| ())
    });
    let message = refused.as_ref().unwrap_err().to_string();
    assert!(
        matches!(refused, Err(InboxError::TooLarge { .. })),
        "{message}"
    );
    assert!(message.contains("inbox.max_total_bytes"), "{message}");
}

/// TOML built to be costly within a brief's 1 MiB: arrays, inline tables, dotted keys and table
/// headers nested 400,000 deep (a parser that recursed for each would overflow its stack and abort
/// the whole process), and 80,000 tiny inline tables (seconds and over 100 MiB to parse). Each is
/// refused, naming the file, and the process lives on.
#[test]
fn brief_toml_nested_deep_or_packed_with_values_is_refused_without_overflowing_the_stack() {
    let deep = 400_000;
    let head = "title = \"Deep\"\nworkflow = \"implement\"\n";
    let shapes = [
        format!("{head}x = {}{}\n", "[".repeat(deep), "]".repeat(deep)),
        format!(
            "{head}x = {}1{}\n",
            "{a=".repeat(deep / 3),
            "}".repeat(deep / 3)
        ),
        format!("{head}{} = 1\n", vec!["a"; deep].join(".")),
        format!("{head}[{}]\n", vec!["a"; deep].join(".")),
        format!("{head}items = [{}]\n", "{text=\"a\"},".repeat(80_000)),
    ];
    for (index, text) in shapes.iter().enumerate() {
        assert!(
            text.len() <= 1 << 20,
            "shape {index} is {} bytes",
            text.len()
        );
        let text = text.clone();
        let parsed = within_a_minute("parsing a costly brief", move || {
            Brief::parse("costly", Path::new("costly.toml"), &text).map(|brief| brief.items.len())
        });
        let message = parsed.unwrap_err().to_string();
        assert!(
            message.starts_with("costly.toml:"),
            "shape {index}: {message}"
        );
    }
}

/// `/usr/bin/time -f %M stet <args>` in `project`'s repository: exit code, stderr, peak RSS in KiB.
fn measured(project: &Project, args: &[&str]) -> (Option<i32>, String, u64) {
    let rss = project.home.path().join("rss.txt");
    let mut command = Command::new("/usr/bin/time");
    command
        .arg("-o")
        .arg(&rss)
        .args(["-f", "%M", env!("CARGO_BIN_EXE_stet")])
        .args(args)
        .env("XDG_STATE_HOME", project.home.path().join("state"))
        .env("XDG_CONFIG_HOME", project.home.path().join("config"))
        .current_dir(&project.repo)
        .stdin(std::process::Stdio::null());
    for variable in STET_VARIABLES {
        command.env_remove(variable);
    }
    let output = command.output().unwrap();
    let peak = std::fs::read_to_string(&rss)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        peak,
    )
}

/// The most memory stet may use refusing a costly inbox or brief: what it costs before it reads
/// anything (about 25 MiB) and the inbox's 16 MiB of text.
const COSTLY_REFUSAL_KIB: u64 = 96 * 1024;

/// An inbox within its count (1,000) and byte (16 MiB) limits whose briefs are shaped to be costly
/// to parse: fifteen valid briefs of ~1 MiB of tiny inline tables each (`{text="a"},`). Reading it
/// as the theater does before its first frame (`stet --headless --all` reads the same way, and a
/// last invalid brief stops it before any dispatch) took 86 s and 450 MiB of peak RSS (debug
/// build), past the theater's 256 MiB budget: now the inbox is refused from the marks counted
/// while reading it, and one such brief named alone is refused too, each in bounded memory.
#[test]
fn an_inbox_of_briefs_shaped_to_be_costly_is_refused_before_any_is_parsed() {
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let inbox = project.repo.join(".stet/briefs");
    let head = "title = \"Costly\"\nworkflow = \"implement\"\nitems = [";
    let tail = "]\n\n[target]\nrepo = \"test/notes\"\nbase = \"main\"\n";
    let count = (1_000_000 - head.len() - tail.len()) / 12;
    let costly = format!("{head}{}{tail}", "{text=\"a\"},".repeat(count));
    for index in 0..15 {
        std::fs::write(inbox.join(format!("b{index:02}.toml")), &costly).unwrap();
    }
    std::fs::write(inbox.join("zz.toml"), "title = 1\n").unwrap();
    let started = std::time::Instant::now();
    let (code, stderr, peak) = measured(&project, &["--headless", "--all"]);
    let took = started.elapsed();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not parsed"), "{stderr}");
    assert!(
        stderr.contains("TOML keys, values and brackets"),
        "{stderr}"
    );
    assert!(
        peak < COSTLY_REFUSAL_KIB,
        "peak RSS {peak} KiB refusing the inbox"
    );
    assert!(
        took < Duration::from_secs(30),
        "refusing the inbox took {took:?}"
    );

    let (code, stderr, peak) = measured(&project, &["--headless", "--brief", "b00"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not parsed"), "{stderr}");
    assert!(
        peak < COSTLY_REFUSAL_KIB,
        "peak RSS {peak} KiB refusing one brief"
    );
}

// ---------------------------------------------------------------------------------------------
// Links on the command line's way into the inbox
// ---------------------------------------------------------------------------------------------

/// `stet --headless --brief NAME` reads the inbox's `NAME.toml`: a repository that makes that
/// file, `.stet/briefs` or `.stet` a link to a brief of the user's elsewhere (a private
/// repository's, say) must not get it dispatched, its items sent to the agent and its words into
/// a pull request. Each is refused as a link, before any dispatch: no run record, no review, the
/// private brief's canary in no output.
#[test]
fn a_brief_named_on_the_command_line_is_never_read_through_a_link() {
    for linked in ["file", "briefs", "dot-stet"] {
        let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
        let canary = random_token(12).unwrap();
        let private = project.home.path().join("private");
        std::fs::create_dir_all(private.join(".stet/briefs")).unwrap();
        let private_brief = private.join(".stet/briefs/tidy-notes.toml");
        std::fs::write(&private_brief, brief_text("A private brief", &canary)).unwrap();
        let dot_stet = project.repo.join(".stet");
        std::fs::remove_dir_all(&dot_stet).unwrap();
        match linked {
            "file" => {
                std::fs::create_dir_all(dot_stet.join("briefs")).unwrap();
                symlink(&private_brief, dot_stet.join("briefs/tidy-notes.toml")).unwrap();
            }
            "briefs" => {
                std::fs::create_dir_all(&dot_stet).unwrap();
                symlink(private.join(".stet/briefs"), dot_stet.join("briefs")).unwrap();
            }
            _ => symlink(private.join(".stet"), &dot_stet).unwrap(),
        }
        let output = project.headless(&[]).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{linked}: {stderr}\n{stdout}"
        );
        assert!(stderr.contains("link"), "{linked}: {stderr}");
        assert!(
            !stdout.contains(&canary) && !stderr.contains(&canary),
            "{linked}: the private brief was read"
        );
        assert!(
            !project.home.state().join("runs").exists()
                || std::fs::read_dir(project.home.state().join("runs"))
                    .unwrap()
                    .next()
                    .is_none(),
            "{linked}: a dispatch began"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Every sink, under a real terminal
// ---------------------------------------------------------------------------------------------

/// What a hostile repository writes where a terminal would act on it: an OSC 52 clipboard write
/// (ESC and C1 forms), a CSI, bidi controls, a zero-width space, tag characters spelling hidden
/// ASCII, a Hangul filler and a BOM.
fn hostile_text() -> String {
    let payload = random_token(8).unwrap();
    format!(
        "\u{1b}]52;c;{payload}\u{7}\u{9d}52;c;{payload}\u{9c}\u{9b}2J\u{202e}\u{2066}\u{200f}\u{200b}\u{e0041}\u{e0042}\u{3164}\u{feff}"
    )
}

/// A TOML basic string holding `text`, every character outside printable ASCII written as an
/// escape (TOML takes `\uXXXX` and `\UXXXXXXXX`).
fn toml_escaped(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            ' '..='~' => quoted.push(c),
            c if u32::from(c) <= 0xffff => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    quoted.push('"');
    quoted
}

/// Briefs whose file names, keys and values carry terminal escapes, C1, bidi and invisible
/// characters, each refused by `stet --headless` (named one by one, and `--all`) with an error on
/// a real terminal that shows none of them raw.
#[test]
fn hostile_briefs_are_refused_on_a_terminal_with_no_character_raw() {
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let inbox = project.repo.join(".stet/briefs");
    let hostile = hostile_text();
    let field = toml_escaped(&hostile);
    let good = brief_text("Fine", "x");
    let briefs = [
        ("evil-key", format!("{good}{field} = 1\n")),
        (
            "evil-title",
            good.replace("title = \"Fine\"", &format!("title = {field}")),
        ),
        (
            "evil-workflow",
            good.replace("workflow = \"implement\"", &format!("workflow = {field}")),
        ),
        (
            "evil-repo",
            good.replace("repo = \"test/notes\"", &format!("repo = {field}")),
        ),
        (
            "evil-base",
            good.replace("base = \"main\"", &format!("base = {field}")),
        ),
        (
            "evil-branch",
            good.replace("[target]\n", &format!("[target]\nbranch = {field}\n")),
        ),
        (
            "evil-anchor",
            format!(
                "{}\nanchor = {{ path = {field}, lines = [1, 2] }}\n",
                good.trim_end()
            ),
        ),
        ("evil-toml", format!("{good}\n[{field}\n")),
    ];
    for (name, text) in &briefs {
        std::fs::write(inbox.join(format!("{name}.toml")), text).unwrap();
        let (status, shown) = on_a_terminal(
            &project.home,
            &project.repo,
            &["--headless", "--brief", name],
        );
        let text = String::from_utf8_lossy(&shown);
        assert_eq!(status, 2, "{name}: {text}");
        assert_eq!(
            hidden_characters(&shown),
            Vec::<String>::new(),
            "{name}: {text:?}"
        );
        std::fs::remove_file(inbox.join(format!("{name}.toml"))).unwrap();
    }
    let mut named = hostile.into_bytes();
    named.extend_from_slice(b"\xff.toml");
    std::fs::write(inbox.join(OsStr::from_bytes(&named)), good).unwrap();
    let (status, shown) = on_a_terminal(&project.home, &project.repo, &["--headless", "--all"]);
    let text = String::from_utf8_lossy(&shown);
    assert_eq!(status, 2, "--all: {text}");
    assert!(text.contains("brief id"), "--all: {text}");
    assert_eq!(
        hidden_characters(&shown),
        Vec::<String>::new(),
        "--all: {text:?}"
    );
}

/// A repository whose `stet.toml` carries the hostile characters in a key and a value, and whose
/// `.stet` is a link: `stet doctor` and `stet sweep` in it report the problem on a real terminal
/// with none of them raw.
#[test]
fn doctor_and_sweep_in_a_hostile_repository_show_no_character_raw() {
    super::headless::docker_ready();
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let field = toml_escaped(&hostile_text());
    for config in [
        format!("{field} = 1\n"),
        format!("[dispatch]\ntimeout_seconds = {field}\n"),
        format!("[harness.script]\npace = 0\n[{field}]\n"),
    ] {
        std::fs::write(project.repo.join("stet.toml"), &config).unwrap();
        for args in [&["doctor"][..], &["sweep"][..]] {
            let (_, shown) = on_a_terminal(&project.home, &project.repo, args);
            let text = String::from_utf8_lossy(&shown);
            assert!(text.contains("stet.toml"), "stet {args:?}: {text}");
            assert_eq!(
                hidden_characters(&shown),
                Vec::<String>::new(),
                "stet {args:?} with {config:?}: {text:?}"
            );
        }
    }
}

/// A branch `hostile` of the project's remote, fetched, whose tree is the project's `main` with
/// `extra` (name, content) files added: a branch a clone fetches but never checks out.
fn hostile_base(project: &Project, extra: &[(&[u8], &[u8])]) {
    let repo = Repository::open(&project.repo).unwrap();
    let main = repo
        .revparse_single("main")
        .unwrap()
        .peel_to_commit()
        .unwrap();
    let mut raw = Vec::new();
    for (name, content) in extra {
        raw.push((name.to_vec(), repo.blob(content).unwrap()));
    }
    let existing: Vec<(Vec<u8>, Oid, i32)> = main
        .tree()
        .unwrap()
        .iter()
        .map(|entry| (entry.name_bytes().to_vec(), entry.id(), entry.filemode()))
        .collect();
    let mut entries: Vec<(Vec<u8>, Oid, i32)> = existing;
    for (name, id) in raw {
        entries.push((name, id, i32::from(FileMode::Blob)));
    }
    entries.sort_by_key(|(name, _, mode)| {
        let mut key = name.clone();
        if *mode == i32::from(FileMode::Tree) {
            key.push(b'/');
        }
        key
    });
    let mut tree = Vec::new();
    for (name, id, mode) in entries {
        tree.extend_from_slice(format!("{mode:o} ").as_bytes());
        tree.extend_from_slice(&name);
        tree.push(0);
        tree.extend_from_slice(id.as_bytes());
    }
    let tree = repo.odb().unwrap().write(ObjectType::Tree, &tree).unwrap();
    let tree = repo.find_tree(tree).unwrap();
    let signature = Signature::now("hostile", "hostile@example.invalid").unwrap();
    let commit = repo
        .commit(None, &signature, &signature, "hostile", &tree, &[&main])
        .unwrap();
    git(
        &project.repo,
        &[
            "push",
            "-q",
            "origin",
            &format!("{commit}:refs/heads/hostile"),
        ],
    );
    git(&project.repo, &["fetch", "-q", "origin", "hostile"]);
    let brief = project.repo.join(".stet/briefs/tidy-notes.toml");
    let text = std::fs::read_to_string(&brief).unwrap();
    std::fs::write(
        &brief,
        text.replace("base = \"main\"", "base = \"hostile\""),
    )
    .unwrap();
}

/// Every file of every run record: its name, and each character the display policy would not
/// show (the JSON's own newlines aside).
fn hidden_in_run_records(home: &Home) -> Vec<(PathBuf, Vec<String>)> {
    let mut found = Vec::new();
    let runs = home.state().join("runs");
    for run in std::fs::read_dir(&runs).unwrap() {
        for file in std::fs::read_dir(run.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            if path
                .extension()
                .is_some_and(|extension| extension == "patch")
            {
                continue;
            }
            let hidden = hidden_characters(&std::fs::read(&path).unwrap());
            if !hidden.is_empty() {
                found.push((path, hidden));
            }
        }
    }
    found
}

/// A whole dispatch from a hostile repository, pushed to its (local) forge: the brief's title and
/// item carry every invisible character a brief may hold, and the base holds files named with
/// terminal escapes, C1, bidi and invisible characters (carried over unchanged). On a
/// real terminal the headless JSON lines and progress show none raw, nor does any file of the run
/// record, nor `stet reviews` and `stet reviews 1`.
#[test]
fn a_dispatch_from_a_hostile_repository_shows_no_character_raw_in_any_sink() {
    super::headless::docker_ready();
    let hostile = hostile_text();
    let allowed: String = hostile
        .chars()
        .filter(|c| !stet_engine::brief::is_control_or_direction_override(*c))
        .collect();
    let project = Project::new(&scenario(&[
        "write = { path = \"src/notes.txt\", content = \"one\\ntwo\\n\" }",
        "finish = \"Edited the notes.\"",
    ]));
    let name = format!("{hostile}.txt").into_bytes();
    let mut invalid = b"\xff\xfe".to_vec();
    invalid.extend_from_slice(hostile.as_bytes());
    hostile_base(&project, &[(&name, b"base\n"), (&invalid, b"base\n")]);
    let brief = project.repo.join(".stet/briefs/tidy-notes.toml");
    let text = std::fs::read_to_string(&brief).unwrap();
    let text = text
        .replace(
            "title = \"Tidy the notes\"",
            &format!("title = {}", toml_escaped(&format!("Tidy {allowed} notes"))),
        )
        .replace(
            "text = \"Tidy up the notes and say what changed.\"",
            &format!("text = {}", toml_escaped(&format!("Tidy {allowed} up."))),
        );
    std::fs::write(&brief, text).unwrap();
    git(&project.repo, &["add", "--all"]);
    git(&project.repo, &["commit", "-q", "-m", "hostile brief"]);

    let (status, shown) = on_a_terminal(
        &project.home,
        &project.repo,
        &["--headless", "--brief", "tidy-notes", "--push"],
    );
    let text = String::from_utf8_lossy(&shown);
    assert_eq!(status, 0, "{text}");
    assert!(text.contains("\"kind\":\"pull_request\""), "{text}");
    assert_eq!(hidden_characters(&shown), Vec::<String>::new(), "{text:?}");
    assert_eq!(hidden_in_run_records(&project.home), Vec::new());
    for args in [&["reviews"][..], &["reviews", "1"][..]] {
        let (status, shown) = on_a_terminal(&project.home, &project.repo, args);
        let text = String::from_utf8_lossy(&shown);
        assert_eq!(status, 0, "stet {args:?}: {text}");
        assert_eq!(
            hidden_characters(&shown),
            Vec::<String>::new(),
            "stet {args:?}: {text:?}"
        );
    }
}

/// A base holding a file whose name no file system takes (300 bytes) and carries terminal
/// escapes: the dispatch fails at materialization, and its reason reaches the terminal (JSON
/// line and progress) and the run record with none of the characters raw.
#[test]
fn a_base_name_no_checkout_writes_fails_with_a_reason_shown_safe() {
    super::headless::docker_ready();
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let mut name = hostile_text().into_bytes();
    name.extend(std::iter::repeat_n(b'n', 300));
    hostile_base(&project, &[(&name, b"x\n")]);
    let (status, shown) = on_a_terminal(
        &project.home,
        &project.repo,
        &["--headless", "--brief", "tidy-notes"],
    );
    let text = String::from_utf8_lossy(&shown);
    assert_ne!(status, 0, "{text}");
    assert!(text.contains("\"kind\":\"finished\""), "{text}");
    assert!(
        text.contains("nnnnnnnn"),
        "the reason names the file: {text}"
    );
    assert_eq!(hidden_characters(&shown), Vec::<String>::new(), "{text:?}");
    assert_eq!(hidden_in_run_records(&project.home), Vec::new());
}

/// A clone's directory is named after its URL, so its path is outside input too: `stet --headless`
/// (its configuration line and the dispatch's progress) and `stet trust` (trusting, listing,
/// revoking) show a repository whose directory name carries terminal escapes, C1, bidi and
/// invisible characters without any of them raw.
#[test]
fn a_repository_directory_named_with_hidden_characters_is_shown_safe() {
    super::headless::docker_ready();
    let project = Project::new(&scenario(&["finish = \"Nothing to do.\""]));
    let named = project
        .repo
        .with_file_name(format!("repo{}", hostile_text()));
    std::fs::rename(&project.repo, &named).unwrap();
    // A file to trust (one setting a repository may set anyway), kept with whatever the project holds.
    let file = named.join("stet.toml");
    let held = std::fs::read_to_string(&file).unwrap_or_default();
    std::fs::write(&file, format!("{held}\n[import]\nmax_files = 50000\n")).unwrap();
    for args in [
        &["--headless", "--brief", super::headless::BRIEF][..],
        &["trust"][..],
        &["trust", "--list"][..],
        &["trust", "--revoke"][..],
    ] {
        let (code, shown) = on_a_terminal(&project.home, &named, args);
        let text = String::from_utf8_lossy(&shown);
        assert!(
            code == 0 && text.contains("repo"),
            "stet {args:?} ({code}): {text}"
        );
        assert_eq!(
            hidden_characters(&shown),
            Vec::<String>::new(),
            "stet {args:?}: {text:?}"
        );
    }
    std::fs::rename(&named, &project.repo).unwrap();
}
