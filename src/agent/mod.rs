//! `stet agent`: the scripted agent that runs inside the sandbox for `stet demo` and the engine tests.
