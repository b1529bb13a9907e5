//! The model price table: what a request costs when the upstream does not say so itself.
//!
//! Prices are dollars per million tokens, per model, for `input`, `output` and `cached_input`
//! tokens. The APIs report input tokens *including* the ones served from the prompt cache, so a
//! request's cached tokens are charged at `cached_input` and only the rest of its input tokens at
//! `input` — never both. The built-in table (`assets/prices.toml`) is embedded in the binary; a user's
//! file is parsed with [`PriceTable::from_toml`] and laid over it with [`PriceTable::merged_over`].

use std::collections::HashMap;

use super::GatewayError;

/// The built-in table, embedded at build time.
const BUILTIN_PRICES: &str = include_str!("../../assets/prices.toml");

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
    /// `cached_input` (defaulting to `input`), each a non-negative number of dollars per million tokens.
    /// Errors name `source_name`, and the model and field at fault.
    pub fn from_toml(text: &str, source_name: &str) -> Result<PriceTable, GatewayError> {
        let syntax = |detail: String| GatewayError::PriceSyntax {
            source_name: source_name.to_owned(),
            detail,
        };
        let root: toml::Table =
            toml::from_str(text).map_err(|err| syntax(err.message().to_owned()))?;
        let mut models = HashMap::new();
        for (key, value) in &root {
            if key != "models" {
                return Err(syntax(format!(
                    "unknown top-level key {key:?} (expected [models.\"<name>\"])"
                )));
            }
            let Some(table) = value.as_table() else {
                return Err(syntax(
                    "`models` must be a table of [models.\"<name>\"] tables".to_owned(),
                ));
            };
            for (model, entry) in table {
                let price = parse_entry(model, entry, source_name)?;
                models.insert(model.clone(), price);
            }
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

    /// The prices of `model`: the exact name first, then the name after each `/` in turn
    /// (`openrouter/openai/gpt-4o` → `openai/gpt-4o` → `gpt-4o`).
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        let mut name = model;
        loop {
            if let Some(price) = self.models.get(name) {
                return Some(price);
            }
            let (_, rest) = name.split_once('/')?;
            name = rest;
        }
    }

    /// A request's cost in dollars, `None` when the model is not in the table. `input` includes the
    /// `cached` tokens, as the APIs report them (see [`ModelPrice::cost`]).
    pub fn cost(&self, model: &str, input: u64, output: u64, cached: u64) -> Option<f64> {
        self.price(model)
            .map(|price| price.cost(input, output, cached))
    }
}

