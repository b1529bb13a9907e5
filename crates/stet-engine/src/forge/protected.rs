//! Protected paths (DESIGN §5 rows 15 and 19): the paths whose change a person must approve before
//! stet pushes it. By default: CI and automation that runs code with the repository's secrets or on
//! developer machines, git's own per-repository configuration, the configuration coding agents read,
//! and stet's own files. `review.protected_paths` adds to these; configuration never removes one.
//!
//! A rule is anchored at the repository's root unless it starts with `**/`: most tools read their
//! file only at the root (GitHub's `.github/`, `stet.toml`, `.gitmodules`), and the rules that read
//! nested copies say so (`**/AGENTS.md`, `**/.envrc`, `**/.gitattributes`, `**/action.yml`).
//! Names are compared the way the file systems a branch is checked out on compare them, and then
//! some: case folded (Unicode, not only ASCII), invisible format characters dropped (HFS+ ignores
//! several), NTFS's trailing dots and spaces and `:stream` suffix cut off, and `\` read as a
//! separator. Holding too much is the safe side.

use std::fmt;

/// What a rule protects, as the review gate names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// CI definitions and the actions they run, with the repository's secrets.
    Ci,
    /// Files that run code on a developer's machine when they check the branch out or open it.
    DeveloperMachines,
    /// Git's per-repository configuration in the tree.
    Git,
    /// What coding agents read as their configuration or instructions.
    Agent,
    /// `stet.toml`.
    StetConfiguration,
    /// `.stet/` (the inbox of briefs).
    StetFiles,
    /// A pattern of `review.protected_paths`.
    Configured,
}

impl Category {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Category::Ci => "CI",
            Category::DeveloperMachines => "runs on developer machines",
            Category::Git => "git configuration",
            Category::Agent => "agent configuration",
            Category::StetConfiguration => "stet's own configuration",
            Category::StetFiles => "stet's own files",
            Category::Configured => "review.protected_paths",
        }
    }
}

/// The rules held for approval whatever the configuration says, in the order they are tried.
pub const DEFAULT_RULES: &[(&str, Category)] = &[
    (".github/**", Category::Ci),
    // `uses: ./any/dir` runs the action defined there, with the workflow's secrets.
    ("**/action.yml", Category::Ci),
    ("**/action.yaml", Category::Ci),
    (".gitlab-ci.yml", Category::Ci),
    (".gitlab/**", Category::Ci),
    (".gitea/**", Category::Ci),
    (".forgejo/**", Category::Ci),
    (".circleci/**", Category::Ci),
    (".buildkite/**", Category::Ci),
    ("Jenkinsfile", Category::Ci),
    ("azure-pipelines.yml", Category::Ci),
    ("azure-pipelines.yaml", Category::Ci),
    ("bitbucket-pipelines.yml", Category::Ci),
    (".travis.yml", Category::Ci),
    (".drone.yml", Category::Ci),
    (".woodpecker.yml", Category::Ci),
    (".woodpecker/**", Category::Ci),
    ("appveyor.yml", Category::Ci),
    (".appveyor.yml", Category::Ci),
    (".cirrus.yml", Category::Ci),
    (".semaphore/**", Category::Ci),
    ("cloudbuild.yaml", Category::Ci),
    ("cloudbuild.yml", Category::Ci),
    ("buildspec.yml", Category::Ci),
    (".tekton/**", Category::Ci),
    (".builds/**", Category::Ci),
    (".zuul.yaml", Category::Ci),
    (".teamcity/**", Category::Ci),
    ("bitrise.yml", Category::Ci),
    ("codemagic.yaml", Category::Ci),
    // Deploy previews build the branch with the site's secrets.
    ("netlify.toml", Category::Ci),
    ("vercel.json", Category::Ci),
    (".pre-commit-config.yaml", Category::DeveloperMachines),
    (".pre-commit-config.yml", Category::DeveloperMachines),
    (".husky/**", Category::DeveloperMachines),
    (".devcontainer/**", Category::DeveloperMachines),
    (".devcontainer.json", Category::DeveloperMachines),
    // Editors run the tasks and settings of nested folders opened on their own too.
    ("**/.vscode/**", Category::DeveloperMachines),
    ("**/*.code-workspace", Category::DeveloperMachines),
    (".idea/**", Category::DeveloperMachines),
    (".gitpod.yml", Category::DeveloperMachines),
    (".zed/**", Category::DeveloperMachines),
    (".nvim.lua", Category::DeveloperMachines),
    (".exrc", Category::DeveloperMachines),
    ("mise.toml", Category::DeveloperMachines),
    (".mise.toml", Category::DeveloperMachines),
    // direnv loads the `.envrc` of every directory a shell enters.
    ("**/.envrc", Category::DeveloperMachines),
    // git reads the attributes of every directory; submodules and LFS read the root's files.
    ("**/.gitattributes", Category::Git),
    (".gitmodules", Category::Git),
    (".lfsconfig", Category::Git),
    (".claude/**", Category::Agent),
    (".mcp.json", Category::Agent),
    // Cursor reads nested rule directories; agents read the nearest AGENTS.md or CLAUDE.md.
    ("**/.cursor/**", Category::Agent),
    (".cursorrules", Category::Agent),
    (".openhands/**", Category::Agent),
    ("**/AGENTS.md", Category::Agent),
    ("**/CLAUDE.md", Category::Agent),
    ("**/GEMINI.md", Category::Agent),
    (".gemini/**", Category::Agent),
    (".windsurfrules", Category::Agent),
    (".windsurf/**", Category::Agent),
    (".clinerules", Category::Agent),
    (".clinerules/**", Category::Agent),
    (".roo/**", Category::Agent),
    (".aider.conf.yml", Category::Agent),
    (".continue/**", Category::Agent),
    (".junie/**", Category::Agent),
    (".amazonq/**", Category::Agent),
    (".kiro/**", Category::Agent),
    (".goosehints", Category::Agent),
    (".openhands_instructions", Category::Agent),
    // stet reads both at the root of the repository it runs in (found with `git rev-parse`).
    ("stet.toml", Category::StetConfiguration),
    (".stet/**", Category::StetFiles),
];

