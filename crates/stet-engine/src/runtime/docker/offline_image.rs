//! The offline sandbox image made present in the Docker engine: found by the label of its binary's
//! hash (and re-tagged if its tag was removed), or loaded as the `docker save` archive that
//! `crate::image` writes (`POST /images/load`). The image's content is `crate::image`'s; only this
//! file speaks the engine's API about it.

use std::collections::HashMap;
use std::path::Path;

use bollard::Docker;
use bollard::query_parameters::{
    ImportImageOptionsBuilder, ListImagesOptionsBuilder, TagImageOptionsBuilder,
};
use bytes::Bytes;
use futures_util::StreamExt;

use crate::image::{BINARY_SHA256_LABEL, ImageError, REPOSITORY, Result, SandboxImage, tag_for};

/// The engine's name in what an image error says.
const ENGINE: &str = "Docker";

/// What the engine said when `action` on `image` failed.
fn engine_error(action: &'static str, image: &str, source: bollard::errors::Error) -> ImageError {
    ImageError::Engine {
        engine: ENGINE,
        action,
        image: image.to_owned(),
        source: Box::new(source),
    }
}

/// Makes sure the sandbox image of `binary` is in the engine and returns it. Reuses an image labelled
/// with the binary's hash (re-tagging it if the tag was removed); loads a new one only if there is none.
pub async fn build_local(docker: &Docker, binary: &Path) -> Result<SandboxImage> {
    let (contents, binary_sha256) = crate::image::read_binary(binary).await?;
    let engine_arch = docker
        .version()
        .await
        .map_err(|source| engine_error("asking the platform of the engine for", "", source))?
        .arch
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    crate::image::check_executable(binary, &contents, &engine_arch)?;
    let tag = tag_for(&binary_sha256);
    if let Some(id) = find_labelled(docker, &binary_sha256, &tag).await? {
        return Ok(SandboxImage {
            id,
            tag,
            binary_sha256,
        });
    }
    let archive = crate::image::archive(binary, contents, &binary_sha256, &tag).await?;
    load(docker, archive, &tag).await?;
    let inspected = docker
        .inspect_image(&tag)
        .await
        .map_err(|source| engine_error("inspecting the loaded image", &tag, source))?;
    let id = inspected.id.ok_or_else(|| ImageError::NoImageId {
        engine: ENGINE,
        tag: tag.clone(),
    })?;
    Ok(SandboxImage {
        id,
        tag,
        binary_sha256,
    })
}

/// Finds an image labelled with this binary hash; makes sure it carries `tag`.
async fn find_labelled(docker: &Docker, binary_sha256: &str, tag: &str) -> Result<Option<String>> {
    let filters = HashMap::from([(
        "label",
        vec![format!("{BINARY_SHA256_LABEL}={binary_sha256}")],
    )]);
    let images = docker
        .list_images(Some(
            ListImagesOptionsBuilder::default()
                .filters(&filters)
                .build(),
        ))
        .await
        .map_err(|source| engine_error("listing images labelled for", tag, source))?;
    let tagged = images
        .iter()
        .find(|image| image.repo_tags.iter().any(|t| t == tag));
    if let Some(image) = tagged {
        return Ok(Some(image.id.clone()));
    }
    let Some(image) = images.iter().min_by(|a, b| a.id.cmp(&b.id)) else {
        return Ok(None);
    };
    let short = tag.strip_prefix(&format!("{REPOSITORY}:")).unwrap_or(tag);
    docker
        .tag_image(
            &image.id,
            Some(
                TagImageOptionsBuilder::default()
                    .repo(REPOSITORY)
                    .tag(short)
                    .build(),
            ),
        )
        .await
        .map_err(|source| engine_error("re-tagging the existing image as", tag, source))?;
    Ok(Some(image.id.clone()))
}

async fn load(docker: &Docker, archive: Vec<u8>, tag: &str) -> Result<()> {
    let mut progress = docker.import_image(
        ImportImageOptionsBuilder::default().quiet(true).build(),
        bollard::body_full(Bytes::from(archive)),
        None,
    );
    while let Some(item) = progress.next().await {
        item.map_err(|source| engine_error("loading", tag, source))?;
    }
    Ok(())
}
