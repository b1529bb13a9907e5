//! `stet speak`: the one process that speaks as the agent (DESIGN §5 row 21). The engine runs every
//! harness program under it, whatever the harness, so the rule is kept in one place:
//!
//! * it is made non-dumpable before it does anything else ([`keep_voice_private`]), so no process of
//!   the sandbox's user (the agent's own commands, a repository's programs) can open its stdout
//!   through `/proc/<pid>/fd`, read its environment or attach to it: the sandbox drops every
//!   capability, so only the kernel's owner check would let them in, and a non-dumpable process is
//!   root's there;
//! * the harness program gets channels of this process's own as its stdout and stderr, never the
//!   engine's stream inherited: unix stream sockets read with `SO_PASSCRED`, so the kernel tags
//!   every write with the process that made it (a process without `CAP_SYS_ADMIN` cannot claim
//!   another's id) and writes of two processes are never read as one. Only what the harness program
//!   itself wrote is relayed, as it comes; what another process holding its output wrote (a child
//!   that inherited it, a daemon) is passed over, whenever it was written;
//! * once the harness program has exited, what its channels already hold is relayed and nothing
//!   after: a process that kept them open writes into channels nobody reads, and never after the
//!   harness's own last words, even with this process stopped (SIGSTOP) while it wrote. That another
//!   process held them open, or wrote there, is reported as one [`SpeakerReport`] line on stderr,
//!   the last one, on a line of its own.
//!
//! The harness program should still be non-dumpable itself and capture its children's output: what
//! they write on its channels is passed over, not heard, and a child that reached them through
//! `/proc/<pid>/fd` could still close or fill them. `stet agent run`, the scripted agent, does both;
//! the OpenHands CLI is started through a Python line that makes it non-dumpable.

use std::ffi::OsString;
use std::io::{IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, Stdio};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, Shutdown, SocketFlags,
    SocketType,
};
use rustix::process::{DumpableBehavior, Pid, PidfdFlags};
use stet_protocol::agent_record::{HarnessStream, SpeakerReport};

/// How much is relayed at a time.
const RELAY_CHUNK: usize = 64 * 1024;

