//! The one integration-test binary: every suite module runs from here so the crate links once.

mod suite;
