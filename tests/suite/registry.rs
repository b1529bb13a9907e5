//! Pull by digest from a real registry: Debian's `docker-registry` on a loopback port, the image
//! pushed to it, removed locally, and pulled back through `ensure_image` with progress events.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use bollard::query_parameters::{
    PushImageOptionsBuilder, RemoveImageOptionsBuilder, TagImageOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use stet_engine::runtime::docker::DockerRuntime;
use stet_engine::runtime::{ContainerRuntime, ImageRef, RuntimeError};

/// A registry process, stopped when dropped.
struct Registry {
    child: Child,
    address: String,
    _storage: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_registry() -> Registry {
    let storage = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let config = storage.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n",
            storage.path().join("data").display()
        ),
    )
    .unwrap();
    let mut child = Command::new("docker-registry")
        .args(["serve", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("docker-registry is needed (apt-get install docker-registry): {e}")
        });
    // Ready once it logs that it listens.
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = stderr
            .next()
            .expect("docker-registry exited before listening")
            .unwrap();
        if line.contains("listening on") {
            break;
        }
    }
    std::thread::spawn(move || stderr.for_each(drop));
    Registry {
        child,
        address,
        _storage: storage,
    }
}

#[tokio::test]
async fn an_image_is_pulled_by_digest_with_progress_and_a_tag_is_refused() {
    let registry = start_registry();
    let runtime = DockerRuntime::connect()
        .await
        .unwrap_or_else(|e| panic!("these tests need Docker: {e}"));
    let docker = runtime.client();
    // An image of its own (built from `true`), so removing it cannot disturb other tests.
    let image = stet_engine::runtime::docker::offline_image::build_local(
        docker,
        Path::new("/usr/bin/true"),
    )
    .await
    .unwrap();
    let repository = format!("{}/stet-sandbox-pull-test", registry.address);
    let tag = uuid::Uuid::new_v4().simple().to_string();
    docker
        .tag_image(
            &image.id,
            Some(
                TagImageOptionsBuilder::default()
                    .repo(&repository)
                    .tag(&tag)
                    .build(),
            ),
        )
        .await
        .unwrap();
    let mut pushed = docker.push_image(
        &repository,
        Some(PushImageOptionsBuilder::default().tag(&tag).build()),
        None,
    );
    while let Some(step) = pushed.next().await {
        step.unwrap();
    }
    let digest_ref = docker
        .inspect_image(&image.id)
        .await
        .unwrap()
        .repo_digests
        .unwrap_or_default()
        .into_iter()
        .find(|d| d.starts_with(&repository))
        .expect("the push recorded a repository digest");
    let remove = RemoveImageOptionsBuilder::default().force(true).build();
    docker
        .remove_image(&image.id, Some(remove.clone()), None)
        .await
        .unwrap();
    assert!(
        docker.inspect_image(&digest_ref).await.is_err(),
        "removed locally"
    );

    let pinned = ImageRef::parse(&digest_ref, false).unwrap();
    let (sender, mut receiver) = mpsc::channel(256);
    runtime.ensure_image(&pinned, Some(sender)).await.unwrap();
    let mut progress = Vec::new();
    while let Ok(update) = receiver.try_recv() {
        progress.push(update);
    }
    let pulled = docker.inspect_image(&digest_ref).await;
    let tagged = ImageRef::parse(&format!("{repository}:{tag}"), false);
    let missing =
        ImageRef::parse(&format!("{repository}@sha256:{}", "0".repeat(64)), false).unwrap();
    let missing_error = runtime.ensure_image(&missing, None).await.unwrap_err();
    let _ = docker.remove_image(&digest_ref, Some(remove), None).await;

    assert_eq!(
        pulled.unwrap().id.as_deref(),
        Some(image.id.as_str()),
        "the same image came back"
    );
    assert!(!progress.is_empty(), "pull progress was reported");
    assert!(progress.iter().any(|p| p.layer.is_some()), "{progress:?}");
    assert!(matches!(tagged, Err(RuntimeError::UnpinnedImage(_))));
    assert!(
        matches!(missing_error, RuntimeError::ImageNotFound { .. }),
        "{missing_error}"
    );
}
