//! Scenario files: the script `stet agent` acts out inside the sandbox and the host's `script`
//! harness checks before it stages one (part of the engine ↔ sandbox contract, so both read the one
//! format), read into checked steps before the first one runs, so a mistake in a scenario is reported
//! with its file, step and field instead of half-way through a run.
//!
//! A scenario is TOML: a top-level `model` (the name usage records report and asks request) and `[[step]]` tables,
//! counted from 1 in errors. Each step holds exactly one action key and an optional `pause` in seconds
//! (slept before the action, multiplied by the run's pace):
//!
//! | action | does |
//! |---|---|
//! | `say = "…"`, `think = "…"` | a `message` or `thought` record |
//! | `read_instructions = true` | a message quoting the staged instructions' first heading |
//! | `run = ["argv", …]` | runs a program in the workspace (`"stet"` is the agent's own executable), its lines and exit status as `output` records; a failure does not end the run |
//! | `daemon = ["argv", …]` | starts a program in the workspace with no input or output and leaves it running past the agent's end |
//! | `daemon_with_output = ["argv", …]` | the same, but the program holds the agent's own stdout and stderr (what a hostile agent does to speak after its end) |
//! | `write = { path, content }`, `append = { path, content }` | writes or appends to a file, making its directories |
//! | `replace = { path, find, with }` | replaces the first `find` (an error when it is absent) |
//! | `symlink = { path, target }`, `remove = "path"` | makes a symbolic link; removes a file, link or tree |
//! | `chmod = { path, mode }` | sets a file's permission bits (`mode = 0o755` makes it executable) |
//! | `usage = { input_tokens, output_tokens, cached_tokens = 0, cost_usd }` | a `usage` record of the scenario's model |
//! | `leak = { value = "…" }` or `leak = { shape = "github" }` | prints `export DEMO_TOKEN=<value>`, the second made up at run time |
//! | `plant = { path, value = "…" }` or `plant = { path, shape = "github" }` | appends the line `DEMO_TOKEN=<value>` to a file (made up at run time for a shape), making its directories |
//! | `network = "ip:port"` | tries a TCP connection (2 s) and reports how it went |
//! | `ask = { prompt, stream = false }` | posts `prompt` as a chat completion of the scenario's model to `$STET_MODEL_URL/chat/completions` (bearer `$STET_MODEL_KEY`), read as server-sent events when `stream`; the reply is a `message` record, no `usage` record (the host's gateway meters asks); a refusal (non-2xx), a failure or no `STET_MODEL_URL` at all is an `error` record and the run goes on |
//! | `ask_until_refused = { prompt, max, stream = false }` | asks again and again, the step's pause between asks, until the model refuses or fails (an `error` record) or `max` asks are done, each reply a `message` record |
//! | `flood = { lines, bytes_per_line }` | prints raw lines that are not records, as fast as it can |
//! | `forever = true` | a `thought` every second until stopped |
//! | `fail = { code, message }` | an `error` record, then exits with `code` |
//! | `give_up = "reason"` | an `error` record, then exits 0 without finishing |
//! | `finish = "summary"` | a `finish` record, then exits 0 |
//!
//! The last four end the run, so no step may follow them. Paths in edits are relative to the workspace
//! and deliberately not restricted: the scripted agent stands in for an untrusted one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// Why a scenario cannot be read.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum ScenarioError {
    #[error("{}: the scenario is {size} bytes; scenarios are limited to {limit} bytes", file.display())]
    TooLarge {
        file: PathBuf,
        size: usize,
        limit: usize,
    },
    #[error("{}: {message}", file.display())]
    Syntax { file: PathBuf, message: String },
    #[error("{}: field `{field}`: {problem}", file.display())]
    Field {
        file: PathBuf,
        field: String,
        problem: String,
    },
    #[error("{}: step {step}: field `{field}`: {problem}", file.display())]
    StepField {
        file: PathBuf,
        /// Counted from 1.
        step: usize,
        field: String,
        problem: String,
    },
}

/// Result alias of scenario reading.
pub type Result<T> = std::result::Result<T, ScenarioError>;

/// The slowest pace a run accepts (pauses a hundred times their written length).
pub const MAX_PACE: f64 = 100.0;

/// The largest scenario file read, in bytes.
pub const MAX_SCENARIO_BYTES: usize = 1024 * 1024;

/// The longest pause a step may ask for, in seconds.
pub const MAX_PAUSE_SECONDS: f64 = 3600.0;

