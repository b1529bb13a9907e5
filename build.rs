//! Tells `stet --version` the commit it is built from and the build's profile ([`build_info`]).

#[path = "src/build_info.rs"]
mod build_info;

use std::path::Path;

fn main() {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
    let root = Path::new(&root);
    let commit = build_info::commit(root, std::env::var(build_info::COMMIT_VARIABLE).ok());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=STET_COMMIT={commit}");
    println!("cargo:rustc-env=STET_PROFILE={profile}");
    println!("cargo:rerun-if-env-changed={}", build_info::COMMIT_VARIABLE);
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/build_info.rs");
    // A new commit moves the branch's ref (or, packed, packed-refs); a checkout moves HEAD.
    let git = root.join(".git");
    if git.is_dir() {
        println!("cargo:rerun-if-changed=.git/HEAD");
        println!("cargo:rerun-if-changed=.git/packed-refs");
        if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
            && let Some(reference) = head.trim().strip_prefix("ref: ")
        {
            println!("cargo:rerun-if-changed=.git/{reference}");
        }
    }
}