/// Why `stet speak` could not run its harness program through.
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum SpeakerError {
    #[error("speak: making this process non-dumpable (prctl PR_SET_DUMPABLE): {0}")]
    Dumpable(#[source] std::io::Error),
    #[error("speak: no harness program to run")]
    NoProgram,
    #[error("speak: making the harness program's output channels: {0}")]
    Channel(#[source] std::io::Error),
    #[error("speak: cannot start {program:?}: {source}")]
    Start {
        program: OsString,
        source: std::io::Error,
    },
    #[error("speak: watching {program:?}: {source}")]
    Watch {
        program: OsString,
        source: std::io::Error,
    },
    #[error("speak: relaying the {stream} of {program:?}: {source}")]
    Relay {
        program: OsString,
        stream: &'static str,
        source: std::io::Error,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, SpeakerError>;

/// Makes this process non-dumpable: its `/proc/<pid>` entries become root's, so a process of the
/// same user can neither open its file descriptors nor read its memory or environment, nor trace it.
/// It lasts until the process runs another program (`execve` makes the new one dumpable again).
pub fn keep_voice_private() -> Result<()> {
    rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable)
        .map_err(|errno| SpeakerError::Dumpable(errno.into()))
}

/// A channel for one of the harness program's output streams: this process's end, which reads with
/// the writer's credentials and writes nothing, and the end the program gets.
fn voice_channel() -> Result<(OwnedFd, OwnedFd)> {
    let channel = || -> rustix::io::Result<(OwnedFd, OwnedFd)> {
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::net::sockopt::set_socket_passcred(&ours, true)?;
        rustix::net::shutdown(&ours, Shutdown::Write)?;
        Ok((ours, theirs))
    };
    channel().map_err(|errno| SpeakerError::Channel(errno.into()))
}

/// One of the harness program's output channels and where it is relayed.
struct Relay<'a> {
    stream: HarnessStream,
    /// `None` once it reached its end.
    pipe: Option<OwnedFd>,
    to: &'a mut dyn Write,
    /// The harness program: only what it wrote itself is relayed.
    harness: Pid,
    /// Another process wrote there (and it was passed over).
    others_wrote: bool,
    /// What was relayed so far ends a line (or nothing was).
    at_line_start: bool,
}

impl Relay<'_> {
    fn name(&self) -> &'static str {
        match self.stream {
            HarnessStream::Stdout => "stdout",
            HarnessStream::Stderr => "stderr",
        }
    }

    /// Reads once (at most `buffer`'s length, never the writes of two processes at once) and relays
    /// what came when the harness program wrote it; returns how many bytes were read. The end of the
    /// channel closes it; `Err(AGAIN)` passes through.
    fn relay_once(&mut self, buffer: &mut [u8]) -> std::result::Result<usize, RelayFailure> {
        let Some(pipe) = &self.pipe else {
            return Ok(0);
        };
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            pipe,
            &mut [IoSliceMut::new(&mut *buffer)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        );
        let writer = control.drain().find_map(|message| match message {
            RecvAncillaryMessage::ScmCredentials(credentials) => Some(credentials.pid),
            _ => None,
        });
        match received.map(|received| received.bytes) {
            Ok(0) => {
                self.pipe = None;
                Ok(0)
            }
            Ok(read) if writer != Some(self.harness) => {
                self.others_wrote = true;
                Ok(read)
            }
            Ok(read) => {
                self.at_line_start = buffer[read - 1] == b'\n';
                let written = self
                    .to
                    .write_all(&buffer[..read])
                    .and_then(|()| self.to.flush());
                written.map(|()| read).map_err(RelayFailure::Write)
            }
            Err(Errno::INTR) => Ok(0),
            Err(errno) => Err(RelayFailure::Read(errno)),
        }
    }

    /// Relays what the channel holds now from the harness program, when it has exited (all it
    /// wrote, since a write is done once it returns, and queued before anything written later),
    /// then looks once more without waiting: returns whether some other process still holds the
    /// channel open (no end reached). What others wrote is never relayed, whenever they wrote it.
    fn drain(&mut self, buffer: &mut [u8]) -> std::result::Result<bool, RelayFailure> {
        let Some(pipe) = &self.pipe else {
            return Ok(false);
        };
        rustix::io::ioctl_fionbio(pipe, true).map_err(RelayFailure::Read)?;
        let held = rustix::io::ioctl_fionread(pipe).map_err(RelayFailure::Read)?;
        let mut left = usize::try_from(held).unwrap_or(usize::MAX);
        while left > 0 {
            let want = left.min(buffer.len());
            match self.relay_once(&mut buffer[..want]) {
                Ok(_) if self.pipe.is_none() => return Ok(false),
                Ok(read) => left = left.saturating_sub(read),
                Err(RelayFailure::Read(Errno::AGAIN)) => break,
                Err(failure) => return Err(failure),
            }
        }
        let Some(pipe) = &self.pipe else {
            return Ok(false);
        };
        let last_look = loop {
            match rustix::io::read(pipe, &mut buffer[..1]) {
                Err(Errno::INTR) => continue,
                looked => break looked,
            }
        };
        match last_look {
            Ok(0) => Ok(false),
            Ok(_) | Err(Errno::AGAIN) => Ok(true),
            Err(errno) => Err(RelayFailure::Read(errno)),
        }
    }
}

/// Why relaying stopped.
enum RelayFailure {
    Read(Errno),
    Write(std::io::Error),
}

impl RelayFailure {
    fn about(self, program: &OsString, relay: &Relay<'_>) -> SpeakerError {
        SpeakerError::Relay {
            program: program.clone(),
            stream: relay.name(),
            source: match self {
                RelayFailure::Read(errno) => errno.into(),
                RelayFailure::Write(error) => error,
            },
        }
    }
}

/// Runs `argv` (program first) with channels as its stdout and stderr and no stdin, relaying them to
/// `stdout` and `stderr` until it exits, then what they already hold and nothing more (see the module
/// documentation). Returns the program's exit code, or 128 + the signal that ended it.
pub fn speak(argv: &[OsString], stdout: &mut dyn Write, stderr: &mut dyn Write) -> Result<u8> {
    let (program, args) = argv.split_first().ok_or(SpeakerError::NoProgram)?;
    let (stdout_channel, stdout_end) = voice_channel()?;
    let (stderr_channel, stderr_end) = voice_channel()?;
    // The command, holding the program's ends, is dropped with this statement: only the program
    // (and what it hands them to) holds them then.
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout_end))
        .stderr(Stdio::from(stderr_end))
        .spawn()
        .map_err(|source| SpeakerError::Start {
            program: program.clone(),
            source,
        })?;
    let channels = [stdout_channel, stderr_channel];
    let report = match relay(&mut child, channels, program, stdout, stderr) {
        Ok(report) => report,
        Err(error) => {
            // Nobody hears it any more: it is not left running on its own.
            let _ = child.kill();
            let _ = child.wait();
            return Err(error);
        }
    };
    let status = child.wait().map_err(|source| SpeakerError::Watch {
        program: program.clone(),
        source,
    })?;
    if let Some((report, at_line_start)) = report
        && let Ok(line) = report.to_line()
    {
        // On a line of its own, whatever the program's last stderr line was.
        let _ = match at_line_start {
            true => writeln!(stderr, "{line}"),
            false => writeln!(stderr, "\n{line}"),
        };
        let _ = stderr.flush();
    }
    Ok(exit_code(status))
}

