//! The model price table: what a request costs when the upstream does not say so itself.
//!
//! Prices are dollars per million tokens, per model, for `input`, `output` and `cached_input`
//! tokens, and for the tokens written to Anthropic's prompt cache (`cache_write_5m`,
//! `cache_write_1h`). The meter counts input tokens *including* the ones served from or written to
//! the prompt cache, so a request's cached tokens are charged at `cached_input`, its cache writes at
//! their rate, and only the rest of its input tokens at `input` — never twice. The built-in table (`assets/prices.toml`) is embedded in the binary; a user's
//! file is parsed with [`PriceTable::from_toml`] and laid over it with [`PriceTable::merged_over`].

use std::collections::HashMap;

use serde::Deserialize;
use toml::Spanned;

use super::GatewayError;
use super::usage::TokenCounts;

/// What a five-minute cache write costs when a price file does not say: Anthropic's rate, 1.25
/// times the input price (no OpenAI reply reports cache writes).
const CACHE_WRITE_5M_FACTOR: f64 = 1.25;

/// What a one-hour cache write costs when a price file does not say: Anthropic's, twice the input.
const CACHE_WRITE_1H_FACTOR: f64 = 2.0;

/// The built-in table, embedded at build time.
const BUILTIN_PRICES: &str = include_str!("../../../../assets/prices.toml");

/// The name the built-in table's errors carry.
const BUILTIN_SOURCE: &str = "built-in prices (assets/prices.toml)";

/// One model's prices, in dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// Input tokens not served from the prompt cache.
    pub input: f64,
    /// Output tokens (including reasoning tokens, which the APIs count as output).
    pub output: f64,
    /// Input tokens served from the prompt cache.
    pub cached_input: f64,
    /// Input tokens written to a five-minute prompt cache (Anthropic).
    pub cache_write_5m: f64,
    /// Input tokens written to a one-hour prompt cache (Anthropic).
    pub cache_write_1h: f64,
}

impl ModelPrice {
    /// The cost of one request in dollars. `input` counts all input tokens, cached ones included (as
    /// the APIs report them); `cached` of them are charged at `cached_input`, the rest at `input`.
    pub fn cost(&self, input: u64, output: u64, cached: u64) -> f64 {
        let cached = cached.min(input);
        let uncached = input - cached;
        (uncached as f64 * self.input
            + cached as f64 * self.cached_input
            + output as f64 * self.output)
            / 1_000_000.0
    }

    /// The cost of one request's `counts` in dollars: cached tokens at `cached_input`, cache writes
    /// at their rates, the rest of the input at `input` (counts that add up to more than the input
    /// are held to it, reads first, then one-hour writes, then five-minute ones).
    pub fn cost_of(&self, counts: &TokenCounts) -> f64 {
        let cached = counts.cached.min(counts.input);
        let hour = counts.cache_write_1h.min(counts.input - cached);
        let five = counts.cache_write_5m.min(counts.input - cached - hour);
        let uncached = counts.input - cached - hour - five;
        (uncached as f64 * self.input
            + cached as f64 * self.cached_input
            + hour as f64 * self.cache_write_1h
            + five as f64 * self.cache_write_5m
            + counts.output as f64 * self.output)
            / 1_000_000.0
    }

    /// The most one input token can cost: at the input price or as a cache write, whichever is
    /// dearer (a request marks which of its input the provider caches).
    pub fn dearest_input(&self) -> f64 {
        self.input.max(self.cache_write_5m).max(self.cache_write_1h)
    }
}

/// Per-model prices, looked up by exact name and then with provider prefixes stripped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    models: HashMap<String, ModelPrice>,
}

impl PriceTable {
    /// The table shipped with stet (`assets/prices.toml`). A unit test proves it parses; were it ever
    /// broken, the gateway would log the error and meter from the upstream's cost header alone.
    pub fn builtin() -> PriceTable {
        match PriceTable::from_toml(BUILTIN_PRICES, BUILTIN_SOURCE) {
            Ok(table) => table,
            Err(err) => {
                tracing::error!("{err}");
                PriceTable::default()
            }
        }
    }

