//! A process exec'd with its stdin, stdout and stderr attached as byte streams
//! ([`AttachedProcess`]): the transport of the relay's channel stream in copy mode (issue #33). The
//! engine multiplexes stdout and stderr on one connection behind 8-byte headers; a task here takes
//! them apart into two in-memory pipes, so what the process writes on stderr never enters the
//! bytes read as its stdout.

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use super::engine_error;
use crate::runtime::{AttachedProcess, Result, RuntimeError, SandboxProcess};

/// How many bytes of the process's stdout, and of its stderr, wait in memory for their reader.
const PIPE_BYTES: usize = 256 * 1024;

/// Starts `process` in `container` attached, as [`crate::runtime::ContainerRuntime::exec_attached`].
pub(super) async fn exec_attached(
    docker: &Docker,
    container: &str,
    process: &SandboxProcess,
) -> Result<AttachedProcess> {
    let config = super::exec_config(process, true);
    let created = docker
        .create_exec(container, config)
        .await
        .map_err(|error| engine_error(container, "exec create", error))?;
    let options = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: None,
    };
    let started = docker
        .start_exec(&created.id, Some(options))
        .await
        .map_err(|error| engine_error(container, "exec start", error))?;
    let StartExecResults::Attached { mut output, input } = started else {
        return Err(RuntimeError::Engine {
            container: container.to_owned(),
            operation: "exec start",
            detail: "the engine started the process detached".to_owned(),
        });
    };
    let (stdout_read, mut stdout_write) = tokio::io::simplex(PIPE_BYTES);
    let (stderr_read, mut stderr_write) = tokio::io::simplex(PIPE_BYTES);
    let name = container.to_owned();
    tokio::spawn(async move {
        while let Some(frame) = output.next().await {
            let written = match frame {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    stdout_write.write_all(&message).await
                }
                Ok(LogOutput::StdErr { message }) => stderr_write.write_all(&message).await,
                Ok(LogOutput::StdIn { .. }) => Ok(()),
                Err(error) => {
                    tracing::debug!(container = %name, %error, "an attached process's output broke");
                    break;
                }
            };
            if written.is_err() {
                // Its reader is gone: nobody wants the rest.
                break;
            }
        }
        // Both readers see the end.
        let _ = stdout_write.shutdown().await;
        let _ = stderr_write.shutdown().await;
    });
    Ok(AttachedProcess {
        input,
        output: Box::pin(stdout_read),
        errors: Box::pin(stderr_read),
    })
}
