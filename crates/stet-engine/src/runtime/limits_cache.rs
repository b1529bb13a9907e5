//! Remembers that an engine passed the launch-time limits probe, so that stet does not create,
//! read back and remove a probe container (259–467 ms on local Docker here) on every start.
//!
//! What is remembered is a digest of everything the probe's outcome depends on: the engine's
//! address, its identity and version, its cgroup driver and version, its kernel, what it says of
//! its own memory, swap, pids and cpu support and its security options (so rootless and rootful
//! differ), the image the probe ran, and the limits asked. Any change to one of them is another
//! digest, and the probe runs again. Only a pass is remembered: an engine that was refused is
//! probed on every start, so it is accepted as soon as it is fixed. A remembered pass is not
//! trusted blindly either: every sandbox's own create is still read back before it starts
//! ([`crate::runtime::docker`]), so an engine that stopped enforcing a limit without changing
//! any of the above is refused at its first sandbox instead of at launch.

use std::future::Future;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use crate::runtime::{DispatchLimits, ImageRef};

/// The file, in the state directory, holding the digests of the passes.
pub const CACHE_FILE: &str = "engine-limits.json";

/// How many passes are kept (the most recent): one per engine, image and limits a user runs with.
const KEPT: usize = 16;

/// Why a pass could not be remembered (it is then probed again next time; never fatal).
#[derive(Debug, thiserror::Error)]
#[expect(
    missing_docs,
    reason = "each variant's #[error] message is its documentation"
)]
pub enum LimitsCacheError {
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The remembered passes of one state directory.
#[derive(Debug, Clone)]
pub struct LimitsCache {
    path: PathBuf,
}

/// What the probe's outcome depends on, as the caller gathered it from the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeKey {
    /// The engine's identity, version, cgroup and support facts, and address, in one text
    /// ([`crate::runtime::docker::DockerRuntime::fingerprint`]).
    pub engine: String,
    /// The image the probe container is made of.
    pub image: String,
    /// The limits asked.
    pub limits: DispatchLimits,
}

