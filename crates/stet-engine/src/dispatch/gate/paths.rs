//! Which changed paths the review gate holds, and why: a protected rule, a new or retargeted symbolic
//! link (with where it leads), a file that newly became executable, a path that a link of the result
//! reaches under a protected name, and a directory whose name collides with a link's on a
//! case-insensitive file system (where a checkout would write through the link).
//!
//! Links are resolved the way a checkout resolves them: component by component, each link met on the
//! way replaced by its target, relative to the link's directory, up to [`MAX_LINKS_FOLLOWED`].

use std::collections::{HashMap, HashSet, VecDeque};

use super::{HeldPath, printable};
use crate::forge::protected::{ProtectedPaths, fold_name};
use crate::git::changes::{Entry, EntryKind, PathChange, ResultChanges};

/// Links followed while resolving one path before it counts as a loop (Linux's own limit).
const MAX_LINKS_FOLLOWED: usize = 40;

/// Names a path is reached by through links that one path is checked under.
const MAX_ALIASES: usize = 32;

/// Where a path leads once every link on it is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resolved {
    Inside(String),
    Outside,
    Loop,
}

/// The result's links: by exact path, and by where each leads (folded, for reverse lookups).
struct Links<'a> {
    targets: HashMap<&'a str, String>,
    by_destination: HashMap<String, Vec<&'a str>>,
    by_folded_path: HashMap<String, &'a str>,
}