    /// Parses a price file: `[models."<name>"]` tables with `input`, `output` and optional
    /// `cached_input` (defaulting to `input`), `cache_write_5m` and `cache_write_1h` (defaulting to
    /// Anthropic's 1.25 and 2 times `input`), each a non-negative number of dollars per million tokens.
    /// Errors name `source_name` and the line and field at fault, and quote nothing of the file: it
    /// is a path configuration names, which could be any file of the user's.
    pub fn from_toml(text: &str, source_name: &str) -> Result<PriceTable, GatewayError> {
        let file: PriceFile = toml::from_str(text).map_err(|err| GatewayError::PriceSyntax {
            source_name: source_name.to_owned(),
            detail: stet_protocol::host_file::toml_problem(
                text,
                &err,
                "not a price table ([models.\"<name>\"] tables of input, output, cached_input, cache_write_5m and cache_write_1h, numbers of dollars per million tokens)",
            ),
        })?;
        let mut models = HashMap::new();
        for (model, entry) in file.models {
            let fail = |span: std::ops::Range<usize>, field, detail| GatewayError::PriceEntry {
                source_name: source_name.to_owned(),
                line: stet_protocol::host_file::line_and_column(text, span.start).0,
                field,
                detail,
            };
            let entry_span = entry.span();
            let entry = entry.into_inner();
            let number = |value: Option<Spanned<f64>>, field| match value {
                None => Ok(None),
                Some(value) if !value.get_ref().is_finite() || *value.get_ref() < 0.0 => Err(fail(
                    value.span(),
                    field,
                    "must be a finite, non-negative number of dollars per million tokens",
                )),
                Some(value) => Ok(Some(value.into_inner())),
            };
            let input = number(entry.input, "input")?
                .ok_or_else(|| fail(entry_span.clone(), "input", "is missing"))?;
            let output = number(entry.output, "output")?
                .ok_or_else(|| fail(entry_span.clone(), "output", "is missing"))?;
            let cached_input = number(entry.cached_input, "cached_input")?.unwrap_or(input);
            let cache_write_5m = number(entry.cache_write_5m, "cache_write_5m")?
                .unwrap_or(input * CACHE_WRITE_5M_FACTOR);
            let cache_write_1h = number(entry.cache_write_1h, "cache_write_1h")?
                .unwrap_or(input * CACHE_WRITE_1H_FACTOR);
            models.insert(
                model,
                ModelPrice {
                    input,
                    output,
                    cached_input,
                    cache_write_5m,
                    cache_write_1h,
                },
            );
        }
        Ok(PriceTable { models })
    }

    /// This table laid over `base`: a model this table names replaces `base`'s entry whole.
    pub fn merged_over(&self, base: &PriceTable) -> PriceTable {
        let mut models = base.models.clone();
        models.extend(
            self.models
                .iter()
                .map(|(name, price)| (name.clone(), *price)),
        );
        PriceTable { models }
    }

    /// The prices of `model`, by these rules in turn: the exact name; the name after each `/`
    /// (`openrouter/openai/gpt-4o` → `openai/gpt-4o` → `gpt-4o`); then each of those without a
    /// trailing snapshot date (`gpt-4o-2024-08-06`, `claude-3-5-haiku-20241022` and
    /// `claude-sonnet-4@20250514` are priced as `gpt-4o`, `claude-3-5-haiku`, `claude-sonnet-4`). A
    /// snapshot priced differently from its alias needs an entry of its own, which the exact name finds
    /// first.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        let names = || {
            std::iter::successors(Some(model), |name| {
                name.split_once('/').map(|(_, rest)| rest)
            })
        };
        names()
            .find_map(|name| self.models.get(name))
            .or_else(|| names().find_map(|name| self.models.get(without_snapshot_date(name)?)))
    }

    /// A request's cost in dollars, `None` when the model is not in the table. `input` includes the
    /// `cached` tokens, as the APIs report them (see [`ModelPrice::cost`]).
    pub fn cost(&self, model: &str, input: u64, output: u64, cached: u64) -> Option<f64> {
        self.price(model)
            .map(|price| price.cost(input, output, cached))
    }

    /// A request's cost in dollars from all its counts, `None` when the model is not in the table.
    pub fn cost_of(&self, model: &str, counts: &TokenCounts) -> Option<f64> {
        self.price(model).map(|price| price.cost_of(counts))
    }
}

/// `name` without a trailing snapshot date: `-YYYY-MM-DD`, `-YYYYMMDD`, or anything after an `@`
/// (Vertex AI's `model@version`); `None` when it has none.
fn without_snapshot_date(name: &str) -> Option<&str> {
    if let Some((alias, _)) = name.split_once('@') {
        return Some(alias).filter(|alias| !alias.is_empty());
    }
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let (head, last) = name.rsplit_once('-')?;
    if last.len() == 8 && digits(last) {
        return Some(head).filter(|head| !head.is_empty());
    }
    // `-YYYY-MM-DD`: the last three dash-separated parts are 4, 2 and 2 digits.
    let (head, month) = head.rsplit_once('-')?;
    let (alias, year) = head.rsplit_once('-')?;
    let dated = year.len() == 4 && month.len() == 2 && last.len() == 2;
    (dated && digits(year) && digits(month) && digits(last) && !alias.is_empty()).then_some(alias)
}

/// A price file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    #[serde(default)]
    models: HashMap<String, Spanned<PriceEntry>>,
}

/// One model's prices as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceEntry {
    input: Option<Spanned<f64>>,
    output: Option<Spanned<f64>>,
    cached_input: Option<Spanned<f64>>,
    cache_write_5m: Option<Spanned<f64>>,
    cache_write_1h: Option<Spanned<f64>>,
}

#[cfg(test)]
mod tests;