/// Relays what the child writes on its stdout and stderr `channels` until it exits (seen through a
/// pidfd, so the moment does not depend on the channels closing), then drains them; returns the
/// report to make (streams still held open after that, streams other processes wrote on) when there
/// is one, and whether the relayed stderr ends a line. The child is left to be reaped.
fn relay(
    child: &mut Child,
    channels: [OwnedFd; 2],
    program: &OsString,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<Option<(SpeakerReport, bool)>> {
    let watch_error = |errno: Errno| SpeakerError::Watch {
        program: program.clone(),
        source: errno.into(),
    };
    let harness = Pid::from_child(child);
    let exited = rustix::process::pidfd_open(harness, PidfdFlags::empty()).map_err(watch_error)?;
    let [stdout_channel, stderr_channel] = channels;
    let relay_to = |stream, pipe, to| Relay {
        stream,
        pipe: Some(pipe),
        to,
        harness,
        others_wrote: false,
        at_line_start: true,
    };
    let mut relays = [
        relay_to(HarnessStream::Stdout, stdout_channel, stdout),
        relay_to(HarnessStream::Stderr, stderr_channel, stderr),
    ];
    let mut buffer = vec![0u8; RELAY_CHUNK];
    loop {
        let ready = wait_for(exited.as_fd(), &relays).map_err(watch_error)?;
        for (relay, readable) in relays.iter_mut().zip(ready.pipes) {
            if !readable {
                continue;
            }
            match relay.relay_once(&mut buffer) {
                Ok(_) | Err(RelayFailure::Read(Errno::AGAIN)) => {}
                Err(failure) => return Err(failure.about(program, relay)),
            }
        }
        if ready.exited {
            break;
        }
    }
    let mut held_open = Vec::new();
    for relay in &mut relays {
        match relay.drain(&mut buffer) {
            Ok(true) => held_open.push(relay.stream),
            Ok(false) => {}
            Err(failure) => return Err(failure.about(program, relay)),
        }
    }
    let written_by_others: Vec<HarnessStream> = relays
        .iter()
        .filter(|relay| relay.others_wrote)
        .map(|relay| relay.stream)
        .collect();
    if held_open.is_empty() && written_by_others.is_empty() {
        return Ok(None);
    }
    let report = SpeakerReport {
        held_open_after_exit: held_open,
        written_by_others,
    };
    Ok(Some((report, relays[1].at_line_start)))
}

/// What [`wait_for`] found ready.
struct Ready {
    exited: bool,
    /// Per relay: its pipe has something to read (or reached its end).
    pipes: [bool; 2],
}

/// Waits until the child has exited or one of the open pipes can be read.
fn wait_for(
    exited: std::os::fd::BorrowedFd<'_>,
    relays: &[Relay<'_>; 2],
) -> rustix::io::Result<Ready> {
    let readable = PollFlags::IN;
    let mut fds = vec![PollFd::new(&exited, readable)];
    let mut polled = [None, None];
    for (index, relay) in relays.iter().enumerate() {
        if let Some(pipe) = &relay.pipe {
            polled[index] = Some(fds.len());
            fds.push(PollFd::new(pipe, readable));
        }
    }
    loop {
        match rustix::event::poll(&mut fds, None) {
            Ok(_) => break,
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(errno),
        }
    }
    let woke = |at: usize| !fds[at].revents().is_empty();
    Ok(Ready {
        exited: woke(0),
        pipes: polled.map(|at| at.is_some_and(woke)),
    })
}

/// The exit code a shell would report: the program's own, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(u8::MAX),
        (None, None) => u8::MAX,
    }
}

#[cfg(test)]
mod tests;
