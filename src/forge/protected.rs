//! Protected paths (DESIGN §5 row 15): a result that changes CI definitions (by default
//! `.github/workflows/**`, which would run the agent's code with the repository's secrets) is held at
//! review until a person approves it explicitly.

use std::fmt;

/// The patterns held for approval when configuration names none.
pub const DEFAULT_PROTECTED: &[&str] = &[".github/workflows/**"];

/// A pattern that cannot be used, with what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("protected path pattern {pattern:?}: {problem}")]
pub struct PatternError {
    pub pattern: String,
    pub problem: &'static str,
}

pub type Result<T> = std::result::Result<T, PatternError>;

/// One `/`-separated piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: any number of whole path segments, including none.
    AnyDepth,
    /// A segment with `*` (any run of characters) and `?` (one character) wildcards.
    Glob(Vec<char>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    text: String,
    segments: Vec<Segment>,
}

/// A changed path that matched a protected pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedChange {
    pub path: String,
    pub pattern: String,
}

impl fmt::Display for ProtectedChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (protected by {})", self.path, self.pattern)
    }
}

/// The configured set of protected patterns. Matching ignores ASCII case, so a path that only some
/// filesystems would treat as the workflows directory is held too: holding too much is the safe side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPaths {
    patterns: Vec<Pattern>,
}

impl Default for ProtectedPaths {
    fn default() -> Self {
        ProtectedPaths {
            patterns: DEFAULT_PROTECTED
                .iter()
                .filter_map(|text| Pattern::parse(text).ok())
                .collect(),
        }
    }
}

impl ProtectedPaths {
    /// Checks every pattern: relative, no `.` or `..` segment, no empty segment.
    pub fn new<I, S>(patterns: I) -> Result<ProtectedPaths>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let patterns = patterns
            .into_iter()
            .map(|text| Pattern::parse(text.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Ok(ProtectedPaths { patterns })
    }

    /// The first pattern `path` (repository-relative, `/`-separated) falls under, if any.
    pub fn matching(&self, path: &str) -> Option<&str> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        self.patterns
            .iter()
            .find(|pattern| match_segments(&pattern.segments, &segments))
            .map(|pattern| pattern.text.as_str())
    }

    /// Every changed path that needs explicit approval, in the order given.
    pub fn held<'a, I>(&self, changed: I) -> Vec<ProtectedChange>
    where
        I: IntoIterator<Item = &'a str>,
    {
        changed
            .into_iter()
            .filter_map(|path| {
                self.matching(path).map(|pattern| ProtectedChange {
                    path: path.to_owned(),
                    pattern: pattern.to_owned(),
                })
            })
            .collect()
    }
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern> {
        let problem = |problem| PatternError {
            pattern: text.to_owned(),
            problem,
        };
        if text.trim().is_empty() {
            return Err(problem("is empty"));
        }
        if text.starts_with('/') {
            return Err(problem(
                "starts with '/': patterns are relative to the repository root",
            ));
        }
        let segments = text
            .trim_end_matches('/')
            .split('/')
            .map(|segment| match segment {
                "" => Err(problem("has an empty segment ('//')")),
                "." | ".." => Err(problem("has a '.' or '..' segment")),
                "**" => Ok(Segment::AnyDepth),
                glob if glob.contains("**") => Err(problem(
                    "uses '**' inside a segment; write it as a whole segment",
                )),
                glob => Ok(Segment::Glob(glob.chars().collect())),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Pattern {
            text: text.to_owned(),
            segments,
        })
    }
}

fn match_segments(pattern: &[Segment], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((Segment::AnyDepth, rest)) => {
            (0..=path.len()).any(|skip| match_segments(rest, &path[skip..]))
        }
        Some((Segment::Glob(glob), rest)) => path.split_first().is_some_and(|(first, tail)| {
            let name: Vec<char> = first.chars().collect();
            match_glob(glob, &name) && match_segments(rest, tail)
        }),
    }
}

fn match_glob(glob: &[char], name: &[char]) -> bool {
    match glob.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| match_glob(rest, &name[skip..])),
        Some(('?', rest)) => name
            .split_first()
            .is_some_and(|(_, tail)| match_glob(rest, tail)),
        Some((literal, rest)) => name.split_first().is_some_and(|(first, tail)| {
            first.eq_ignore_ascii_case(literal) && match_glob(rest, tail)
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_default_holds_workflow_changes_and_nothing_else() {
        let protected = ProtectedPaths::default();
        for path in [
            ".github/workflows/ci.yml",
            ".github/workflows/nested/deploy.yaml",
            ".github/workflows",
            ".GitHub/Workflows/ci.yml",
        ] {
            assert_eq!(
                protected.matching(path),
                Some(".github/workflows/**"),
                "{path}"
            );
        }
        for path in [
            ".github/CODEOWNERS",
            "src/.github/workflows/ci.yml",
            ".github/workflows-old/ci.yml",
            "README.md",
        ] {
            assert_eq!(protected.matching(path), None, "{path}");
        }
    }

    #[test]
    fn wildcards_stay_inside_a_segment_and_double_star_spans_segments() {
        let protected =
            ProtectedPaths::new(["*.lock", "deploy/**/secrets-?.toml", "**/Makefile"]).unwrap();
        assert_eq!(protected.matching("Cargo.lock"), Some("*.lock"));
        assert_eq!(protected.matching("sub/Cargo.lock"), None);
        assert_eq!(
            protected.matching("deploy/secrets-a.toml"),
            Some("deploy/**/secrets-?.toml")
        );
        assert_eq!(
            protected.matching("deploy/eu/west/secrets-b.toml"),
            Some("deploy/**/secrets-?.toml")
        );
        assert_eq!(protected.matching("deploy/secrets-ab.toml"), None);
        assert_eq!(protected.matching("Makefile"), Some("**/Makefile"));
        assert_eq!(protected.matching("a/b/Makefile"), Some("**/Makefile"));
    }

    #[test]
    fn held_lists_each_protected_change_with_its_pattern() {
        let protected = ProtectedPaths::default();
        let held = protected.held(["src/lib.rs", ".github/workflows/ci.yml", "README.md"]);
        assert_eq!(
            held,
            vec![ProtectedChange {
                path: ".github/workflows/ci.yml".into(),
                pattern: ".github/workflows/**".into(),
            }]
        );
        assert_eq!(
            held[0].to_string(),
            ".github/workflows/ci.yml (protected by .github/workflows/**)"
        );
    }

    #[test]
    fn unusable_patterns_are_refused_with_the_reason() {
        for (pattern, problem) in [
            ("", "is empty"),
            ("/etc/x", "starts with '/'"),
            ("a//b", "empty segment"),
            ("../x", "'..' segment"),
            ("a**/b", "inside a segment"),
        ] {
            let error = ProtectedPaths::new([pattern]).unwrap_err();
            assert_eq!(error.pattern, pattern);
            assert!(error.problem.contains(problem), "{pattern}: {error}");
        }
    }
}