/// The longest line a `flood` step may print, in bytes.
pub const MAX_FLOOD_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// The most asks one `ask_until_refused` step may make.
pub const MAX_ASKS: u64 = 1_000_000;

/// Every action key a step may hold.
const ACTIONS: &[&str] = &[
    "say",
    "think",
    "read_instructions",
    "run",
    "daemon",
    "daemon_with_output",
    "write",
    "append",
    "replace",
    "symlink",
    "chmod",
    "remove",
    "usage",
    "leak",
    "plant",
    "network",
    "fetch",
    "tunnel",
    "ask",
    "ask_until_refused",
    "flood",
    "forever",
    "fail",
    "give_up",
    "finish",
];

/// Whether `key` is one of the scenario format's own keys (a top-level key or an action), which an
/// error may name without quoting the file.
pub fn is_format_key(key: &str) -> bool {
    ACTIONS.contains(&key) || matches!(key, "model" | "step" | "pause")
}

/// A checked scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The model name usage records report.
    pub model: String,
    /// The steps, in the order they are acted out.
    pub steps: Vec<Step>,
}

/// One step: a pause, then an action.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Seconds slept before the action, before scaling by the run's pace.
    pub pause: f64,
    /// What the step does after its pause.
    pub action: Action,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Print a `message` record with this text.
    Say(String),
    /// Print a `thought` record with this text.
    Think(String),
    /// Quote the first heading of the staged instruction file.
    ReadInstructions,
    /// Run a program in the workspace; `argv[0] == "stet"` is the agent's own executable.
    Run(Vec<String>),
    /// Start a program in the workspace and leave it running in the background, past the agent's
    /// own end (what a hostile agent does to keep working while a person reviews).
    Daemon(Vec<String>),
    /// [`Action::Daemon`] holding the agent's own stdout and stderr (the process's, whatever the
    /// records are written to): a hostile agent that would go on speaking after its own end.
    DaemonWithOutput(Vec<String>),
    /// Create or overwrite the file at `path` (relative to the workspace) with `content`.
    Write {
        /// The file, relative to the workspace.
        path: String,
        /// Its new content.
        content: String,
    },
    /// Append `content` to the file at `path`, creating it when missing.
    Append {
        /// The file, relative to the workspace.
        path: String,
        /// What is appended.
        content: String,
    },
    /// Replace the first `find` in the file at `path` with `with`; a missing `find` fails the run.
    Replace {
        /// The file, relative to the workspace.
        path: String,
        /// The text to find.
        find: String,
        /// The text it becomes.
        with: String,
    },
    /// Make a symbolic link at `path` pointing at `target` (which may point anywhere).
    Symlink {
        /// The link, relative to the workspace.
        path: String,
        /// What it points at, as written.
        target: String,
    },
    /// Remove the file or directory (with what it holds) at this path, relative to the workspace.
    Remove(String),
    /// Set the permission bits of `path`.
    Chmod {
        /// The file, relative to the workspace.
        path: String,
        /// The permission bits.
        mode: u32,
    },
    /// Print a `usage` record for the scenario's model, as if a request had been made.
    Usage {
        /// Prompt tokens.
        input_tokens: u64,
        /// Completion tokens.
        output_tokens: u64,
        /// Prompt tokens read from a cache.
        cached_tokens: u64,
        /// What the pretended request cost, if the scenario says.
        cost_usd: Option<f64>,
    },
    /// Print a secret on stdout, as a careless or hostile agent would.
    Leak(Leak),
    /// Append `DEMO_TOKEN=<the secret>` to the file at `path`.
    Plant {
        /// The file, relative to the workspace.
        path: String,
        /// The secret written there (never printed).
        secret: Leak,
    },
    /// Try a TCP connection to this address and report how it went (the sandbox should refuse).
    Network(SocketAddr),
    /// Ask the sandbox's HTTP proxy (`HTTP_PROXY`) for `url`, an `http://` URL, as a GET, or as a
    /// POST of `upload` bytes when that is not 0; report the answer's status line and save its body
    /// at `save` in the workspace when given.
    Fetch {
        /// The `http://host[:port]/path` asked for.
        url: String,
        /// Where in the workspace the body goes.
        save: Option<String>,
        /// Bytes sent as the request's body (a POST) when not 0.
        upload: u64,
    },
    /// Ask the sandbox's HTTPS proxy (`HTTPS_PROXY`) for a tunnel to `target` (`host:port`), send
    /// `upload` bytes through it and read what comes back until it closes; report the proxy's status
    /// line and the bytes each way.
    Tunnel {
        /// The `host:port` asked for.
        target: String,
        /// Bytes sent through the tunnel.
        upload: u64,
    },
    /// Ask the model `prompt`, reading the reply as a stream when `stream`.
    Ask {
        /// What is asked.
        prompt: String,
        /// Whether the reply is read as server-sent events.
        stream: bool,
    },
    /// Ask the model `prompt` until it refuses or `max` asks are done.
    AskUntilRefused {
        /// What is asked each time.
        prompt: String,
        /// The most asks made.
        max: u64,
        /// Whether replies are read as server-sent events.
        stream: bool,
    },
    /// Print `lines` raw lines of `bytes_per_line` bytes each, past any sane bound.
    Flood {
        /// How many lines.
        lines: u64,
        /// How long each line is, in bytes.
        bytes_per_line: u64,
    },
    /// Print a `thought` heartbeat every second until the output closes: an agent that never ends.
    Forever,
    /// Print an `error` record with `message` and end with exit code `code`.
    Fail {
        /// The exit code.
        code: u8,
        /// What the error record says.
        message: String,
    },
    /// Print an `error` record with this text and end with exit code 0 and no `finish`: an agent
    /// that stops without doing the task.
    GiveUp(String),
    /// Print a `finish` record with this summary and end with exit code 0.
    Finish(String),
}

