//! The layering ARCHITECTURE.md describes, checked so that it cannot rot: the pure crates pull in no
//! runtime and the theater no engine (read from `Cargo.lock`, so a dependency's own dependencies
//! count), the engine's files never name the theater, no two source files depend on each other in a
//! cycle, and the engine's top-level modules stand on floors, each importing only from the floors
//! below its own (the few known exceptions listed, to be taken out).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What a crate with no runtime must not reach, directly or through anything it depends on.
const RUNTIMES: &[&str] = &[
    "tokio",
    "bollard",
    "hyper",
    "git2",
    "crossterm",
    "ratatui",
    "stet",
];

/// `Cargo.lock`'s graph: each package name and the names it depends on.
fn locked_graph() -> BTreeMap<String, Vec<String>> {
    let lock: toml::Table = std::fs::read_to_string(Path::new(ROOT).join("Cargo.lock"))
        .unwrap()
        .parse()
        .unwrap();
    let mut graph = BTreeMap::new();
    for package in lock["package"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap().to_owned();
        let dependencies = package
            .get("dependencies")
            .and_then(|d| d.as_array())
            .map(|list| {
                list.iter()
                    .map(|d| d.as_str().unwrap().split(' ').next().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        graph
            .entry(name)
            .or_insert_with(Vec::new)
            .extend::<Vec<String>>(dependencies);
    }
    graph
}

/// Every package `name` reaches in `graph`, itself excluded.
fn closure(graph: &BTreeMap<String, Vec<String>>, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_owned()];
    while let Some(next) = todo.pop() {
        for dependency in graph.get(&next).into_iter().flatten() {
            if seen.insert(dependency.clone()) {
                todo.push(dependency.clone());
            }
        }
    }
    seen
}

/// What the theater must not reach: the engine and what only the engine needs.
const ENGINE: &[&str] = &["stet-engine", "stet", "bollard", "git2", "hyper", "tar"];

/// What the engine must not reach: the terminal and the theater.
const TERMINAL: &[&str] = &["stet-tui", "crossterm", "ratatui", "tui-input", "stet"];

#[test]
fn the_theater_reaches_no_engine() {
    let graph = locked_graph();
    let reached = closure(&graph, "stet-tui");
    for engine in ENGINE {
        assert!(
            !reached.contains(*engine),
            "stet-tui reaches {engine}: {reached:?}"
        );
    }
    assert!(
        reached.contains("stet-protocol"),
        "it reads the engine's events"
    );
    assert!(
        closure(&graph, "stet").contains("stet-tui"),
        "the executable carries the theater"
    );
}

#[test]
fn the_engine_reaches_no_terminal() {
    let graph = locked_graph();
    let reached = closure(&graph, "stet-engine");
    for terminal in TERMINAL {
        assert!(
            !reached.contains(*terminal),
            "stet-engine reaches {terminal}: {reached:?}"
        );
    }
    assert!(
        closure(&graph, "stet").contains("stet-engine"),
        "the executable carries the engine"
    );
}

#[test]
fn the_pure_crates_reach_no_runtime() {
    let graph = locked_graph();
    for pure in ["stet-sanitize", "stet-protocol"] {
        assert!(graph.contains_key(pure), "{pure} is in the workspace");
        let reached = closure(&graph, pure);
        for runtime in RUNTIMES {
            assert!(
                !reached.contains(*runtime),
                "{pure} reaches {runtime}: {reached:?}"
            );
        }
    }
    assert!(
        closure(&graph, "stet-protocol").contains("stet-sanitize"),
        "the events carry sanitized text"
    );
    assert!(
        !closure(&graph, "stet-sanitize").contains("stet-protocol"),
        "the sanitizer knows nothing of events"
    );
}

/// What the sandbox side must not reach: everything of the host's (the engine, the forges, git, the
/// terminal, TLS to the outside).
const HOST: &[&str] = &[
    "stet-engine",
    "stet-tui",
    "stet",
    "bollard",
    "git2",
    "crossterm",
    "ratatui",
    "tar",
    "ring",
    "hyper-rustls",
];

#[test]
fn the_sandbox_side_reaches_only_the_protocol() {
    let graph = locked_graph();
    let reached = closure(&graph, "stet-sandbox");
    for host in HOST {
        assert!(
            !reached.contains(*host),
            "stet-sandbox reaches {host}: {reached:?}"
        );
    }
    assert!(
        reached.contains("stet-protocol"),
        "it prints the agent records the harness reads"
    );
    assert!(
        closure(&graph, "stet").contains("stet-sandbox"),
        "the package builds the sandbox executable"
    );
}

/// The engine takes the engine ↔ sandbox contract (mounts, socket names, relay ports, the scenario
/// format) from the protocol, never from the sandbox side's code: its manifest names no
/// `stet-sandbox` in any dependency table, and nothing it reaches (dev-dependencies included, as
/// `Cargo.lock` lists them) does.
#[test]
fn the_engine_reaches_the_sandbox_side_only_through_the_protocol() {
    let manifest: toml::Table =
        std::fs::read_to_string(Path::new(ROOT).join("crates/stet-engine/Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
    for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
        let named = manifest
            .get(table)
            .and_then(|t| t.as_table())
            .is_some_and(|t| t.contains_key("stet-sandbox"));
        assert!(
            !named,
            "crates/stet-engine/Cargo.toml [{table}] names stet-sandbox"
        );
    }
    let graph = locked_graph();
    let reached = closure(&graph, "stet-engine");
    assert!(
        !reached.contains("stet-sandbox"),
        "stet-engine reaches stet-sandbox: {reached:?}"
    );
    assert!(
        reached.contains("stet-protocol"),
        "the engine speaks the contract"
    );
}

/// By effect, in the executables this build made: the one the image carries links no code of the
/// host's crates (their symbols are not in it), while the host's `stet` does (the control).
#[test]
fn the_sandbox_executable_carries_no_host_code() {
    let sandbox = std::fs::read(env!("CARGO_BIN_EXE_stet-sandbox")).unwrap();
    let host = std::fs::read(env!("CARGO_BIN_EXE_stet")).unwrap();
    let holds = |binary: &[u8], name: &str| {
        binary
            .windows(name.len())
            .any(|window| window == name.as_bytes())
    };
    for crate_name in [
        "stet_engine",
        "stet_tui",
        "bollard",
        "git2",
        "ratatui",
        "crossterm",
    ] {
        assert!(
            holds(&host, crate_name),
            "the control: stet holds {crate_name}"
        );
        assert!(
            !holds(&sandbox, crate_name),
            "stet-sandbox holds {crate_name}"
        );
    }
    assert!(holds(&sandbox, "stet_sandbox"), "the sandbox side is there");
    assert!(
        sandbox.len() * 2 < host.len(),
        "stet-sandbox is {} bytes, stet {}",
        sandbox.len(),
        host.len()
    );
}

/// A source file of a library crate and the module path it defines (`dispatch::run::agent`).
struct SourceFile {
    module: Vec<String>,
    text: String,
}

/// The workspace's library crates, each by its directory under `crates/`.
const LIBRARIES: &[&str] = &[
    "stet-sanitize",
    "stet-protocol",
    "stet-sandbox",
    "stet-scripted-model",
    "stet-tui",
    "stet-engine",
];

/// The source files of the library crate in `crates/<library>/`.
fn library_files(library: &str) -> Vec<SourceFile> {
    let src = Path::new(ROOT).join("crates").join(library).join("src");
    let mut files = Vec::new();
    let mut todo = vec![src.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            files.push(SourceFile {
                module: module_of(&src, &path),
                text: std::fs::read_to_string(&path).unwrap(),
            });
        }
    }
    files
}

fn module_of(src: &Path, path: &Path) -> Vec<String> {
    let relative: PathBuf = path.strip_prefix(src).unwrap().with_extension("");
    let mut module: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if module
        .last()
        .is_some_and(|last| last == "mod" || last == "lib")
    {
        module.pop();
    }
    module
}

/// The code of a file without its `#[cfg(test)]` module and comments: tests may reach anywhere.
fn production_code(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules a file names: `crate::a::b::{c, d}` and `super::x` (resolved against its own path),
/// each cut to the longest prefix that is a module with a file of its own.
fn named_modules(file: &SourceFile, modules: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let code = production_code(&file.text);
    let mut named = BTreeSet::new();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let at_word = i == 0 || !is_ident(bytes[i - 1]);
        let base: Option<(Vec<String>, usize)> = if at_word && rest.starts_with("crate::") {
            Some((Vec::new(), 7))
        } else if at_word && rest.starts_with("super::") {
            let mut parent = file.module.clone();
            parent.pop();
            Some((parent, 7))
        } else {
            None
        };
        let Some((mut path, skip)) = base else {
            i += 1;
            continue;
        };
        i += skip;
        loop {
            let start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            if start == i {
                break;
            }
            path.push(bytes[start..i].iter().collect());
            if bytes.get(i) == Some(&':') && bytes.get(i + 1) == Some(&':') {
                i += 2;
            } else {
                break;
            }
        }
        while !path.is_empty() && !modules.contains(&path) {
            path.pop();
        }
        if !path.is_empty() {
            named.insert(path);
        }
    }
    named
}

/// The file-level dependency graph, leaving out a file's references to its own ancestors (a child
/// module using its parent's types is the parent's namespace, not a dependency cycle) and to itself.
fn dependency_graph(library: &str) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = library_files(library);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    files
        .iter()
        .map(|file| {
            let edges = named_modules(file, &modules)
                .into_iter()
                .filter(|target| !file.module.starts_with(target))
                .collect();
            (file.module.clone(), edges)
        })
        .collect()
}

/// Each strongly connected set of more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        on_stack: BTreeSet<&'g Vec<String>>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g Vec<String>) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let Some((next, _)) = self.graph.get_key_value(next) else {
                    continue;
                };
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut members = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    members.push(top.join("::"));
                    if top == node {
                        break;
                    }
                }
                if members.len() > 1 {
                    members.sort();
                    self.found.push(members);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let module = |name: &str| vec![name.to_owned()];
    let graph = BTreeMap::from([
        (module("a"), BTreeSet::from([module("b")])),
        (module("b"), BTreeSet::from([module("c")])),
        (module("c"), BTreeSet::from([module("a")])),
        (module("d"), BTreeSet::from([module("a")])),
    ]);
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
}

