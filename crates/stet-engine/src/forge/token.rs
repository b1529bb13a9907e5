//! Where the primary forge token comes from. Configuration names a secret by reference only — an
//! environment variable (`token_env`) or a command that prints it (`token_command`) — so no token is
//! ever written into a config file, and errors name the reference, never the value.

use std::io::{self, Read};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use crate::credential::SecretValue;
use stet_sanitize::sanitize::TokenSanitizer;

/// How long a token command may run before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// A token is one line; anything longer is not one.
const STDOUT_LIMIT: usize = 16 * 1024;
/// How much of a failing command's stderr is kept (and then sanitized).
const STDERR_LIMIT: usize = 8 * 1024;
/// How much of that stderr an error shows.
const STDERR_SHOWN_CHARS: usize = 500;
/// How often a running command is checked for exit.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Everything that can go wrong reading the primary token. Messages name the variable or the command,
/// never a token value.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum TokenError {
    #[error("environment variable {name} is not set; export the forge token in it")]
    EnvMissing { name: String },
    #[error("environment variable {name} is set but empty")]
    EnvEmpty { name: String },
    #[error("environment variable {name} is not valid UTF-8")]
    EnvNotUnicode { name: String },
    #[error(
        "token_command is empty; give the program and its arguments, e.g. [\"gh\", \"auth\", \"token\"]"
    )]
    CommandEmpty,
    #[error("token command `{command}` could not be started: {detail}")]
    Spawn { command: String, detail: String },
    #[error("token command `{command}` did not finish within {timeout:?} and was killed")]
    TimedOut { command: String, timeout: Duration },
    #[error("token command `{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("token command `{command}` printed nothing")]
    EmptyOutput { command: String },
    #[error(
        "token command `{command}` printed more than {STDOUT_LIMIT} bytes; a token is one line"
    )]
    OutputTooLong { command: String },
    #[error("token command `{command}` printed text that is not UTF-8")]
    OutputNotUtf8 { command: String },
    #[error(
        "the token from {origin} contains whitespace or control characters; a token is one word of printable ASCII"
    )]
    Malformed { origin: String },
    #[error(
        "the password from {origin} is empty, spans more than one line or holds control characters; print the password alone on one line"
    )]
    MalformedLine { origin: String },
    #[error("token command `{command}`: {detail}")]
    Io { command: String, detail: String },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, TokenError>;

/// A reference to the primary token, as configuration spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `token_env = "GITHUB_TOKEN"`: the token is the variable's value.
    Env(String),
    /// `token_command = ["gh", "auth", "token"]`: the token is what the command prints. Run as an argv,
    /// never through a shell.
    Command(Vec<String>),
}

impl TokenSource {
    /// Reads the token now, waiting at most [`COMMAND_TIMEOUT`] for a command.
    pub fn resolve(&self) -> Result<SecretValue> {
        self.resolve_within(COMMAND_TIMEOUT)
    }

    /// Reads the token now, killing a command that runs longer than `timeout`.
    pub fn resolve_within(&self, timeout: Duration) -> Result<SecretValue> {
        self.read(timeout, Shape::Word)
    }

    /// Reads a password now: one line, which may hold spaces and any printable character (only the
    /// line end is taken off), waiting at most [`COMMAND_TIMEOUT`] for a command.
    pub fn resolve_password(&self) -> Result<SecretValue> {
        self.read(COMMAND_TIMEOUT, Shape::Line)
    }

    fn read(&self, timeout: Duration, shape: Shape) -> Result<SecretValue> {
        match self {
            TokenSource::Env(name) => from_env(name, shape),
            TokenSource::Command(argv) => from_command(argv, timeout, shape),
        }
    }

    /// How errors and logs name this source: the variable or the command, never the value.
    pub fn describe(&self) -> String {
        match self {
            TokenSource::Env(name) => format!("environment variable {name}"),
            TokenSource::Command(argv) => format!("token command `{}`", argv.join(" ")),
        }
    }
}

/// What a secret must look like.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// A token: one word of printable ASCII, surrounding whitespace trimmed.
    Word,
    /// A password: one line without control characters, its line end taken off.
    Line,
}

impl Shape {
    fn accept(self, text: &str, origin: impl Fn() -> String) -> Result<SecretValue> {
        match self {
            Shape::Word => one_word(text, origin),
            Shape::Line => one_line(text, origin),
        }
    }
}

