//! Acting a checked scenario out: each step's pause, then its action, each reported as protocol
//! records on the agent's stdout, flushed one by one so the host sees the run as it happens.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use stet_protocol::scenario::{Action, Leak, Step};

use super::AgentRecord;
use super::ask::{ModelClient, ModelEndpoint};
use super::proxied;
use super::{AgentError, AgentOptions, Result};

/// The longest line of a child's output sent as one record; a longer one goes in several.
const MAX_OUTPUT_LINE: usize = 64 * 1024;

/// The largest instruction file read.
const MAX_INSTRUCTIONS_BYTES: u64 = 1024 * 1024;

/// How long a `network` step waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a `forever` step reports it is still there.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// The characters of a GitHub token's body.
const ALPHANUMERIC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// The length of a GitHub classic personal access token's body.
const GITHUB_TOKEN_BODY: usize = 36;

/// Whether the run goes on after a step.
enum AfterStep {
    Continue,
    Exit(u8),
}

/// The agent acting one scenario out.
pub(super) struct Actor<'a> {
    options: &'a AgentOptions,
    model: &'a str,
    endpoint: Option<&'a ModelEndpoint>,
    /// Made by the first `ask` step and kept for the others.
    client: Option<ModelClient>,
    out: &'a mut dyn Write,
}

impl<'a> Actor<'a> {
    pub(super) fn new(
        options: &'a AgentOptions,
        model: &'a str,
        endpoint: Option<&'a ModelEndpoint>,
        out: &'a mut dyn Write,
    ) -> Self {
        Actor {
            options,
            model,
            endpoint,
            client: None,
            out,
        }
    }

    /// Runs `steps` in order; returns the exit code. A failed step is reported as an `error` record
    /// and ends the run with 1; only a failure to write the output is an error.
    pub(super) fn perform(&mut self, steps: &[Step]) -> Result<u8> {
        for (offset, step) in steps.iter().enumerate() {
            self.pause(step.pause);
            match self.act(offset + 1, step) {
                Ok(AfterStep::Continue) => {}
                Ok(AfterStep::Exit(code)) => return Ok(code),
                Err(AgentError::Write(error)) => return Err(AgentError::Write(error)),
                Err(error) => {
                    self.emit(AgentRecord::Error {
                        text: error.to_string(),
                    })?;
                    return Ok(1);
                }
            }
        }
        Ok(0)
    }

    fn pause(&self, seconds: f64) {
        if let Ok(pause) = Duration::try_from_secs_f64(seconds * self.options.pace)
            && !pause.is_zero()
        {
            std::thread::sleep(pause);
        }
    }

    fn emit(&mut self, record: AgentRecord) -> Result<()> {
        let line = record
            .to_line()
            .map_err(|error| AgentError::Write(error.into()))?;
        writeln!(self.out, "{line}").map_err(AgentError::Write)?;
        self.out.flush().map_err(AgentError::Write)
    }

    fn output(&mut self, text: impl Into<String>) -> Result<()> {
        self.emit(AgentRecord::Output { text: text.into() })
    }

    fn command(&mut self, text: impl Into<String>) -> Result<()> {
        self.emit(AgentRecord::Command { text: text.into() })
    }

    fn workspace_path(&self, path: &str) -> PathBuf {
        self.options.workspace.join(path)
    }