impl Action {
    /// Whether the scenario ends with this action (no later step could run).
    fn ends_the_run(&self) -> bool {
        matches!(
            self,
            Action::Forever | Action::Fail { .. } | Action::GiveUp(_) | Action::Finish(_)
        )
    }
}

/// What a `leak` step prints, or a `plant` step writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Leak {
    /// This exact value.
    Value(String),
    /// A GitHub classic personal access token's shape, made up at run time.
    GitHub,
}

/// Reads the scenario `text` that came from `source` (named in errors).
pub fn parse_scenario(source: &Path, text: &str) -> Result<Scenario> {
    if text.len() > MAX_SCENARIO_BYTES {
        return Err(ScenarioError::TooLarge {
            file: source.to_owned(),
            size: text.len(),
            limit: MAX_SCENARIO_BYTES,
        });
    }
    let table: Table = toml::from_str(text).map_err(|error| ScenarioError::Syntax {
        file: source.to_owned(),
        message: crate::host_file::toml_problem(text, &error, "not a scenario"),
    })?;
    let top = |field: &str, problem: String| ScenarioError::Field {
        file: source.to_owned(),
        field: field.to_owned(),
        problem,
    };
    if let Some(unknown) = table
        .keys()
        .find(|key| !matches!(key.as_str(), "model" | "step"))
    {
        return Err(top(
            unknown,
            "is not a scenario field (expected `model` and `[[step]]` tables)".to_owned(),
        ));
    }
    let model = match table.get("model") {
        Some(Value::String(model)) if !model.trim().is_empty() => model.clone(),
        Some(Value::String(_)) => return Err(top("model", "is empty".to_owned())),
        Some(other) => {
            return Err(top(
                "model",
                format!("must be a string, not {}", other.type_str()),
            ));
        }
        None => return Err(top("model", "is missing".to_owned())),
    };
    let raw_steps = match table.get("step") {
        Some(Value::Array(steps)) if !steps.is_empty() => steps,
        Some(Value::Array(_)) | None => {
            return Err(top(
                "step",
                "the scenario has no `[[step]]` tables".to_owned(),
            ));
        }
        Some(other) => {
            return Err(top(
                "step",
                format!("must be an array of tables, not {}", other.type_str()),
            ));
        }
    };
    let mut steps = Vec::with_capacity(raw_steps.len());
    let mut ended_at: Option<usize> = None;
    for (offset, raw) in raw_steps.iter().enumerate() {
        let reader = StepReader {
            file: source,
            step: offset + 1,
        };
        if let Some(end) = ended_at {
            return Err(reader.error(
                "step",
                format!("can never run: the scenario ends at step {end}"),
            ));
        }
        let step = reader.step(raw)?;
        if step.action.ends_the_run() {
            ended_at = Some(offset + 1);
        }
        steps.push(step);
    }
    Ok(Scenario { model, steps })
}

/// Reads one step, naming it in errors.
struct StepReader<'a> {
    file: &'a Path,
    /// Counted from 1.
    step: usize,
}