#[test]
fn no_two_library_files_depend_on_each_other() {
    assert!(
        dependency_graph("stet-engine")
            .contains_key(&vec!["dispatch".to_owned(), "service".to_owned()]),
        "the walk found the engine's files"
    );
    for library in LIBRARIES {
        let graph = dependency_graph(library);
        assert!(graph.len() > 1, "the walk found {library}'s files");
        let found = cycles(&graph);
        assert!(found.is_empty(), "module cycles in {library}: {found:#?}");
    }
}

#[test]
fn the_engine_never_names_the_theater() {
    let files = library_files("stet-engine");
    assert!(files.len() > 50, "the walk found the library's files");
    for file in &files {
        let code = production_code(&file.text);
        assert!(
            !code.contains("stet_tui"),
            "{} names the theater; only the executable (src/cli/) may",
            file.module.join("::")
        );
    }
}

/// Every file or directory ARCHITECTURE.md names in backticks exists, so a newcomer following it
/// lands on the seam.
#[test]
fn every_path_the_architecture_names_exists() {
    let root = Path::new(ROOT);
    let page = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut named = 0;
    for quoted in page.split('`').skip(1).step_by(2) {
        let path = quoted.split_whitespace().next().unwrap_or_default();
        let rooted = ["src/", "crates/", "docs/", "docker/", "tests/"]
            .iter()
            .any(|top| path.starts_with(top));
        if rooted && !path.contains('<') {
            named += 1;
            assert!(
                root.join(path).exists(),
                "ARCHITECTURE.md names {path}, which does not exist"
            );
        }
    }
    assert!(named > 20, "the page names its files ({named})");
}