    fn act(&mut self, step: usize, Step { pause, action }: &Step) -> Result<AfterStep> {
        match action {
            Action::Say(text) => self.emit(AgentRecord::Message { text: text.clone() })?,
            Action::Think(text) => self.emit(AgentRecord::Thought { text: text.clone() })?,
            Action::ReadInstructions => self.read_instructions()?,
            Action::Run(argv) => self.run_program(step, argv)?,
            Action::Daemon(argv) => self.start_daemon(step, argv, false)?,
            Action::DaemonWithOutput(argv) => self.start_daemon(step, argv, true)?,
            Action::Write { path, content } => {
                self.command(format!("write {path} ({})", lines(content)))?;
                let full = self.workspace_path(path);
                let edit_error = edit_error(step, "write", &full);
                if let Some(parent) = full.parent() {
                    std::fs::create_dir_all(parent).map_err(&edit_error)?;
                }
                std::fs::write(&full, content).map_err(edit_error)?;
            }
            Action::Append { path, content } => {
                self.command(format!("append to {path} ({})", lines(content)))?;
                let full = self.workspace_path(path);
                let edit_error = edit_error(step, "append to", &full);
                if let Some(parent) = full.parent() {
                    std::fs::create_dir_all(parent).map_err(&edit_error)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&full)
                    .and_then(|mut file| file.write_all(content.as_bytes()))
                    .map_err(edit_error)?;
            }
            Action::Replace { path, find, with } => {
                self.command(format!(
                    "edit {path}: replace {} with {}",
                    lines(find),
                    lines(with)
                ))?;
                let full = self.workspace_path(path);
                let edit_error = edit_error(step, "edit", &full);
                let text = std::fs::read_to_string(&full).map_err(&edit_error)?;
                if !text.contains(find.as_str()) {
                    return Err(AgentError::NotFound {
                        step,
                        path: full,
                        find: find.clone(),
                    });
                }
                std::fs::write(&full, text.replacen(find.as_str(), with, 1)).map_err(edit_error)?;
            }
            Action::Symlink { path, target } => {
                self.command(format!("symlink {path} -> {target}"))?;
                let full = self.workspace_path(path);
                let edit_error = edit_error(step, "symlink", &full);
                if let Some(parent) = full.parent() {
                    std::fs::create_dir_all(parent).map_err(&edit_error)?;
                }
                std::os::unix::fs::symlink(target, &full).map_err(edit_error)?;
            }
            Action::Chmod { path, mode } => {
                self.command(format!("chmod {mode:o} {path}"))?;
                let full = self.workspace_path(path);
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode))
                    .map_err(edit_error(step, "chmod", &full))?;
            }
            Action::Plant { path, secret } => {
                self.command(format!("append to {path} (1 line)"))?;
                let value = match secret {
                    Leak::Value(value) => value.clone(),
                    Leak::GitHub => github_shaped_token(step)?,
                };
                let full = self.workspace_path(path);
                let edit_error = edit_error(step, "append to", &full);
                if let Some(parent) = full.parent() {
                    std::fs::create_dir_all(parent).map_err(&edit_error)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&full)
                    .and_then(|mut file| file.write_all(format!("DEMO_TOKEN={value}\n").as_bytes()))
                    .map_err(edit_error)?;
            }
            Action::Remove(path) => {
                self.command(format!("remove {path}"))?;
                let full = self.workspace_path(path);
                let edit_error = edit_error(step, "remove", &full);
                let metadata = std::fs::symlink_metadata(&full).map_err(&edit_error)?;
                if metadata.is_dir() {
                    std::fs::remove_dir_all(&full).map_err(edit_error)?;
                } else {
                    std::fs::remove_file(&full).map_err(edit_error)?;
                }
            }
            Action::Usage {
                input_tokens,
                output_tokens,
                cached_tokens,
                cost_usd,
            } => self.emit(AgentRecord::Usage {
                model: self.model.to_owned(),
                input_tokens: *input_tokens,
                output_tokens: *output_tokens,
                cached_tokens: *cached_tokens,
                cost_usd: *cost_usd,
            })?,
            Action::Leak(leak) => {
                let value = match leak {
                    Leak::Value(value) => value.clone(),
                    Leak::GitHub => github_shaped_token(step)?,
                };
                self.output(format!("export DEMO_TOKEN={value}"))?;
            }
            Action::Network(address) => {
                let result = connect(*address);
                self.output(format!("connect {address}: {result}"))?;
            }
            Action::Fetch { url, save, upload } => {
                self.command(format!("fetch {url}"))?;
                match proxied::fetch(url, *upload) {
                    Ok(fetched) => {
                        self.output(format!(
                            "fetch {url}: {} ({} bytes)",
                            fetched.status,
                            fetched.body.len()
                        ))?;
                        if let Some(path) = save {
                            let full = self.workspace_path(path);
                            std::fs::write(&full, &fetched.body)
                                .map_err(edit_error(step, "save", &full))?;
                        }
                    }
                    Err(reason) => self.output(format!("fetch {url}: failed: {reason}"))?,
                }
            }
            Action::Tunnel { target, upload } => {
                self.command(format!("tunnel {target}"))?;
                let said = match proxied::tunnel(target, *upload) {
                    Ok(tunnel) => format!(
                        "tunnel {target}: {} (sent {}, received {})",
                        tunnel.status, tunnel.sent, tunnel.received
                    ),
                    Err(reason) => format!("tunnel {target}: failed: {reason}"),
                };
                self.output(said)?;
            }
            Action::Ask { prompt, stream } => {
                self.ask(step, prompt, *stream)?;
            }
            Action::AskUntilRefused {
                prompt,
                max,
                stream,
            } => {
                for asked in 0..*max {
                    if asked > 0 {
                        self.pause(*pause);
                    }
                    if !self.ask(step, prompt, *stream)? {
                        break;
                    }
                }
            }
            Action::Flood {
                lines,
                bytes_per_line,
            } => self.flood(*lines, *bytes_per_line)?,
            Action::Forever => self.forever()?,
            Action::Fail { code, message } => {
                self.emit(AgentRecord::Error {
                    text: message.clone(),
                })?;
                return Ok(AfterStep::Exit(*code));
            }
            Action::GiveUp(reason) => {
                self.emit(AgentRecord::Error {
                    text: reason.clone(),
                })?;
                return Ok(AfterStep::Exit(0));
            }
            Action::Finish(summary) => {
                self.emit(AgentRecord::Finish {
                    summary: summary.clone(),
                })?;
                return Ok(AfterStep::Exit(0));
            }
        }
        Ok(AfterStep::Continue)
    }

    /// Asks the model `prompt`: its reply becomes a `message` record, a refusal or failure an `error`
    /// record; returns whether the model replied. Having no model to ask (no gateway configured) is an
    /// `error` record too, and the run goes on; a model URL that cannot be used ends it.
    fn ask(&mut self, step: usize, prompt: &str, stream: bool) -> Result<bool> {
        let client = match (&self.client, self.endpoint) {
            (Some(client), _) => client,
            (None, Some(endpoint)) => self
                .client
                .insert(ModelClient::new(step, endpoint, self.model)?),
            (None, None) => {
                self.emit(AgentRecord::Error {
                    text: AgentError::NoModelUrl { step }.to_string(),
                })?;
                return Ok(false);
            }
        };
        match client.ask(step, prompt, stream) {
            Ok(text) => {
                self.emit(AgentRecord::Message { text })?;
                Ok(true)
            }
            Err(error @ (AgentError::ModelRefused { .. } | AgentError::Ask { .. })) => {
                self.emit(AgentRecord::Error {
                    text: error.to_string(),
                })?;
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// A message quoting the instruction file's first heading (or its first line), proving the file
    /// arrived.
    fn read_instructions(&mut self) -> Result<()> {
        let file = &self.options.instructions;
        let read_error = |source| AgentError::ReadInstructions {
            file: file.clone(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(file)
            .map_err(read_error)?
            .take(MAX_INSTRUCTIONS_BYTES)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        let text = String::from_utf8_lossy(&bytes);
        let heading = text
            .lines()
            .map(str::trim)
            .find(|line| line.starts_with('#'))
            .or_else(|| text.lines().map(str::trim).find(|line| !line.is_empty()));
        let message = match heading {
            Some(heading) => format!(
                "I have read the instructions in {}: {heading:?}",
                file.display()
            ),
            None => format!("The instructions in {} are empty.", file.display()),
        };
        self.emit(AgentRecord::Message { text: message })
    }

    /// Starts `argv` with no input and does not wait for it: it outlives this agent. Its output goes
    /// nowhere, or, `with_output`, to this process's own stdout and stderr.
    fn start_daemon(&mut self, step: usize, argv: &[String], with_output: bool) -> Result<()> {
        self.command(format!("{} &", shown_argv(argv)))?;
        let output = || {
            if with_output {
                Stdio::inherit()
            } else {
                Stdio::null()
            }
        };
        let Some((program, args)) = argv.split_first() else {
            return Ok(());
        };
        let started = self.executable(program).and_then(|executable| {
            Command::new(executable)
                .args(args)
                .current_dir(&self.options.workspace)
                .stdin(Stdio::null())
                .stdout(output())
                .stderr(output())
                .spawn()
        });
        match started {
            // Not waited for: it is reparented when this process ends.
            Ok(child) => self.emit(AgentRecord::Output {
                text: format!("started process {} in the background", child.id()),
            }),
            Err(source) => self.emit(AgentRecord::Error {
                text: AgentError::Start {
                    step,
                    program: program.clone(),
                    source,
                }
                .to_string(),
            }),
        }
    }

    /// The program `name` runs: the agent's own executable for `stet`.
    fn executable(&self, name: &str) -> std::io::Result<PathBuf> {
        if name == "stet" {
            std::env::current_exe()
        } else {
            Ok(PathBuf::from(name))
        }
    }

    /// Runs `argv` in the workspace, each line it prints becoming an `output` record, then its exit
    /// status. A program that cannot start or exits non-zero does not end the run. It gets pipes of
    /// its own, never this process's stdout: only the agent writes records.
    fn run_program(&mut self, step: usize, argv: &[String]) -> Result<()> {
        self.command(shown_argv(argv))?;
        let Some((program, args)) = argv.split_first() else {
            return Ok(());
        };
        let start_error = |source| AgentError::Start {
            step,
            program: program.clone(),
            source,
        };
        let executable = match self.executable(program) {
            Ok(path) => path,
            Err(source) => {
                return self.emit(AgentRecord::Error {
                    text: start_error(source).to_string(),
                });
            }
        };
        let spawned = Command::new(executable)
            .args(args)
            .current_dir(&self.options.workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(source) => {
                return self.emit(AgentRecord::Error {
                    text: start_error(source).to_string(),
                });
            }
        };
        let streams: Vec<Box<dyn Read + Send>> = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        .collect();
        let (sender, receiver) = mpsc::channel::<Vec<u8>>();
        let forwarded = std::thread::scope(|scope| {
            for stream in streams {
                let sender = sender.clone();
                scope.spawn(move || forward_lines(stream, &sender));
            }
            drop(sender);
            for line in receiver {
                self.output(String::from_utf8_lossy(&line))?;
            }
            Ok(())
        });
        if let Err(error) = forwarded {
            let _ = child.kill();
            let _ = child.wait();
            return Err(error);
        }
        let status = match child.wait() {
            Ok(status) => status,
            Err(source) => {
                return self.emit(AgentRecord::Error {
                    text: start_error(source).to_string(),
                });
            }
        };
        let ended = match (status.code(), status.signal()) {
            (Some(code), _) => format!("[exit code {code}]"),
            (None, Some(signal)) => format!("[killed by signal {signal}]"),
            (None, None) => "[ended]".to_owned(),
        };
        self.output(ended)
    }

    /// `lines` raw lines of `bytes_per_line` letters, not JSON, as fast as the output takes them.
    fn flood(&mut self, lines: u64, bytes_per_line: u64) -> Result<()> {
        let length = usize::try_from(bytes_per_line).unwrap_or(usize::MAX);
        let mut line: Vec<u8> = b"abcdefghijklmnopqrstuvwxyz"
            .iter()
            .copied()
            .cycle()
            .take(length)
            .collect();
        line.push(b'\n');
        let mut writer = BufWriter::with_capacity(1024 * 1024, &mut *self.out);
        for _ in 0..lines {
            writer.write_all(&line).map_err(AgentError::Write)?;
        }
        writer.flush().map_err(AgentError::Write)
    }

    /// A `thought` every second until the process is stopped (or its output is closed).
    fn forever(&mut self) -> Result<()> {
        let mut seconds: u64 = 0;
        loop {
            std::thread::sleep(HEARTBEAT);
            seconds += 1;
            self.emit(AgentRecord::Thought {
                text: format!("still working ({seconds} s)"),
            })?;
        }
    }
}

fn edit_error(
    step: usize,
    action: &'static str,
    path: &Path,
) -> impl Fn(std::io::Error) -> AgentError + use<> {
    let path = path.to_owned();
    move |source| AgentError::Edit {
        step,
        action,
        path: path.clone(),
        source,
    }
}

/// "1 line", "3 lines".
fn lines(text: &str) -> String {
    match text.lines().count() {
        1 => "1 line".to_owned(),
        count => format!("{count} lines"),
    }
}

/// The argv as one line for display; an argument with spaces or quotes is quoted.
fn shown_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| {
            if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            {
                format!("{arg:?}")
            } else {
                arg.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends each line of `stream` (without its newline), cut into pieces of [`MAX_OUTPUT_LINE`] bytes,
/// until the stream ends or nobody listens.
fn forward_lines(stream: Box<dyn Read + Send>, lines: &mpsc::Sender<Vec<u8>>) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        let (used, complete) = match reader.fill_buf() {
            Ok([]) => break,
            Ok(available) => {
                let room = MAX_OUTPUT_LINE - line.len();
                let window = &available[..available.len().min(room)];
                match memchr::memchr(b'\n', window) {
                    Some(end) => {
                        line.extend_from_slice(&window[..end]);
                        (end + 1, true)
                    }
                    None => {
                        line.extend_from_slice(window);
                        (window.len(), line.len() >= MAX_OUTPUT_LINE)
                    }
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        reader.consume(used);
        if complete {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if lines.send(std::mem::take(&mut line)).is_err() {
                return;
            }
        }
    }
    if !line.is_empty() {
        let _ = lines.send(line);
    }
}

/// What a TCP connection attempt to `address` came to, in a word or two.
fn connect(address: SocketAddr) -> String {
    use std::io::ErrorKind;
    match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
        Ok(_) => "connected".to_owned(),
        Err(error) => match error.kind() {
            ErrorKind::ConnectionRefused => "refused".to_owned(),
            ErrorKind::NetworkUnreachable | ErrorKind::HostUnreachable => "unreachable".to_owned(),
            ErrorKind::TimedOut | ErrorKind::WouldBlock => "timed out".to_owned(),
            _ => format!("failed ({error})"),
        },
    }
}

/// `ghp_` and 36 random letters and digits: the shape of a GitHub classic personal access token, made
/// up now so that no such value is ever written in the repository.
fn github_shaped_token(step: usize) -> Result<String> {
    // The largest multiple of the alphabet's size below 256: bytes from it up are drawn again, so
    // every character is equally likely.
    let limit = 256 - 256 % ALPHANUMERIC.len();
    let mut token = String::from("ghp_");
    let mut body = 0;
    let mut random = [0u8; 64];
    while body < GITHUB_TOKEN_BODY {
        getrandom::fill(&mut random).map_err(|error| AgentError::Random {
            step,
            detail: error.to_string(),
        })?;
        for byte in random.iter().map(|byte| usize::from(*byte)) {
            if body == GITHUB_TOKEN_BODY {
                break;
            }
            if byte < limit {
                token.push(char::from(ALPHANUMERIC[byte % ALPHANUMERIC.len()]));
                body += 1;
            }
        }
    }
    Ok(token)
}

#[cfg(test)]
mod tests;
