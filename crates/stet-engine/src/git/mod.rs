//! Git on the host, through git2 (and git's own `cat-file` and `pack-objects`, which stream what libgit2
//! reads whole, for a workspace's base) (ADR-0018 rows 3 and 5, DESIGN §5 row 10): the agent's
//! disposable workspace is materialized from the user's repository, its result is imported back by
//! walking files (the workspace is never opened as a repository), and the host pushes the commit.

pub mod changes;
pub mod import;
mod isolated;
pub mod origin_guard;
mod pack;
pub mod push;
pub mod text_budget;
pub mod workspace;
