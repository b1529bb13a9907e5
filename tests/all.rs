//! The one integration-test binary: every suite module runs from here so the crate links once.

// All of this crate is test code, helpers included (clippy.toml's allow-unwrap-in-tests covers only
// test functions and `#[cfg(test)]` modules): a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
