//! The scripted model's replies are numbered per conversation: a request naming its end user
//! counts among that user's requests, so each run of the scripted agent starts again at "step 1"
//! however many runs share one server; requests naming nobody share one count.

use std::collections::HashMap;

use serde_json::Value;

/// How many named conversations are numbered apart; the requests of any further one are numbered
/// with those naming nobody, so a flood of names cannot grow the server without bound.
pub(crate) const MAX_CONVERSATIONS: usize = 1024;

/// The longest end-user name kept as a conversation's key; a longer one names nobody.
pub(crate) const MAX_USER_BYTES: usize = 256;

/// How many requests each conversation has made.
#[derive(Debug, Default)]
pub(crate) struct Asked {
    /// Requests that name no end user (or one past [`MAX_CONVERSATIONS`]).
    unnamed: u64,
    /// Requests per end user named.
    pub(crate) named: HashMap<String, u64>,
}

impl Asked {
    /// Counts one more request of `user`'s conversation and returns its number, from 1.
    pub(crate) fn next(&mut self, user: Option<&str>) -> u64 {
        let count = match user {
            Some(user) if self.named.contains_key(user) => self.named.get_mut(user),
            Some(user) if self.named.len() < MAX_CONVERSATIONS => {
                Some(self.named.entry(user.to_owned()).or_default())
            }
            _ => None,
        }
        .unwrap_or(&mut self.unnamed);
        *count += 1;
        *count
    }
}

/// The end user a request names: `user` (Chat Completions, Responses) or `metadata.user_id`
/// (Messages), when it is a string of at most [`MAX_USER_BYTES`].
pub(crate) fn end_user(body: &Value) -> Option<&str> {
    body.get("user")
        .or_else(|| {
            body.get("metadata")
                .and_then(|metadata| metadata.get("user_id"))
        })
        .and_then(Value::as_str)
        .filter(|user| user.len() <= MAX_USER_BYTES)
}