/// The engine's floors, lowest first (ARCHITECTURE.md, "The engine's floors"): each top-level module
/// of `crates/stet-engine/src` (a file or a folder) stands on one, and may import only what stands on
/// a floor below its own. A new module gets a floor here before it builds; an import that runs up
/// or sideways fails [`the_engine_imports_only_from_the_floors_below`] unless [`KNOWN_UPWARD`] names it.
const FLOORS: &[&[&str]] = &[
    // The ground: they import nothing of the engine's.
    &[
        "check",
        "error_chain",
        "human",
        "https",
        "image",
        "kinds",
        "private_files",
        "unix_server",
        "untrusted_tree",
        "workflow",
    ],
    // The shared types: the credential a dispatch holds, where state lives; the tar reader over the
    // tree walk's rules.
    &["credential", "state_dir", "untrusted_tar"],
    &["egress", "gateway", "runtime"],
    &["git"],
    &["forge", "harness"],
    &["dispatch"],
    &["config", "logging"],
    // The assembly: what the executable calls.
    &["demo", "doctor", "engine"],
];

/// The names `lib.rs` re-exports from other crates (`crate::brief` is `stet_protocol::brief`): no
/// floor of the engine's.
const REEXPORTED: &[&str] = &["brief", "inbox"];

/// The imports that run up a floor, each `(from, to, why)`. Issue 28 took out the seven it found
/// and the eighth it met (the credential types, `UsageReport`, the HTTPS client and the shown sizes
/// moved to lower floors, the re-exports of `dispatch/mod.rs` gone, the forge chosen from its own
/// settings); none is left. No new one may join without its reason here.
const KNOWN_UPWARD: &[(&str, &str, &str)] = &[];

/// The engine's top-level modules: each file and folder of `src/` but `lib.rs`.
fn engine_modules() -> BTreeSet<String> {
    let src = Path::new(ROOT).join("crates/stet-engine/src");
    std::fs::read_dir(&src)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir() || path.extension().is_some_and(|e| e == "rs"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|name| name != "lib")
        .collect()
}

