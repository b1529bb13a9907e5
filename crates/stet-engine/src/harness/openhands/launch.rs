//! How the OpenHands CLI starts in the sandbox: its settings and the harness's launch plan (the staged
//! task file, the non-dumpable start, the model's endpoint and the quiet start-up in the environment).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::credential::SecretValue;
use crate::harness::{Harness, HarnessError, HarnessLaunch, HarnessPlan, OutputParser, StagedFile};
use crate::runtime::{OUTPUTS_MOUNT, SandboxProcess, WORKSPACE_MOUNT};
use stet_protocol::event::Usage;
use stet_sanitize::sanitize::TokenSanitizer;

use super::{HARNESS, OpenHandsOutput, final_usage};

/// The OpenHands CLI version the dispatch image carries (`docker/dispatch/Dockerfile`) and this
/// module's parser is built against (PyPI `openhands`, with `openhands-sdk` 1.21).
pub const OPENHANDS_VERSION: &str = "1.16.0";

/// The staged instruction file, at `/outputs/task.md` in the sandbox.
const TASK_FILE: &str = "task.md";

/// Where, under the outputs directory, OpenHands keeps its conversations.
const CONVERSATIONS_SUBDIR: &str = "conversations";

/// How the CLI starts: made non-dumpable first (`prctl(PR_SET_DUMPABLE, 0)`), so that its
/// `/proc/<pid>/fd` belongs to root and the agent's own commands, running as the same user, cannot
/// write forged events into its stdout or stderr; then the `openhands` console script runs in the
/// same process with the arguments that follow.
pub(super) const NON_DUMPABLE_LAUNCH: &str = "import ctypes, runpy, shutil, sys\n\
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:\n    \
sys.exit('stet: prctl(PR_SET_DUMPABLE, 0) failed: ' + str(ctypes.get_errno()))\n\
cli = shutil.which('openhands')\n\
if cli is None:\n    sys.exit('stet: no openhands on PATH')\n\
sys.argv = [cli] + sys.argv[1:]\n\
runpy.run_path(cli, run_name='__main__')\n";

/// What keeps the CLI's start-up short and quiet in a sandbox with no network: no banner, its logs as
/// one JSON object per line (which [`OpenHandsStderr`] reads), and LiteLLM's bundled price map instead of
/// a download that cannot succeed.
const QUIET_ENV: &[(&str, &str)] = &[
    ("OPENHANDS_SUPPRESS_BANNER", "1"),
    ("LOG_JSON", "true"),
    ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
];

/// What the OpenHands harness is told by configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenHandsSettings {
    /// The model, as OpenHands (LiteLLM) names it, e.g. `openai/gpt-4.1`.
    pub model: String,
    /// The OpenHands CLI version the dispatch image carries.
    pub version: String,
}

impl OpenHandsSettings {
    /// Settings for `model` and the pinned [`OPENHANDS_VERSION`].
    pub fn new(model: impl Into<String>) -> OpenHandsSettings {
        OpenHandsSettings {
            model: model.into(),
            version: OPENHANDS_VERSION.to_owned(),
        }
    }
}

/// Runs the OpenHands CLI headless in the sandbox.
#[derive(Debug)]
pub struct OpenHandsHarness {
    settings: OpenHandsSettings,
}

impl OpenHandsHarness {
    /// The harness, run with `settings`.
    pub fn new(settings: OpenHandsSettings) -> OpenHandsHarness {
        OpenHandsHarness { settings }
    }
}

impl Harness for OpenHandsHarness {
    fn name(&self) -> &'static str {
        HARNESS
    }

    fn version(&self) -> Option<String> {
        Some(self.settings.version.clone())
    }

    fn model(&self) -> Option<String> {
        Some(self.settings.model.clone())
    }

    fn plan(&self, launch: &HarnessLaunch<'_>) -> crate::harness::Result<HarnessPlan> {
        let (model, access) = crate::harness::model_through_gateway(
            HARNESS,
            "OpenHands",
            &self.settings.model,
            launch,
        )?;
        let plain = |value: &str| SecretValue::new(value.to_owned());
        let mut env = BTreeMap::new();
        env.insert("LLM_MODEL".to_owned(), plain(model));
        env.insert("LLM_BASE_URL".to_owned(), plain(&access.base_url));
        env.insert("LLM_API_KEY".to_owned(), plain(&access.placeholder_key));
        env.insert("OPENHANDS_WORK_DIR".to_owned(), plain(WORKSPACE_MOUNT));
        env.insert(
            "OPENHANDS_CONVERSATIONS_DIR".to_owned(),
            SecretValue::new(format!("{OUTPUTS_MOUNT}/{CONVERSATIONS_SUBDIR}")),
        );
        for (name, value) in QUIET_ENV {
            env.insert((*name).to_owned(), plain(value));
        }
        let task = format!("{OUTPUTS_MOUNT}/{TASK_FILE}");
        let argv = [
            "python3",
            "-c",
            NON_DUMPABLE_LAUNCH,
            "--headless",
            "--json",
            "--override-with-envs",
            "-f",
            &task,
        ]
        .map(str::to_owned)
        .to_vec();
        Ok(HarnessPlan {
            files: vec![StagedFile {
                name: TASK_FILE.to_owned(),
                contents: launch.instructions.as_bytes().to_vec(),
            }],
            processes: vec![SandboxProcess {
                argv,
                env,
                workdir: WORKSPACE_MOUNT.to_owned(),
            }],
        })
    }

    fn parser(&self, sanitizer: Arc<TokenSanitizer>) -> Box<dyn OutputParser> {
        Box::new(OpenHandsOutput::new(sanitizer))
    }

    fn final_usage(
        &self,
        outputs: &Path,
        sanitizer: &Arc<TokenSanitizer>,
    ) -> crate::harness::Result<Option<Usage>> {
        final_usage(outputs, sanitizer).map_err(|error| HarnessError::Usage {
            harness: HARNESS,
            detail: error.to_string(),
        })
    }
}