fn from_env(name: &str, shape: Shape) -> Result<SecretValue> {
    let value = std::env::var_os(name).ok_or_else(|| TokenError::EnvMissing {
        name: name.to_owned(),
    })?;
    let value = Zeroizing::new(value.into_string().map_err(|_| TokenError::EnvNotUnicode {
        name: name.to_owned(),
    })?);
    if value.trim().is_empty() {
        return Err(TokenError::EnvEmpty {
            name: name.to_owned(),
        });
    }
    shape.accept(&value, || format!("environment variable {name}"))
}

fn from_command(argv: &[String], timeout: Duration, shape: Shape) -> Result<SecretValue> {
    let (program, args) = argv.split_first().ok_or(TokenError::CommandEmpty)?;
    let command = argv.join(" ");
    let io_error = |err: io::Error| TokenError::Io {
        command: command.clone(),
        detail: err.to_string(),
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| TokenError::Spawn {
            command: command.clone(),
            detail: err.to_string(),
        })?;
    let deadline = Instant::now() + timeout;
    let stdout = child
        .stdout
        .take()
        .map(|pipe| capture(pipe, STDOUT_LIMIT))
        .transpose()
        .map_err(io_error)?;
    let stderr = child
        .stderr
        .take()
        .map(|pipe| capture(pipe, STDERR_LIMIT))
        .transpose()
        .map_err(io_error)?;
    let timed_out = || TokenError::TimedOut {
        command: command.clone(),
        timeout,
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                // Best effort: the error below is what matters; a failed kill leaves nothing to do.
                let _ = child.kill();
                let _ = child.wait();
                return Err(timed_out());
            }
            Ok(None) => thread::sleep(POLL_INTERVAL),
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io_error(err));
            }
        }
    };
    // A grandchild may still hold a pipe open after the command exits: the deadline bounds that too.
    let stdout = collected(stdout, deadline, &command, timed_out)?;
    if !status.success() {
        let stderr = collected(stderr, deadline, &command, timed_out)?;
        return Err(TokenError::Failed {
            command: command.clone(),
            status: status.to_string(),
            stderr: shown_stderr(&stderr.bytes),
        });
    }
    if stdout.overflowed {
        return Err(TokenError::OutputTooLong { command });
    }
    let text = std::str::from_utf8(&stdout.bytes).map_err(|_| TokenError::OutputNotUtf8 {
        command: command.clone(),
    })?;
    if text.trim().is_empty() {
        return Err(TokenError::EmptyOutput { command });
    }
    shape.accept(text, || format!("token command `{command}`"))
}

/// What a pipe delivered: the first `limit` bytes, and whether there was more.
struct Captured {
    bytes: Zeroizing<Vec<u8>>,
    overflowed: bool,
}

/// Reads a pipe on its own thread (so neither pipe can fill and stall the command), keeping the first
/// `limit` bytes and draining the rest.
fn capture(
    mut pipe: impl Read + Send + 'static,
    limit: usize,
) -> io::Result<Receiver<io::Result<Captured>>> {
    let (sender, receiver) = mpsc::channel();
    thread::Builder::new()
        .name("stet-token-pipe".to_owned())
        .spawn(move || {
            let mut bytes = Zeroizing::new(Vec::with_capacity(limit));
            let result = (&mut pipe)
                .take(limit as u64)
                .read_to_end(&mut bytes)
                .and_then(|_| io::copy(&mut pipe, &mut io::sink()))
                .map(|rest| Captured {
                    bytes,
                    overflowed: rest > 0,
                });
            // The receiver is gone only when the caller gave up on the deadline.
            let _ = sender.send(result);
        })?;
    Ok(receiver)
}

fn collected(
    receiver: Option<Receiver<io::Result<Captured>>>,
    deadline: Instant,
    command: &str,
    timed_out: impl Fn() -> TokenError,
) -> Result<Captured> {
    let Some(receiver) = receiver else {
        return Ok(Captured {
            bytes: Zeroizing::new(Vec::new()),
            overflowed: false,
        });
    };
    match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(Ok(captured)) => Ok(captured),
        Ok(Err(err)) => Err(TokenError::Io {
            command: command.to_owned(),
            detail: err.to_string(),
        }),
        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => Err(timed_out()),
    }
}

