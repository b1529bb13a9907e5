//! The protected-path matcher stet used before the compiled automaton (issue 27), kept as the
//! reference the automaton must agree with (the differential test) and is measured against
//! (`benches/protected.rs`, through the `reference-matcher` feature): each rule tried in order,
//! segment by segment, by dynamic programming, each segment's glob against a name the same way.

use super::{Glob, ProtectedPaths, ProtectedRule, Segment, fold_path};

/// The first rule `path` falls under, found as the matcher before the automaton found it.
pub fn matching<'p>(paths: &'p ProtectedPaths, path: &str) -> Option<&'p ProtectedRule> {
    let folded = fold_path(path);
    paths
        .rules()
        .iter()
        .find(|rule| match_segments(&rule.segments, &folded))
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
