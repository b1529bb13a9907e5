//! The protected-path matcher stet used before the compiled automaton (issue 27), kept for the bench
//! to measure against: each rule tried in turn, its segments matched to the path's by dynamic
//! programming, each segment's glob to a name the same way. It reads the patterns through the public
//! rules and folds names with the engine's own `fold_name`, so it matches exactly what stet matches.

use stet_engine::forge::protected::{ProtectedPaths, fold_name};

enum Segment {
    AnyDepth,
    Glob(Vec<Glob>),
}

enum Glob {
    AnyRun,
    AnyOne,
    Literal(char),
}

/// Every rule of a [`ProtectedPaths`], parsed as the old matcher held them.
pub(crate) struct Reference {
    rules: Vec<Vec<Segment>>,
}

impl Reference {
    pub(crate) fn new(paths: &ProtectedPaths) -> Reference {
        let rules = paths
            .rules()
            .iter()
            .map(|rule| {
                rule.pattern()
                    .trim_end_matches('/')
                    .split('/')
                    .map(|segment| match segment {
                        "**" => Segment::AnyDepth,
                        glob => Segment::Glob(parse_glob(glob)),
                    })
                    .collect()
            })
            .collect();
        Reference { rules }
    }

    /// The index of the first rule `path` falls under.
    pub(crate) fn matching(&self, path: &str) -> Option<usize> {
        let folded: Vec<Vec<char>> = path
            .split(['/', '\\'])
            .filter(|segment| !segment.is_empty() && *segment != ".")
            .map(fold_name)
            .collect();
        self.rules
            .iter()
            .position(|rule| match_segments(rule, &folded))
    }
}

fn parse_glob(segment: &str) -> Vec<Glob> {
    let mut glob = Vec::new();
    let mut literal = String::new();
    let flush = |literal: &mut String, glob: &mut Vec<Glob>| {
        glob.extend(fold_name(literal).into_iter().map(Glob::Literal));
        literal.clear();
    };
    for character in segment.chars() {
        match character {
            '*' => {
                flush(&mut literal, &mut glob);
                glob.push(Glob::AnyRun);
            }
            '?' => {
                flush(&mut literal, &mut glob);
                glob.push(Glob::AnyOne);
            }
            other => literal.push(other),
        }
    }
    flush(&mut literal, &mut glob);
    glob
}

fn match_segments(pattern: &[Segment], path: &[Vec<char>]) -> bool {
    let mut rest = vec![false; path.len() + 1];
    rest[path.len()] = true;
    for element in pattern.iter().rev() {
        let mut here = vec![false; path.len() + 1];
        for j in (0..=path.len()).rev() {
            here[j] = match element {
                Segment::AnyDepth => rest[j] || (j < path.len() && here[j + 1]),
                Segment::Glob(glob) => j < path.len() && rest[j + 1] && match_glob(glob, &path[j]),
            };
        }
        rest = here;
    }
    rest[0]
}

fn match_glob(glob: &[Glob], name: &[char]) -> bool {
    let mut rest = vec![false; name.len() + 1];
    rest[name.len()] = true;
    for element in glob.iter().rev() {
        let mut here = vec![false; name.len() + 1];
        for j in (0..=name.len()).rev() {
            here[j] = match element {
                Glob::AnyRun => rest[j] || (j < name.len() && here[j + 1]),
                Glob::AnyOne => j < name.len() && rest[j + 1],
                Glob::Literal(literal) => j < name.len() && name[j] == *literal && rest[j + 1],
            };
        }
        rest = here;
    }
    rest[0]
}