impl StepReader<'_> {
    fn error(&self, field: &str, problem: impl Into<String>) -> ScenarioError {
        ScenarioError::StepField {
            file: self.file.to_owned(),
            step: self.step,
            field: field.to_owned(),
            problem: problem.into(),
        }
    }

    fn step(&self, raw: &Value) -> Result<Step> {
        let Value::Table(table) = raw else {
            return Err(self.error("step", format!("must be a table, not {}", raw.type_str())));
        };
        let mut action: Option<(&str, &Value)> = None;
        for (key, value) in table {
            if key == "pause" {
                continue;
            }
            if !ACTIONS.contains(&key.as_str()) {
                return Err(self.error(
                    key,
                    format!("is not a known action (one of: {})", ACTIONS.join(", ")),
                ));
            }
            if let Some((first, _)) = action {
                return Err(self.error(
                    key,
                    format!("a step holds one action, and this one already has `{first}`"),
                ));
            }
            action = Some((key.as_str(), value));
        }
        let Some((key, value)) = action else {
            return Err(self.error("step", "holds no action"));
        };
        let pause = match table.get("pause") {
            None => 0.0,
            Some(value) => self.pause(value)?,
        };
        Ok(Step {
            pause,
            action: self.action(key, value)?,
        })
    }

    fn pause(&self, value: &Value) -> Result<f64> {
        let seconds = match value {
            Value::Integer(seconds) => *seconds as f64,
            Value::Float(seconds) => *seconds,
            other => {
                return Err(self.error(
                    "pause",
                    format!("must be a number of seconds, not {}", other.type_str()),
                ));
            }
        };
        if !(0.0..=MAX_PAUSE_SECONDS).contains(&seconds) {
            return Err(self.error(
                "pause",
                format!("{seconds} is not between 0 and {MAX_PAUSE_SECONDS} seconds"),
            ));
        }
        Ok(seconds)
    }

    fn action(&self, key: &str, value: &Value) -> Result<Action> {
        Ok(match key {
            "say" => Action::Say(self.text(key, value)?),
            "think" => Action::Think(self.text(key, value)?),
            "give_up" => Action::GiveUp(self.text(key, value)?),
            "finish" => Action::Finish(self.text(key, value)?),
            "remove" => Action::Remove(self.path(key, value)?),
            "read_instructions" => {
                self.must_be_true(key, value)?;
                Action::ReadInstructions
            }
            "forever" => {
                self.must_be_true(key, value)?;
                Action::Forever
            }
            "run" => Action::Run(self.argv(key, value)?),
            "daemon" => Action::Daemon(self.argv(key, value)?),
            "daemon_with_output" => Action::DaemonWithOutput(self.argv(key, value)?),
            "network" => Action::Network(self.address(value)?),
            "fetch" => {
                let fields = self.fields(key, value, &["url", "save", "upload"])?;
                let url = fields.text("url")?;
                if !url.starts_with("http://") {
                    return Err(fields.error("url", format!("{url:?} is not an http:// URL")));
                }
                Action::Fetch {
                    url,
                    save: match fields.table.get("save") {
                        Some(_) => Some(fields.path("save")?),
                        None => None,
                    },
                    upload: fields.optional_count("upload")?.unwrap_or(0),
                }
            }
            "tunnel" => {
                let fields = self.fields(key, value, &["target", "upload"])?;
                Action::Tunnel {
                    target: fields.text("target")?,
                    upload: fields.optional_count("upload")?.unwrap_or(0),
                }
            }
            "write" | "append" => {
                let fields = self.fields(key, value, &["path", "content"])?;
                let path = fields.path("path")?;
                let content = fields.text("content")?;
                if key == "write" {
                    Action::Write { path, content }
                } else {
                    Action::Append { path, content }
                }
            }
            "replace" => {
                let fields = self.fields(key, value, &["path", "find", "with"])?;
                let find = fields.text("find")?;
                if find.is_empty() {
                    return Err(fields.error("find", "is empty"));
                }
                Action::Replace {
                    path: fields.path("path")?,
                    find,
                    with: fields.text("with")?,
                }
            }
            "symlink" => {
                let fields = self.fields(key, value, &["path", "target"])?;
                Action::Symlink {
                    path: fields.path("path")?,
                    target: fields.path("target")?,
                }
            }
            "usage" => {
                let fields = self.fields(
                    key,
                    value,
                    &["input_tokens", "output_tokens", "cached_tokens", "cost_usd"],
                )?;
                Action::Usage {
                    input_tokens: fields.count("input_tokens")?,
                    output_tokens: fields.count("output_tokens")?,
                    cached_tokens: fields.optional_count("cached_tokens")?.unwrap_or(0),
                    cost_usd: fields.optional_cost("cost_usd")?,
                }
            }
            "leak" => Action::Leak(self.leak("leak", value, &["value", "shape"])?),
            "plant" => {
                let fields = self.fields(key, value, &["path", "value", "shape"])?;
                Action::Plant {
                    path: fields.path("path")?,
                    secret: self.leak(key, value, &["path", "value", "shape"])?,
                }
            }
            "chmod" => {
                let fields = self.fields(key, value, &["path", "mode"])?;
                let mode = fields.count("mode")?;
                let mode = u32::try_from(mode)
                    .ok()
                    .filter(|mode| *mode <= 0o7777)
                    .ok_or_else(|| {
                        fields.error("mode", format!("{mode:#o} is not a mode from 0 to 0o7777"))
                    })?;
                Action::Chmod {
                    path: fields.path("path")?,
                    mode,
                }
            }
            "ask" => {
                let fields = self.fields(key, value, &["prompt", "stream"])?;
                Action::Ask {
                    prompt: fields.prompt()?,
                    stream: fields.optional_flag("stream")?.unwrap_or(false),
                }
            }
            "ask_until_refused" => {
                let fields = self.fields(key, value, &["prompt", "max", "stream"])?;
                let max = fields.count("max")?;
                if !(1..=MAX_ASKS).contains(&max) {
                    return Err(fields.error("max", format!("{max} is not from 1 to {MAX_ASKS}")));
                }
                Action::AskUntilRefused {
                    prompt: fields.prompt()?,
                    max,
                    stream: fields.optional_flag("stream")?.unwrap_or(false),
                }
            }
            "flood" => {
                let fields = self.fields(key, value, &["lines", "bytes_per_line"])?;
                let bytes_per_line = fields.count("bytes_per_line")?;
                if bytes_per_line > MAX_FLOOD_LINE_BYTES {
                    return Err(fields.error(
                        "bytes_per_line",
                        format!("{bytes_per_line} is more than {MAX_FLOOD_LINE_BYTES}"),
                    ));
                }
                Action::Flood {
                    lines: fields.count("lines")?,
                    bytes_per_line,
                }
            }
            "fail" => {
                let fields = self.fields(key, value, &["code", "message"])?;
                let code = fields.count("code")?;
                let code = u8::try_from(code).map_err(|_| {
                    fields.error("code", format!("{code} is not an exit code (0 to 255)"))
                })?;
                Action::Fail {
                    code,
                    message: fields.text("message")?,
                }
            }
            other => {
                return Err(self.error(other, "is not a known action"));
            }
        })
    }

    fn text(&self, field: &str, value: &Value) -> Result<String> {
        match value {
            Value::String(text) => Ok(text.clone()),
            other => Err(self.error(field, format!("must be a string, not {}", other.type_str()))),
        }
    }

    fn path(&self, field: &str, value: &Value) -> Result<String> {
        let path = self.text(field, value)?;
        if path.is_empty() {
            return Err(self.error(field, "is an empty path"));
        }
        if path.contains('\0') {
            return Err(self.error(field, format!("{path:?} holds a NUL byte")));
        }
        Ok(path)
    }

    fn must_be_true(&self, field: &str, value: &Value) -> Result<()> {
        match value {
            Value::Boolean(true) => Ok(()),
            other => Err(self.error(field, format!("must be `true`, not {other}"))),
        }
    }

    fn argv(&self, key: &str, value: &Value) -> Result<Vec<String>> {
        let Value::Array(items) = value else {
            return Err(self.error(
                key,
                format!("must be an array of strings, not {}", value.type_str()),
            ));
        };
        let argv = items
            .iter()
            .enumerate()
            .map(|(index, item)| match item {
                Value::String(arg) if arg.contains('\0') => Err(self.error(
                    &format!("{key}[{index}]"),
                    format!("{arg:?} holds a NUL byte"),
                )),
                Value::String(arg) => Ok(arg.clone()),
                other => Err(self.error(
                    &format!("{key}[{index}]"),
                    format!("must be a string, not {}", other.type_str()),
                )),
            })
            .collect::<Result<Vec<String>>>()?;
        match argv.first() {
            Some(program) if !program.is_empty() => Ok(argv),
            _ => Err(self.error(key, "needs a program to run")),
        }
    }

    fn address(&self, value: &Value) -> Result<SocketAddr> {
        let text = self.text("network", value)?;
        text.parse().map_err(|_| {
            self.error(
                "network",
                format!("{text:?} is not an IP address and port such as \"1.1.1.1:443\""),
            )
        })
    }

    fn leak(&self, action: &str, value: &Value, allowed: &[&str]) -> Result<Leak> {
        let fields = self.fields(action, value, allowed)?;
        match (fields.table.get("value"), fields.table.get("shape")) {
            (Some(_), None) => Ok(Leak::Value(fields.text("value")?)),
            (None, Some(_)) => match fields.text("shape")?.as_str() {
                "github" => Ok(Leak::GitHub),
                shape => Err(fields.error(
                    "shape",
                    format!("{shape:?} is not a known shape (only \"github\")"),
                )),
            },
            _ => Err(self.error(action, "needs exactly one of `value` and `shape`")),
        }
    }

    /// The inline table of action `action`, refusing keys other than `allowed`.
    fn fields<'v>(
        &'v self,
        action: &'v str,
        value: &'v Value,
        allowed: &[&str],
    ) -> Result<Fields<'v>> {
        let Value::Table(table) = value else {
            return Err(self.error(
                action,
                format!(
                    "must be a table such as {{ {} = ... }}",
                    allowed.join(" = ..., ")
                ),
            ));
        };
        if let Some(unknown) = table.keys().find(|key| !allowed.contains(&key.as_str())) {
            return Err(self.error(
                &format!("{action}.{unknown}"),
                format!(
                    "is not a field of `{action}` (expected: {})",
                    allowed.join(", ")
                ),
            ));
        }
        Ok(Fields {
            reader: self,
            action,
            table,
        })
    }
}

