//! The `script` harness: runs `stet agent`, the scripted agent of `stet demo` and of the engine tests.