/// The floor each module stands on.
fn floor_of() -> BTreeMap<&'static str, usize> {
    let mut floors = BTreeMap::new();
    for (floor, modules) in FLOORS.iter().enumerate() {
        for module in *modules {
            assert!(
                floors.insert(*module, floor).is_none(),
                "{module} stands on two floors"
            );
        }
    }
    floors
}

/// The top-level modules `code` names through `crate::`: `crate::a::b`, `crate::{a, b::c}`.
fn crate_roots(code: &str) -> BTreeSet<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut roots = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(is_ident) {
            continue;
        }
        let ident = |text: &str| -> String { text.chars().take_while(|c| is_ident(*c)).collect() };
        match rest.strip_prefix('{') {
            None => {
                roots.insert(ident(rest));
            }
            Some(group) => {
                let mut depth = 0usize;
                let mut item_start = true;
                for (index, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => item_start = true,
                        c if c.is_whitespace() => {}
                        _ if item_start => {
                            item_start = false;
                            roots.insert(ident(&group[index..]));
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    roots.retain(|root| !root.is_empty() && root != "self");
    roots
}

/// Every import between two of the engine's top-level modules, in code that is not a test:
/// `(from, to)` and the files that make it.
fn engine_imports() -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut imports = BTreeMap::new();
    for file in library_files("stet-engine") {
        let Some(from) = file.module.first() else {
            continue;
        };
        if file.module.iter().any(|part| part == "tests") {
            continue;
        }
        for to in crate_roots(&production_code(&file.text)) {
            if &to != from {
                imports
                    .entry((from.clone(), to))
                    .or_insert_with(BTreeSet::new)
                    .insert(file.module.join("::"));
            }
        }
    }
    imports
}

#[test]
fn the_import_reader_finds_paths_and_groups() {
    let code = "use crate::dispatch::event::Event;\nuse crate::{config::Config, runtime::{self, ImageRef}, git};\nlet x = $crate::forge::x; let y = notcrate::engine::z; let z = crate::image::BINARY_PATH;";
    assert_eq!(
        crate_roots(code),
        ["config", "dispatch", "forge", "git", "image", "runtime"]
            .map(str::to_owned)
            .into()
    );
}

#[test]
fn every_engine_module_stands_on_one_floor() {
    let floors = floor_of();
    let modules = engine_modules();
    assert!(
        modules.contains("dispatch") && modules.contains("engine"),
        "{modules:?}"
    );
    for module in &modules {
        assert!(
            floors.contains_key(module.as_str()),
            "crates/stet-engine/src/{module} stands on no floor: add it to FLOORS in tests/suite/architecture.rs, above everything it imports"
        );
    }
    for module in floors.keys() {
        assert!(
            modules.contains(*module),
            "FLOORS names {module}, which the engine has no more"
        );
    }
}

#[test]
fn the_engine_imports_only_from_the_floors_below() {
    let floors = floor_of();
    let imports = engine_imports();
    assert!(
        imports.contains_key(&("engine".to_owned(), "runtime".to_owned())),
        "the walk found the engine's imports"
    );
    let mut upward = BTreeSet::new();
    for ((from, to), files) in &imports {
        if REEXPORTED.contains(&to.as_str()) {
            continue;
        }
        let (Some(&below), Some(&above)) = (floors.get(to.as_str()), floors.get(from.as_str()))
        else {
            panic!("{files:?} name crate::{to}, which stands on no floor");
        };
        if below >= above {
            let known = KNOWN_UPWARD
                .iter()
                .any(|(f, t, _)| *f == from.as_str() && *t == to.as_str());
            assert!(
                known,
                "{from} (floor {above}) imports {to} (floor {below}), which stands on its floor or above it, in {files:?}: import it the other way round, or move what both need to a lower floor"
            );
            upward.insert((from.as_str(), to.as_str()));
        }
    }
    for (from, to, why) in KNOWN_UPWARD {
        assert!(
            upward.contains(&(*from, *to)),
            "{from} no longer imports {to} from above ({why}): take that line off KNOWN_UPWARD"
        );
    }
}

/// Every `.rs` file under `dir` that is not a test file (`tests.rs`, anything under a `tests/`).
fn non_test_sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                non_test_sources(&path, found);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            found.push(path);
        }
    }
}

/// The house keeps files small enough to read (issue 28): no file of code that is not a test holds
/// more than 800 lines before its test module.
#[test]
fn no_source_file_is_over_800_lines() {
    const MAX_LINES: usize = 800;
    let root = Path::new(ROOT);
    let mut files = Vec::new();
    non_test_sources(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        non_test_sources(&krate.unwrap().path().join("src"), &mut files);
    }
    assert!(
        files.len() > 100,
        "the walk found the sources ({})",
        files.len()
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            let code = text.split("\n#[cfg(test)]").next().unwrap_or_default();
            let lines = code.lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines})", path.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines before the tests: {long:?}; split them by concern"
    );
}