/// The fields of one action's inline table.
struct Fields<'a> {
    reader: &'a StepReader<'a>,
    action: &'a str,
    table: &'a Table,
}

impl Fields<'_> {
    fn error(&self, field: &str, problem: impl Into<String>) -> ScenarioError {
        self.reader
            .error(&format!("{}.{field}", self.action), problem)
    }

    fn required(&self, field: &str) -> Result<&Value> {
        self.table
            .get(field)
            .ok_or_else(|| self.error(field, "is missing"))
    }

    fn text(&self, field: &str) -> Result<String> {
        match self.required(field)? {
            Value::String(text) => Ok(text.clone()),
            other => Err(self.error(field, format!("must be a string, not {}", other.type_str()))),
        }
    }

    fn path(&self, field: &str) -> Result<String> {
        let value = self.required(field)?;
        self.reader.path(&format!("{}.{field}", self.action), value)
    }

    /// The `prompt` field: text that is not blank.
    fn prompt(&self) -> Result<String> {
        let prompt = self.text("prompt")?;
        if prompt.trim().is_empty() {
            return Err(self.error("prompt", "is empty"));
        }
        Ok(prompt)
    }

    fn optional_flag(&self, field: &str) -> Result<Option<bool>> {
        match self.table.get(field) {
            None => Ok(None),
            Some(Value::Boolean(flag)) => Ok(Some(*flag)),
            Some(other) => Err(self.error(
                field,
                format!("must be true or false, not {}", other.type_str()),
            )),
        }
    }

    fn count(&self, field: &str) -> Result<u64> {
        self.optional_count(field)?
            .ok_or_else(|| self.error(field, "is missing"))
    }

    fn optional_count(&self, field: &str) -> Result<Option<u64>> {
        match self.table.get(field) {
            None => Ok(None),
            Some(Value::Integer(count)) => u64::try_from(*count)
                .map(Some)
                .map_err(|_| self.error(field, format!("{count} is negative"))),
            Some(other) => Err(self.error(
                field,
                format!("must be a whole number, not {}", other.type_str()),
            )),
        }
    }

    fn optional_cost(&self, field: &str) -> Result<Option<f64>> {
        let cost = match self.table.get(field) {
            None => return Ok(None),
            Some(Value::Integer(cost)) => *cost as f64,
            Some(Value::Float(cost)) => *cost,
            Some(other) => {
                return Err(self.error(
                    field,
                    format!("must be a number of dollars, not {}", other.type_str()),
                ));
            }
        };
        if cost.is_finite() && cost >= 0.0 {
            Ok(Some(cost))
        } else {
            Err(self.error(field, format!("{cost} is not a cost of 0 dollars or more")))
        }
    }
}

#[cfg(test)]
mod tests;
