//! `stet demo`: the scratch repository, briefs and forge the demo dispatches against.