/// A pattern that cannot be used, with what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("protected path pattern {pattern:?}: {problem}")]
pub(crate) struct PatternError {
    pub pattern: String,
    pub problem: &'static str,
}

pub(crate) type Result<T> = std::result::Result<T, PatternError>;

/// One `/`-separated piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: any number of whole path segments, including none.
    AnyDepth,
    /// A folded segment with `*` (any run of characters) and `?` (one character) wildcards.
    Glob(Vec<Glob>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Glob {
    AnyRun,
    AnyOne,
    Literal(char),
}

/// One rule: a pattern and what it protects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedRule {
    text: String,
    segments: Vec<Segment>,
    category: Category,
}

impl ProtectedRule {
    /// The pattern as it was written.
    pub fn pattern(&self) -> &str {
        &self.text
    }
}

/// `CI: .github/**`; a rule without wildcards is named by its category alone (`stet's own
/// configuration`), since the path it holds is its pattern.
impl fmt::Display for ProtectedRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.text.contains(['*', '?']) {
            write!(f, "{}: {}", self.category.describe(), self.text)
        } else {
            f.write_str(self.category.describe())
        }
    }
}

/// The longest pattern configuration may add, in characters.
const MAX_PATTERN_CHARS: usize = 256;
/// The most rules in all, the built-in ones included: each changed path is matched against each.
const MAX_RULES: usize = 512;

/// The rules a result's changed paths are held by: the defaults, then what configuration added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPaths {
    rules: Vec<ProtectedRule>,
}

impl Default for ProtectedPaths {
    fn default() -> Self {
        ProtectedPaths {
            rules: DEFAULT_RULES
                .iter()
                .filter_map(|(text, category)| ProtectedRule::parse(text, *category).ok())
                .collect(),
        }
    }
}

impl ProtectedPaths {
    /// These rules plus `patterns` (a later configuration layer adds, never removes); a pattern
    /// already present is not added twice.
    pub(crate) fn extended<I, S>(mut self, patterns: I) -> Result<ProtectedPaths>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for text in patterns {
            let rule = ProtectedRule::parse(text.as_ref(), Category::Configured)?;
            if !self.rules.iter().any(|known| known.text == rule.text) {
                if self.rules.len() >= MAX_RULES {
                    return Err(PatternError {
                        pattern: rule.text,
                        problem: "is one pattern too many: at most 512 rules in all",
                    });
                }
                self.rules.push(rule);
            }
        }
        Ok(self)
    }

    /// Every rule, in the order they are tried.
    pub fn rules(&self) -> &[ProtectedRule] {
        &self.rules
    }

    /// The first rule `path` (repository-relative, `/`-separated) falls under, if any.
    pub fn matching(&self, path: &str) -> Option<&ProtectedRule> {
        let folded = fold_path(path);
        self.rules
            .iter()
            .find(|rule| match_segments(&rule.segments, &folded))
    }
}

impl ProtectedRule {
    fn parse(text: &str, category: Category) -> Result<ProtectedRule> {
        let problem = |problem| PatternError {
            pattern: text.to_owned(),
            problem,
        };
        if text.trim().is_empty() {
            return Err(problem("is empty"));
        }
        if text.chars().count() > MAX_PATTERN_CHARS {
            return Err(problem("is longer than 256 characters"));
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
                glob => Ok(Segment::Glob(parse_glob(glob))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ProtectedRule {
            text: text.to_owned(),
            segments,
            category,
        })
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

/// A path as folded segments: split at `/` and `\`, empty and `.` segments dropped.
fn fold_path(path: &str) -> Vec<Vec<char>> {
    path.split(['/', '\\'])
        .filter(|segment| !segment.is_empty() && *segment != ".")
        .map(fold_name)
        .collect()
}

/// One name as a case-insensitive, normalizing file system would compare it: cut at an NTFS
/// `:stream` suffix, invisible format characters dropped, case folded, trailing dots and spaces
/// removed.
pub fn fold_name(name: &str) -> Vec<char> {
    let name = name.split(':').next().unwrap_or_default();
    let mut folded: Vec<char> = name
        .chars()
        .filter(|character| !is_invisible(*character))
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect();
    while folded.last().is_some_and(|last| matches!(last, '.' | ' ')) {
        folded.pop();
    }
    folded
}

/// Format and filler characters that draw nothing; HFS+ ignores several of them in names.
fn is_invisible(character: char) -> bool {
    matches!(
        character,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
    )
}

/// Whether `pattern` matches the whole of `path`, in time linear in the product of their lengths
/// (no backtracking: a hostile pattern such as `**/**/**/…/x` costs no more than a plain one).
fn match_segments(pattern: &[Segment], path: &[Vec<char>]) -> bool {
    // `rest[j]`: whether the pattern from the current element on matches `path[j..]`.
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

/// Whether `glob` matches the whole of `name`, in time linear in the product of their lengths.
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

#[cfg(test)]
mod tests;