/// A failing command's stderr as an error may show it: sanitized first (so a secret cut by the bound
/// cannot slip through half-masked), then bounded.
fn shown_stderr(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim();
    if text.is_empty() {
        return "no output on stderr".to_owned();
    }
    let sanitized = match TokenSanitizer::new() {
        Ok(sanitizer) => {
            stet_sanitize::display::one_line(Arc::new(sanitizer).sanitize(text).as_str())
        }
        Err(_) => return "stderr withheld: the sanitizer could not be built".to_owned(),
    };
    let mut shown: String = sanitized.chars().take(STDERR_SHOWN_CHARS).collect();
    if shown.len() < sanitized.len() {
        shown.push('…');
    }
    shown
}

/// Trims surrounding whitespace and accepts one word of printable ASCII: anything else cannot travel
/// in an `Authorization` header and is not a token.
fn one_word(text: &str, origin: impl Fn() -> String) -> Result<SecretValue> {
    let word = text.trim();
    if word.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(SecretValue::new(word.to_owned()))
    } else {
        Err(TokenError::Malformed { origin: origin() })
    }
}

/// Takes off one line end and accepts a line without control characters: a password may hold
/// spaces, but a second line or a terminal escape is not part of one.
fn one_line(text: &str, origin: impl Fn() -> String) -> Result<SecretValue> {
    let line = text
        .strip_suffix('\n')
        .map_or(text, |rest| rest.strip_suffix('\r').unwrap_or(rest));
    if !line.is_empty() && !line.chars().any(char::is_control) {
        Ok(SecretValue::new(line.to_owned()))
    } else {
        Err(TokenError::MalformedLine { origin: origin() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_keeps_its_spaces_and_loses_only_its_line_end() {
        let password = sh("printf ' correct horse battery\\r\\n'")
            .resolve_password()
            .unwrap();
        assert_eq!(password.expose_secret(), " correct horse battery");
        for bad in ["printf 'one\\ntwo\\n'", "printf 'a\\033[2Jb'"] {
            let err = sh(bad).resolve_password().unwrap_err();
            assert!(
                matches!(err, TokenError::MalformedLine { .. }),
                "{bad}: {err}"
            );
        }
        let err = sh("printf '\\n'").resolve_password().unwrap_err();
        assert!(matches!(err, TokenError::EmptyOutput { .. }), "{err}");
    }

    fn sh(script: &str) -> TokenSource {
        TokenSource::Command(vec!["sh".into(), "-c".into(), script.into()])
    }

    #[test]
    fn a_command_token_is_trimmed() {
        let token = sh("printf '  abc-def-123\\n'").resolve().unwrap();
        assert_eq!(token.expose_secret(), "abc-def-123");
    }

    #[test]
    fn a_slow_command_is_killed_at_the_deadline() {
        let started = Instant::now();
        let err = sh("sleep 20")
            .resolve_within(Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(err, TokenError::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn several_words_are_not_a_token() {
        let err = sh("printf 'one%stwo' ' '").resolve().unwrap_err();
        assert!(matches!(err, TokenError::Malformed { .. }), "{err}");
        assert!(!err.to_string().contains("one two"));
    }

    #[test]
    fn too_much_output_is_refused() {
        let err = sh("head -c 20000 /dev/zero | tr '\\0' a")
            .resolve()
            .unwrap_err();
        assert!(matches!(err, TokenError::OutputTooLong { .. }), "{err}");
    }

    #[test]
    fn stderr_is_bounded() {
        let err = sh("head -c 5000 /dev/zero | tr '\\0' e >&2; exit 3")
            .resolve()
            .unwrap_err();
        let TokenError::Failed { stderr, status, .. } = err else {
            panic!("expected Failed");
        };
        assert!(status.contains('3'), "{status}");
        assert_eq!(stderr.chars().count(), STDERR_SHOWN_CHARS + 1);
    }

    #[test]
    fn an_empty_argv_is_refused() {
        let err = TokenSource::Command(Vec::new()).resolve().unwrap_err();
        assert!(matches!(err, TokenError::CommandEmpty));
    }

    #[test]
    fn a_missing_program_is_named() {
        let missing = format!("stet-no-such-program-{}", uuid::Uuid::new_v4().simple());
        let err = TokenSource::Command(vec![missing.clone()])
            .resolve()
            .unwrap_err();
        assert!(matches!(err, TokenError::Spawn { .. }));
        assert!(err.to_string().contains(&missing));
    }
}