impl<'a> Links<'a> {
    fn new(links: &'a [(String, Vec<u8>)]) -> Links<'a> {
        let targets: HashMap<&str, String> = links
            .iter()
            .map(|(path, target)| (path.as_str(), String::from_utf8_lossy(target).into_owned()))
            .collect();
        let mut links_of = Links {
            targets,
            by_destination: HashMap::new(),
            by_folded_path: HashMap::new(),
        };
        for (path, _) in links {
            links_of.by_folded_path.insert(folded(path), path.as_str());
            if let Resolved::Inside(destination) = links_of.resolve(path) {
                links_of
                    .by_destination
                    .entry(folded(&destination))
                    .or_default()
                    .push(path.as_str());
            }
        }
        links_of
    }

    fn resolve(&self, path: &str) -> Resolved {
        let mut pending: VecDeque<String> = path.split('/').map(str::to_owned).collect();
        let mut done: Vec<String> = Vec::new();
        let mut followed = 0;
        while let Some(component) = pending.pop_front() {
            match component.as_str() {
                "" | "." => {}
                ".." => {
                    if done.pop().is_none() {
                        return Resolved::Outside;
                    }
                }
                _ => {
                    done.push(component);
                    let Some(target) = self.targets.get(done.join("/").as_str()) else {
                        continue;
                    };
                    followed += 1;
                    if followed > MAX_LINKS_FOLLOWED {
                        return Resolved::Loop;
                    }
                    done.pop();
                    if target.starts_with('/') {
                        return Resolved::Outside;
                    }
                    for part in target.split('/').rev() {
                        pending.push_front(part.to_owned());
                    }
                }
            }
        }
        Resolved::Inside(done.join("/"))
    }

    /// Other names `path` is reached by through links, each with the link it goes through, and
    /// whether there were more than [`MAX_ALIASES`] to check (then the path is held unchecked).
    fn aliases(&self, path: &str) -> (Vec<(String, &'a str)>, bool) {
        let mut found = Vec::new();
        let mut exhausted = false;
        let mut seen = HashSet::from([folded(path)]);
        let mut queue = VecDeque::from([path.to_owned()]);
        while let Some(current) = queue.pop_front() {
            let components: Vec<&str> = current.split('/').collect();
            for depth in 1..=components.len() {
                let prefix = components[..depth].join("/");
                let Some(links) = self.by_destination.get(&folded(&prefix)) else {
                    continue;
                };
                for link in links {
                    let mut alias = (*link).to_owned();
                    for rest in &components[depth..] {
                        alias.push('/');
                        alias.push_str(rest);
                    }
                    if !seen.insert(folded(&alias)) {
                        continue;
                    }
                    if found.len() == MAX_ALIASES {
                        exhausted = true;
                        continue;
                    }
                    found.push((alias.clone(), *link));
                    queue.push_back(alias);
                }
            }
        }
        (found, exhausted)
    }

    /// A link whose name an ancestor directory of `path` folds to without being it.
    fn colliding_ancestor(&self, path: &str) -> Option<(String, &'a str)> {
        let components: Vec<&str> = path.split('/').collect();
        (1..components.len()).find_map(|depth| {
            let ancestor = components[..depth].join("/");
            self.by_folded_path
                .get(&folded(&ancestor))
                .filter(|link| **link != ancestor)
                .map(|link| (ancestor, *link))
        })
    }
}

fn folded(path: &str) -> String {
    path.split(['/', '\\'])
        .filter(|segment| !segment.is_empty() && *segment != ".")
        .map(|segment| fold_name(segment).into_iter().collect::<String>())
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether `name` has the shape of an NTFS 8.3 short name (`GITHUB~1`, `STET~1.TOM`): on Windows it
/// may name a longer entry of the same directory, such as `.github` or `stet.toml`.
fn is_short_name(name: &str) -> bool {
    let (stem, extension) = name.split_once('.').unwrap_or((name, ""));
    let Some((base, number)) = stem.rsplit_once('~') else {
        return false;
    };
    (1..=6).contains(&base.len())
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
        && !number.starts_with('0')
        && extension.len() <= 3
        && !extension.contains('.')
}

fn is(entry: Option<&Entry>, kind: EntryKind) -> bool {
    entry.is_some_and(|entry| entry.kind == kind)
}

pub(super) fn held(changes: &ResultChanges, rules: &ProtectedPaths) -> Vec<HeldPath> {
    let links = Links::new(&changes.links);
    changes
        .changes
        .iter()
        .filter_map(|change| {
            let reasons = reasons(change, rules, &links);
            (!reasons.is_empty()).then(|| HeldPath {
                path: printable(&change.path),
                reasons,
            })
        })
        .collect()
}

fn reasons(change: &PathChange, rules: &ProtectedPaths, links: &Links<'_>) -> Vec<String> {
    let path = change.path.as_str();
    let mut reasons = Vec::new();
    if let Some(rule) = rules.matching(path) {
        reasons.push(rule.to_string());
    }
    let (before, after) = (change.before.as_ref(), change.after.as_ref());
    if let Some(target) = after.and_then(|entry| entry.link_target.as_deref()) {
        let previous = before.and_then(|entry| entry.link_target.as_deref());
        if previous != Some(target) {
            let kind = if previous.is_some() {
                "symlink retargeted"
            } else {
                "new symlink"
            };
            let shown = printable(&String::from_utf8_lossy(target));
            let leads = match links.resolve(path) {
                Resolved::Outside => ", outside the repository".to_owned(),
                Resolved::Loop => ", a loop of links".to_owned(),
                Resolved::Inside(destination) => rules
                    .matching(&destination)
                    .map(|rule| format!(", which is {rule}"))
                    .unwrap_or_default(),
            };
            reasons.push(format!("{kind} → {shown}{leads}"));
        }
    }
    if is(after, EntryKind::Executable) && !is(before, EntryKind::Executable) {
        reasons.push("newly executable".to_owned());
    }
    let (aliases, exhausted) = links.aliases(path);
    if let Some((alias, link, rule)) = aliases.into_iter().find_map(|(alias, link)| {
        rules
            .matching(&alias)
            .map(|rule| (alias.clone(), link, rule.to_string()))
    }) {
        reasons.push(format!(
            "reached as {} through the symlink {}: {rule}",
            printable(&alias),
            printable(link)
        ));
    } else if exhausted {
        // Not every name it is reached by was checked: hold it rather than guess.
        reasons.push(format!(
            "reached through links under more than {MAX_ALIASES} names, too many to check"
        ));
    }
    if after.is_some()
        && let Some(name) = path.split('/').find(|name| is_short_name(name))
    {
        reasons.push(format!(
            "{} is an NTFS short name, which Windows may resolve to another file or directory",
            printable(name)
        ));
    }
    if after.is_some()
        && let Some((ancestor, link)) = links.colliding_ancestor(path)
    {
        reasons.push(format!(
            "its directory {} is the symlink {} on case-insensitive file systems",
            printable(&ancestor),
            printable(link)
        ));
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::changes::AddedText;

    fn entry(kind: EntryKind, target: Option<&str>) -> Option<Entry> {
        Some(Entry {
            kind,
            link_target: target.map(|target| target.as_bytes().to_vec()),
        })
    }

    fn file() -> Option<Entry> {
        entry(EntryKind::File, None)
    }

    fn exec() -> Option<Entry> {
        entry(EntryKind::Executable, None)
    }

    fn link(target: &str) -> Option<Entry> {
        entry(EntryKind::Link, Some(target))
    }

    fn change(path: &str, before: Option<Entry>, after: Option<Entry>) -> PathChange {
        PathChange {
            path: path.into(),
            before,
            after,
            added: AddedText::default(),
            binary: false,
        }
    }

    /// The held paths of `changes`, the result's tree holding `links` besides the changed ones.
    fn held_of(changes: Vec<PathChange>, links: &[(&str, &str)]) -> Vec<String> {
        let mut all_links: Vec<(String, Vec<u8>)> = links
            .iter()
            .map(|(path, target)| ((*path).to_owned(), target.as_bytes().to_vec()))
            .collect();
        for change in &changes {
            if let Some(target) = change.after.as_ref().and_then(|e| e.link_target.clone()) {
                all_links.push((change.path.clone(), target));
            }
        }
        let changes = ResultChanges {
            changes,
            removed: Vec::new(),
            links: all_links,
        };
        held(&changes, &ProtectedPaths::default())
            .into_iter()
            .map(|held| held.to_string())
            .collect()
    }

    #[test]
    fn protected_rules_hold_changes_deletions_included() {
        assert_eq!(
            held_of(
                vec![
                    change("stet.toml", file(), file()),
                    change(".github/actions/x/action.yml", None, file()),
                    change(".github/workflows/ci.yml", file(), None),
                    change("src/lib.rs", file(), file()),
                ],
                &[]
            ),
            vec![
                "stet.toml (stet's own configuration)",
                ".github/actions/x/action.yml (CI: .github/**)",
                ".github/workflows/ci.yml (CI: .github/**)",
            ]
        );
    }

    #[test]
    fn newly_executable_files_are_held_and_unchanged_modes_are_not() {
        assert_eq!(
            held_of(
                vec![
                    change("bin/run", None, exec()),
                    change("bin/old", file(), exec()),
                    change("bin/was-a-link", link("x"), exec()),
                    change("bin/still", exec(), exec()),
                    change("bin/dropped", exec(), file()),
                ],
                &[]
            ),
            vec![
                "bin/run (newly executable)",
                "bin/old (newly executable)",
                "bin/was-a-link (newly executable)",
            ]
        );
    }

    #[test]
    fn new_and_retargeted_links_say_where_they_lead() {
        assert_eq!(
            held_of(
                vec![
                    change("ci", None, link(".github")),
                    change("docs/x", None, link("../.github/workflows/ci.yml")),
                    change("etc", None, link("/etc/passwd")),
                    change("up", None, link("../../outside")),
                    change("loop", None, link("loop")),
                    change("moved", link("a"), link("b")),
                    change("kept", link("a"), link("a")),
                    change("docs/readme", None, link("../README.md")),
                ],
                &[]
            ),
            vec![
                "ci (new symlink → .github, which is CI: .github/**)",
                "docs/x (new symlink → ../.github/workflows/ci.yml, which is CI: .github/**)",
                "etc (new symlink → /etc/passwd, outside the repository)",
                "up (new symlink → ../../outside, outside the repository)",
                "loop (new symlink → loop, a loop of links)",
                "moved (symlink retargeted → b)",
                "docs/readme (new symlink → ../README.md)",
            ]
        );
    }

    #[test]
    fn dot_github_replaced_by_a_link_is_held_on_both_counts() {
        assert_eq!(
            held_of(
                vec![
                    change(".github", None, link("tools/ci")),
                    change(".github/workflows/ci.yml", file(), None),
                ],
                &[]
            ),
            vec![
                ".github (CI: .github/**; new symlink → tools/ci)",
                ".github/workflows/ci.yml (CI: .github/**)",
            ]
        );
    }

    #[test]
    fn a_path_reached_through_an_existing_link_is_held_under_that_name() {
        assert_eq!(
            held_of(
                vec![
                    change("tools/hooks/pre-commit", file(), file()),
                    change("ci-config/workflows/deploy.yml", None, file()),
                    change("shared/rules.md", file(), file()),
                    change("src/lib.rs", file(), file()),
                ],
                &[
                    (".husky", "tools/hooks"),
                    (".github", "ci-config"),
                    ("docs/a", "../shared"),
                    ("AGENTS.md", "docs/a/rules.md"),
                ]
            ),
            vec![
                "tools/hooks/pre-commit (reached as .husky/pre-commit through the symlink .husky: runs on developer machines: .husky/**)",
                "ci-config/workflows/deploy.yml (reached as .github/workflows/deploy.yml through the symlink .github: CI: .github/**)",
                "shared/rules.md (reached as AGENTS.md through the symlink AGENTS.md: agent configuration: **/AGENTS.md)",
            ]
        );
    }

    #[test]
    fn a_directory_colliding_with_a_link_on_case_insensitive_file_systems_is_held() {
        assert_eq!(
            held_of(
                vec![change("Docs/workflows/x.yml", None, file())],
                &[("docs", ".github")]
            ),
            vec![
                "Docs/workflows/x.yml (its directory Docs is the symlink docs on case-insensitive file systems)"
            ]
        );
    }

    #[test]
    fn ntfs_short_names_are_held() {
        assert_eq!(
            held_of(
                vec![
                    change("GITHUB~1/workflows/x.yml", None, file()),
                    change("STET~1.TOM", None, file()),
                    change("docs/backup~1.txt", None, file()),
                    change("notes~/x.txt", None, file()),
                    change("a~0", None, file()),
                    change("verylongname~1", None, file()),
                ],
                &[]
            ),
            vec![
                "GITHUB~1/workflows/x.yml (GITHUB~1 is an NTFS short name, which Windows may resolve to another file or directory)",
                "STET~1.TOM (STET~1.TOM is an NTFS short name, which Windows may resolve to another file or directory)",
                "docs/backup~1.txt (backup~1.txt is an NTFS short name, which Windows may resolve to another file or directory)",
            ]
        );
    }

    #[test]
    fn links_resolve_through_other_links_and_dot_dot_after_a_link() {
        let owned = vec![
            ("a".to_owned(), b"b/c".to_vec()),
            ("b".to_owned(), b"real".to_vec()),
            ("real/c".to_owned(), b"../.stet".to_vec()),
            ("self".to_owned(), b"self/x".to_vec()),
        ];
        let links = Links::new(&owned);
        assert_eq!(links.resolve("a"), Resolved::Inside(".stet".into()));
        assert_eq!(
            links.resolve("a/briefs/x.toml"),
            Resolved::Inside(".stet/briefs/x.toml".into())
        );
        assert_eq!(links.resolve("b/../src"), Resolved::Inside("src".into()));
        assert_eq!(links.resolve("self"), Resolved::Loop);
        assert_eq!(links.resolve("../x"), Resolved::Outside);
        let aliases: Vec<String> = links
            .aliases(".stet/briefs/x.toml")
            .0
            .into_iter()
            .map(|(alias, _)| alias)
            .collect();
        assert!(
            aliases.contains(&"a/briefs/x.toml".to_owned()),
            "{aliases:?}"
        );
        assert!(
            aliases.contains(&"real/c/briefs/x.toml".to_owned()),
            "{aliases:?}"
        );
    }
}
