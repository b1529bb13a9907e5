//! Which changed paths the review gate holds, and why: a protected rule, a new or retargeted symbolic
//! link (with where it leads), a file that newly became executable, a path that a link of the result
//! reaches under a protected name, and a directory whose name collides with a link's on a
//! case-insensitive file system (where a checkout would write through the link).
//!
//! Links are resolved the way a checkout resolves them: component by component, each link met on the
//! way replaced by its target, relative to the link's directory, up to [`MAX_LINKS_FOLLOWED`].

use std::collections::{HashMap, HashSet, VecDeque};

use super::{HeldPath, Interrupted, printable};
use crate::forge::protected::{ProtectedPaths, fold_name};
use crate::git::changes::{Entry, EntryKind, MAX_LINK_BYTES, PathChange, ResultChanges};

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

/// The result's links: as a tree of names (so resolving a path costs one lookup per component,
/// whatever its length), and by where each leads (folded, for reverse lookups).
struct Links<'a> {
    /// The children of each node by name; node 0 is the repository's root.
    children: Vec<HashMap<&'a str, usize>>,
    /// What the link at a node points at.
    targets: HashMap<usize, String>,
    by_destination: HashMap<String, Vec<&'a str>>,
    by_folded_path: HashMap<String, &'a str>,
}

impl<'a> Links<'a> {
    /// The result's `links`, each resolved once; [`Interrupted`] once `interrupted` says so (asked
    /// at each link).
    fn new(
        links: &'a [(String, Vec<u8>)],
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Links<'a>, Interrupted> {
        let mut links_of = Links {
            children: vec![HashMap::new()],
            targets: HashMap::new(),
            by_destination: HashMap::new(),
            by_folded_path: HashMap::new(),
        };
        for (path, target) in links {
            if interrupted() {
                return Err(Interrupted);
            }
            let mut node = 0;
            for name in path.split('/') {
                node = match links_of.children[node].get(name) {
                    Some(child) => *child,
                    None => {
                        let child = links_of.children.len();
                        links_of.children.push(HashMap::new());
                        links_of.children[node].insert(name, child);
                        child
                    }
                };
            }
            links_of
                .targets
                .insert(node, String::from_utf8_lossy(target).into_owned());
        }
        for (path, _) in links {
            if interrupted() {
                return Err(Interrupted);
            }
            links_of.by_folded_path.insert(folded(path), path.as_str());
            if let Resolved::Inside(destination) = links_of.resolve(path) {
                links_of
                    .by_destination
                    .entry(folded(&destination))
                    .or_default()
                    .push(path.as_str());
            }
        }
        Ok(links_of)
    }

    /// Where `path` leads: each component looked up under the node of the one before it, so the
    /// cost is linear in the components met (the path's and those of the links followed).
    fn resolve(&self, path: &str) -> Resolved {
        let mut pending: VecDeque<&str> = path.split('/').collect();
        // Each component resolved so far, with its node among the links' names (`None`: no link
        // lies under it).
        let mut done: Vec<(&str, Option<usize>)> = Vec::new();
        let mut followed = 0;
        while let Some(component) = pending.pop_front() {
            match component {
                "" | "." => {}
                ".." => {
                    if done.pop().is_none() {
                        return Resolved::Outside;
                    }
                }
                name => {
                    let parent = done.last().map_or(Some(0), |(_, node)| *node);
                    let node = parent.and_then(|parent| self.children[parent].get(name).copied());
                    let Some(target) = node.and_then(|node| self.targets.get(&node)) else {
                        done.push((name, node));
                        continue;
                    };
                    followed += 1;
                    if followed > MAX_LINKS_FOLLOWED {
                        return Resolved::Loop;
                    }
                    if target.starts_with('/') {
                        return Resolved::Outside;
                    }
                    for part in target.split('/').rev() {
                        pending.push_front(part);
                    }
                }
            }
        }
        Resolved::Inside(
            done.iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join("/"),
        )
    }

    /// Other names `path` is reached by through links, each with the link it goes through, and
    /// whether there were more than [`MAX_ALIASES`] to check (then the path is held unchecked).
    fn aliases(&self, path: &str) -> (Vec<(String, &'a str)>, bool) {
        let mut found = Vec::new();
        let mut exhausted = false;
        let mut seen = HashSet::from([folded(path)]);
        let mut queue = VecDeque::from([path.to_owned()]);
        if self.by_destination.is_empty() {
            return (found, exhausted);
        }
        while let Some(current) = queue.pop_front() {
            let components: Vec<&str> = current.split('/').collect();
            for (depth, prefix) in folded_prefixes(&components) {
                let Some(links) = self.by_destination.get(&prefix) else {
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
        if self.by_folded_path.is_empty() {
            return None;
        }
        let components: Vec<&str> = path.split('/').collect();
        folded_prefixes(&components[..components.len().saturating_sub(1)]).find_map(
            |(depth, prefix)| {
                let link = self.by_folded_path.get(&prefix)?;
                let ancestor = components[..depth].join("/");
                (**link != ancestor).then_some((ancestor, *link))
            },
        )
    }
}

/// Each prefix of `components` (its number of components, and it [`folded`]), each component
/// folded once, where folding every prefix anew cost a deep path of long names minutes over a
/// result of many such paths.
fn folded_prefixes<'c>(components: &'c [&'c str]) -> impl Iterator<Item = (usize, String)> + 'c {
    let mut prefix = String::new();
    components
        .iter()
        .enumerate()
        .map(move |(index, component)| {
            let component = folded(component);
            if !component.is_empty() {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(&component);
            }
            (index + 1, prefix.clone())
        })
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

/// Every changed path held, with its reasons (the tests' shorthand).
#[cfg(test)]
pub(super) fn held(changes: &ResultChanges, rules: &ProtectedPaths) -> Vec<HeldPath> {
    // Never told to stop, it reads every path.
    held_until(changes, rules, &|| false).unwrap_or_default()
}

/// Every changed path held, with its reasons, ending with [`Interrupted`] once `interrupted` says
/// so (asked at each path and each name a link reaches it by).
pub(super) fn held_until(
    changes: &ResultChanges,
    rules: &ProtectedPaths,
    interrupted: &dyn Fn() -> bool,
) -> Result<Vec<HeldPath>, Interrupted> {
    let links = Links::new(&changes.links, interrupted)?;
    let mut held = Vec::new();
    for change in &changes.changes {
        let mut reasons = reasons(change, rules, &links, interrupted)?;
        if changes.links_cut {
            reasons.push(format!(
                "the result's symbolic links add up to more than {MAX_LINK_BYTES} bytes, more than the gate reads, so what reaches this path through a link was not checked"
            ));
        }
        if !reasons.is_empty() {
            held.push(HeldPath {
                path: printable(&change.path),
                reasons,
            });
        }
    }
    Ok(held)
}

fn reasons(
    change: &PathChange,
    rules: &ProtectedPaths,
    links: &Links<'_>,
    interrupted: &dyn Fn() -> bool,
) -> Result<Vec<String>, Interrupted> {
    if interrupted() {
        return Err(Interrupted);
    }
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
    let mut reached = None;
    for (alias, link) in aliases {
        if interrupted() {
            return Err(Interrupted);
        }
        if let Some(rule) = rules.matching(&alias) {
            reached = Some((alias.clone(), link, rule.to_string()));
            break;
        }
    }
    if let Some((alias, link, rule)) = reached {
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
    Ok(reasons)
}

#[cfg(test)]
mod tests;