impl ProbeKey {
    /// The digest stored for it.
    fn digest(&self) -> String {
        let limits = &self.limits;
        let text = format!(
            "engine {}\nimage {}\nmemory {} pids {} nano_cpus {} tmpfs {} file_bytes {}\n",
            self.engine,
            self.image,
            limits.memory_bytes,
            limits.pids,
            limits.nano_cpus,
            limits.tmpfs_bytes,
            limits.file_bytes
        );
        sha2::Sha256::digest(text.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

impl LimitsCache {
    /// The cache of `state_dir`.
    pub fn in_state_dir(state_dir: &Path) -> LimitsCache {
        LimitsCache {
            path: state_dir.join(CACHE_FILE),
        }
    }

    /// The digests remembered; none when the file is missing or unreadable (then the probe runs).
    fn passes(&self) -> Vec<String> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Vec<String>>(&bytes).ok())
            .unwrap_or_default()
    }

    /// Whether `key` passed before.
    pub fn passed(&self, key: &ProbeKey) -> bool {
        self.passes().contains(&key.digest())
    }

    /// Remembers that `key` passed, keeping the [`KEPT`] most recent passes; written (mode 0600)
    /// to a temporary file first and renamed, so a reader never sees half of it.
    pub fn remember(&self, key: &ProbeKey) -> Result<(), LimitsCacheError> {
        let digest = key.digest();
        let mut passes = self.passes();
        passes.retain(|kept| *kept != digest);
        passes.push(digest);
        let skip = passes.len().saturating_sub(KEPT);
        let passes: Vec<&String> = passes.iter().skip(skip).collect();
        let write = |path: &Path| -> std::io::Result<()> {
            // This process's own: two stets starting at once never write one file together.
            let temporary = path.with_extension(format!("json.{}.tmp", std::process::id()));
            crate::private_files::write(&temporary, &serde_json::to_vec(&passes)?)?;
            std::fs::rename(&temporary, path)
        };
        write(&self.path).map_err(|source| LimitsCacheError::Write {
            path: self.path.clone(),
            source,
        })
    }
}

/// Runs `probe` unless `key` (none: the engine could not say who it is) passed before, and
/// remembers a pass. Whether the probe ran is returned with its outcome.
pub async fn probe_unless_remembered<E>(
    cache: &LimitsCache,
    key: Option<ProbeKey>,
    probe: impl Future<Output = Result<(), E>>,
) -> (bool, Result<(), E>) {
    if key.as_ref().is_some_and(|key| cache.passed(key)) {
        return (false, Ok(()));
    }
    let outcome = probe.await;
    if let (Ok(()), Some(key)) = (&outcome, &key) {
        // Not remembered: probed again next time, which is only slower.
        let _ = cache.remember(key);
    }
    (true, outcome)
}

/// The key of a probe of `image` with `limits` on the engine `fingerprint` describes.
pub fn key(
    fingerprint: Option<String>,
    image: &ImageRef,
    limits: &DispatchLimits,
) -> Option<ProbeKey> {
    fingerprint.map(|engine| ProbeKey {
        engine,
        image: image.as_str().to_owned(),
        limits: *limits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(engine: &str, memory: i64) -> ProbeKey {
        ProbeKey {
            engine: engine.to_owned(),
            image: "sha256:0".to_owned(),
            limits: DispatchLimits {
                memory_bytes: memory,
                ..DispatchLimits::default()
            },
        }
    }

    #[tokio::test]
    async fn a_pass_is_remembered_per_engine_and_limits_and_a_refusal_never() {
        let state = tempfile::tempdir().unwrap();
        let cache = LimitsCache::in_state_dir(state.path());
        let docker = key_of("docker 20.10.24 id A cgroup 1", 1 << 30);
        let (ran, outcome) =
            probe_unless_remembered(&cache, Some(docker.clone()), async { Ok::<(), ()>(()) }).await;
        assert!(ran && outcome.is_ok());
        // The same engine, image and limits: no probe, a pass.
        let (ran, outcome) = probe_unless_remembered(&cache, Some(docker.clone()), async {
            panic!("probed again")
        })
        .await;
        assert!(!ran);
        assert_eq!(outcome, Ok::<(), ()>(()));
        // Another version of the engine, or other limits: probed again.
        for other in [
            key_of("docker 24.0.0 id A cgroup 1", 1 << 30),
            key_of("docker 20.10.24 id A cgroup 1", 1 << 29),
        ] {
            let (ran, _) =
                probe_unless_remembered(&cache, Some(other), async { Err::<(), _>("refused") })
                    .await;
            assert!(ran);
        }
        // A refusal is not remembered: the refused key is probed every time.
        let refused = key_of("podman rootless cgroup 1", 1 << 30);
        for _ in 0..2 {
            let (ran, outcome) =
                probe_unless_remembered(&cache, Some(refused.clone()), async { Err("dropped") })
                    .await;
            assert!(ran);
            assert_eq!(outcome, Err("dropped"));
        }
        // An engine that cannot say who it is is always probed.
        let (ran, _) = probe_unless_remembered(&cache, None, async { Ok::<(), ()>(()) }).await;
        assert!(ran);
        let (ran, _) = probe_unless_remembered(&cache, None, async { Ok::<(), ()>(()) }).await;
        assert!(ran);
    }

    #[test]
    fn an_unreadable_cache_remembers_nothing_and_only_the_latest_passes_are_kept() {
        let state = tempfile::tempdir().unwrap();
        let cache = LimitsCache::in_state_dir(state.path());
        std::fs::write(state.path().join(CACHE_FILE), "not json").unwrap();
        assert!(!cache.passed(&key_of("e", 1)));
        for memory in 0..(KEPT as i64 + 4) {
            cache.remember(&key_of("e", memory)).unwrap();
        }
        assert!(!cache.passed(&key_of("e", 0)), "the oldest went");
        assert!(cache.passed(&key_of("e", KEPT as i64 + 3)));
        assert!(cache.passed(&key_of("e", 4)));
        let kept: Vec<String> =
            serde_json::from_slice(&std::fs::read(state.path().join(CACHE_FILE)).unwrap()).unwrap();
        assert_eq!(kept.len(), KEPT);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(state.path().join(CACHE_FILE))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }
}