fn parse_entry(
    model: &str,
    entry: &toml::Value,
    source_name: &str,
) -> Result<ModelPrice, GatewayError> {
    let fail = |field: &str, detail: String| GatewayError::PriceEntry {
        source_name: source_name.to_owned(),
        model: model.to_owned(),
        field: field.to_owned(),
        detail,
    };
    let Some(table) = entry.as_table() else {
        return Err(fail(
            "(entry)",
            "must be a table with input, output and cached_input".to_owned(),
        ));
    };
    if let Some(unknown) = table
        .keys()
        .find(|key| !matches!(key.as_str(), "input" | "output" | "cached_input"))
    {
        return Err(fail(
            unknown,
            "unknown field (expected input, output, cached_input)".to_owned(),
        ));
    }
    let number = |field: &str| -> Result<Option<f64>, GatewayError> {
        let Some(value) = table.get(field) else {
            return Ok(None);
        };
        let dollars = match value {
            toml::Value::Float(f) => *f,
            toml::Value::Integer(i) => *i as f64,
            other => {
                return Err(fail(
                    field,
                    format!(
                        "must be a number of dollars per million tokens, not a {}",
                        other.type_str()
                    ),
                ));
            }
        };
        if !dollars.is_finite() || dollars < 0.0 {
            return Err(fail(
                field,
                format!("must be a finite, non-negative number, not {dollars}"),
            ));
        }
        Ok(Some(dollars))
    };
    let input = number("input")?.ok_or_else(|| fail("input", "missing".to_owned()))?;
    let output = number("output")?.ok_or_else(|| fail("output", "missing".to_owned()))?;
    let cached_input = number("cached_input")?.unwrap_or(input);
    Ok(ModelPrice {
        input,
        output,
        cached_input,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn approx(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn builtin_table_parses_and_prices_the_demo_model() {
        PriceTable::from_toml(BUILTIN_PRICES, BUILTIN_SOURCE).unwrap();
        let table = PriceTable::builtin();
        assert_eq!(
            table.price("stet-demo-model"),
            Some(&ModelPrice {
                input: 3.0,
                output: 15.0,
                cached_input: 0.30
            })
        );
        for model in [
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4.1",
            "gpt-4.1-mini",
            "o4-mini",
            "claude-sonnet-4",
            "claude-3-5-haiku",
        ] {
            assert!(
                table.price(model).is_some(),
                "{model} missing from the built-in table"
            );
        }
    }

    #[test]
    fn cached_tokens_are_charged_once_at_the_cached_price() {
        let table = PriceTable::builtin();
        // 1000 input of which 400 cached, 100 output at 3 / 0.30 / 15 per million.
        let cost = table.cost("stet-demo-model", 1000, 100, 400).unwrap();
        assert!(
            approx(cost, (600.0 * 3.0 + 400.0 * 0.30 + 100.0 * 15.0) / 1e6),
            "{cost}"
        );
        // More cached than input (a confused upstream) never goes negative.
        let cost = table.cost("stet-demo-model", 10, 0, 50).unwrap();
        assert!(approx(cost, 10.0 * 0.30 / 1e6), "{cost}");
    }

    #[test]
    fn provider_prefixes_are_stripped_after_an_exact_miss() {
        let table = PriceTable::from_toml(
            "[models.\"gpt-4o\"]\ninput = 1\noutput = 2\n[models.\"azure/gpt-4o\"]\ninput = 5\noutput = 6\n",
            "test",
        )
        .unwrap();
        assert_eq!(table.price("gpt-4o").unwrap().input, 1.0);
        assert_eq!(table.price("openai/gpt-4o").unwrap().input, 1.0);
        assert_eq!(table.price("openrouter/openai/gpt-4o").unwrap().input, 1.0);
        assert_eq!(table.price("azure/gpt-4o").unwrap().input, 5.0);
        assert_eq!(table.price("gpt-4o-2024-08-06"), None);
        assert_eq!(table.cost("nobody/knows", 1, 1, 0), None);
        // `cached_input` defaults to `input`.
        assert_eq!(table.price("gpt-4o").unwrap().cached_input, 1.0);
    }

    #[test]
    fn a_user_table_overrides_the_builtin_one_entry_by_entry() {
        let user = PriceTable::from_toml(
            "[models.\"gpt-4o\"]\ninput = 9\noutput = 9\ncached_input = 9\n",
            "user.toml",
        )
        .unwrap();
        let merged = user.merged_over(&PriceTable::builtin());
        assert_eq!(merged.price("gpt-4o").unwrap().output, 9.0);
        assert_eq!(merged.price("stet-demo-model").unwrap().output, 15.0);
    }

    #[test]
    fn parse_errors_name_the_source_the_model_and_the_field() {
        let cases = [
            ("[models.\"m1\"]\ninput = 1\n", "output"),
            ("[models.\"m1\"]\ninput = \"cheap\"\noutput = 1\n", "input"),
            ("[models.\"m1\"]\ninput = 1\noutput = -2\n", "output"),
            (
                "[models.\"m1\"]\ninput = 1\noutput = 2\ncached_input = nan\n",
                "cached_input",
            ),
            (
                "[models.\"m1\"]\ninput = 1\noutput = 2\ncahced_input = 1\n",
                "cahced_input",
            ),
        ];
        for (text, field) in cases {
            let err = PriceTable::from_toml(text, "my-prices.toml").unwrap_err();
            let message = err.to_string();
            assert!(message.contains("my-prices.toml"), "{message}");
            assert!(message.contains("\"m1\""), "{message}");
            assert!(message.contains(&format!("`{field}`")), "{message}");
        }
        let err = PriceTable::from_toml("[models\ninput = 1", "broken.toml").unwrap_err();
        assert!(err.to_string().contains("broken.toml"), "{err}");
        let err = PriceTable::from_toml("[prices.\"m\"]\ninput = 1\n", "other.toml").unwrap_err();
        assert!(
            err.to_string().contains("other.toml") && err.to_string().contains("prices"),
            "{err}"
        );
    }
}
