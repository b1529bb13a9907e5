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

use matcher::Matcher;

mod matcher;
#[cfg(any(test, feature = "reference-matcher"))]
pub mod reference;

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
pub struct PatternError {
    /// The pattern as it was written.
    pub pattern: String,
    /// What is wrong with it.
    pub problem: String,
}

/// A protected-path result.
pub type Result<T> = std::result::Result<T, PatternError>;

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
pub const MAX_PATTERN_CHARS: usize = 256;
/// The most patterns configuration may add to the built-in rules, every file's together.
pub const MAX_ADDED_RULES: usize = 128;
/// The most characters the patterns configuration adds may hold together: the compiled matcher
/// reads one bit per character for each character of a path.
pub const MAX_ADDED_CHARS: usize = 8 * 1024;

/// The rules a result's changed paths are held by: the defaults, then what configuration added,
/// compiled into one matcher.
#[derive(Debug, Clone)]
pub struct ProtectedPaths {
    rules: Vec<ProtectedRule>,
    matcher: Matcher,
}

impl PartialEq for ProtectedPaths {
    fn eq(&self, other: &Self) -> bool {
        self.rules == other.rules
    }
}

impl Eq for ProtectedPaths {}

impl Default for ProtectedPaths {
    fn default() -> Self {
        ProtectedPaths::compiled(
            DEFAULT_RULES
                .iter()
                .filter_map(|(text, category)| ProtectedRule::parse(text, *category).ok())
                .collect(),
        )
    }
}

impl ProtectedPaths {
    fn compiled(rules: Vec<ProtectedRule>) -> ProtectedPaths {
        let matcher = Matcher::compile(rules.iter().map(|rule| rule.segments.as_slice()));
        ProtectedPaths { rules, matcher }
    }

    /// These rules plus `patterns` (a later configuration layer adds, never removes); a pattern
    /// already present is not added twice. Refused past [`MAX_ADDED_RULES`] added patterns or
    /// [`MAX_ADDED_CHARS`] characters of them, every list added so far counted.
    pub fn extended<I, S>(self, patterns: I) -> Result<ProtectedPaths>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut rules = self.rules;
        for text in patterns {
            let rule = ProtectedRule::parse(text.as_ref(), Category::Configured)?;
            if !rules.iter().any(|known| known.text == rule.text) {
                rules.push(rule);
            }
        }
        let added: Vec<&str> = rules
            .iter()
            .filter(|rule| rule.category == Category::Configured)
            .map(|rule| rule.text.as_str())
            .collect();
        if let Some(beyond) = added.get(MAX_ADDED_RULES) {
            return Err(PatternError {
                pattern: (*beyond).to_owned(),
                problem: format!(
                    "is one pattern too many: {} patterns are added to the built-in rules with this \
                     list, and at most {MAX_ADDED_RULES} may be",
                    added.len()
                ),
            });
        }
        let mut chars = 0;
        let mut beyond = None;
        for text in &added {
            chars += text.chars().count();
            if chars > MAX_ADDED_CHARS && beyond.is_none() {
                beyond = Some(*text);
            }
        }
        if let Some(beyond) = beyond {
            return Err(PatternError {
                pattern: beyond.to_owned(),
                problem: format!(
                    "passes the size limit: the patterns added with this list come to {chars} \
                     characters, and at most {MAX_ADDED_CHARS} may be"
                ),
            });
        }
        Ok(ProtectedPaths::compiled(rules))
    }

    /// Every rule, in the order they are tried.
    pub fn rules(&self) -> &[ProtectedRule] {
        &self.rules
    }

    /// The first rule `path` (repository-relative, `/`-separated) falls under, if any; in time
    /// linear in the path's length, whatever the rules.
    pub fn matching(&self, path: &str) -> Option<&ProtectedRule> {
        let rule = self.matcher.first_match(&fold_path(path))?;
        self.rules.get(rule)
    }
}

impl ProtectedRule {
    fn parse(text: &str, category: Category) -> Result<ProtectedRule> {
        let problem = |problem: String| PatternError {
            pattern: text.to_owned(),
            problem,
        };
        if text.trim().is_empty() {
            return Err(problem("is empty".to_owned()));
        }
        let chars = text.chars().count();
        if chars > MAX_PATTERN_CHARS {
            return Err(problem(format!(
                "is {chars} characters long, and at most {MAX_PATTERN_CHARS} are allowed"
            )));
        }
        if text.starts_with('/') {
            return Err(problem(
                "starts with '/': patterns are relative to the repository root".to_owned(),
            ));
        }
        let segments = text
            .trim_end_matches('/')
            .split('/')
            .map(|segment| match segment {
                "" => Err(problem("has an empty segment ('//')".to_owned())),
                "." | ".." => Err(problem("has a '.' or '..' segment".to_owned())),
                "**" => Ok(Segment::AnyDepth),
                glob if glob.contains("**") => Err(problem(
                    "uses '**' inside a segment; write it as a whole segment".to_owned(),
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
                // Two runs with only invisible characters between them (dropped by the fold) are
                // one: the compiled matcher closes a skip past one run at a time.
                if glob.last() != Some(&Glob::AnyRun) {
                    glob.push(Glob::AnyRun);
                }
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

#[cfg(test)]
mod tests;
