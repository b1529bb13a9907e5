//! Unit tests of `crate::gateway::prices`, in a file of their own so the module reads as code.

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
            cached_input: 0.30,
            cache_write_5m: 3.75,
            cache_write_1h: 6.0,
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
    assert_eq!(table.price("gpt-4o-mini"), None);
    assert_eq!(table.cost("nobody/knows", 1, 1, 0), None);
    // `cached_input` defaults to `input`.
    assert_eq!(table.price("gpt-4o").unwrap().cached_input, 1.0);
}

#[test]
fn a_snapshot_date_is_stripped_after_an_exact_miss() {
    let table = PriceTable::from_toml(
            "[models.\"gpt-4o\"]\ninput = 1\noutput = 2\n[models.\"gpt-4o-2024-05-13\"]\ninput = 5\noutput = 15\n[models.\"claude-sonnet-4\"]\ninput = 3\noutput = 15\n",
            "test",
        )
        .unwrap();
    for (model, input) in [
        ("gpt-4o-2024-08-06", 1.0),
        ("openai/gpt-4o-2024-08-06", 1.0),
        ("gpt-4o-2024-05-13", 5.0),
        ("azure/gpt-4o-2024-05-13", 5.0),
        ("claude-sonnet-4-20250514", 3.0),
        ("claude-sonnet-4@20250514", 3.0),
        ("vertex_ai/claude-sonnet-4@20250514", 3.0),
    ] {
        assert_eq!(table.price(model).map(|p| p.input), Some(input), "{model}");
    }
    for model in [
        "gpt-4o-20240806x",
        "gpt-4o-2024-8-06",
        "gpt-4o-mini-2024-07-18",
        "-2024-08-06",
        "@2024",
        "gpt-4o-1234567",
    ] {
        assert_eq!(table.price(model), None, "{model}");
    }
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
fn parse_errors_name_the_source_the_line_and_the_field() {
    let cases = [
        (
            "[models.\"m1\"]\ninput = 1\n",
            "line 1: field `output` is missing",
        ),
        (
            "[models.\"m1\"]\ninput = 1\noutput = -2\n",
            "line 3: field `output` must be",
        ),
        (
            "[models.\"m1\"]\ninput = 1\noutput = 2\ncached_input = nan\n",
            "line 4: field `cached_input` must be",
        ),
        (
            "[models.\"m1\"]\ninput = \"cheap\"\noutput = 1\n",
            "line 2, column 9: not a price table",
        ),
        (
            "[models.\"m1\"]\ninput = 1\noutput = 2\ncahced_input = 1\n",
            "line 4, column 1: not a price table",
        ),
        ("[models\ninput = 1", "line 1, column 8: not valid TOML"),
        (
            "[prices.\"m\"]\ninput = 1\n",
            "line 1, column 2: not a price table",
        ),
    ];
    for (text, wanted) in cases {
        let err = PriceTable::from_toml(text, "mine.toml").unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("price table mine.toml: "), "{message}");
        assert!(message.contains(wanted), "{text:?}: {message}");
        for quoted in ["m1", "cheap", "cahced", "prices"] {
            assert!(!message.contains(quoted), "{text:?}: {message}");
        }
    }
}

#[test]
fn a_price_table_that_is_some_other_file_of_the_users_is_never_quoted() {
    let secret = format!("canary{}", uuid::Uuid::new_v4().simple());
    for text in [
        format!("db.example.invalid:5432:app:admin:{secret}\n"),
        format!("AWS_SECRET_ACCESS_KEY = \"{secret}\"\n"),
        format!("[models.\"{secret}\"]\ninput = 1\n"),
        format!("[models.m]\ninput = \"{secret}\"\noutput = 1\n"),
    ] {
        let message = PriceTable::from_toml(&text, "/home/u/.pgpass")
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("price table /home/u/.pgpass: line "),
            "{message}"
        );
        assert!(!message.contains(&secret), "{text:?}: {message}");
        assert!(!message.contains("AWS_SECRET"), "{text:?}: {message}");
    }
}

#[test]
fn the_gpt5_codex_and_claude_models_are_priced_with_their_cache_rates() {
    let table = PriceTable::builtin();
    let price = |model: &str| *table.price(model).unwrap_or_else(|| panic!("{model}"));
    // OpenAI: cached input at a tenth of the input price on the GPT-5 family.
    for (model, input, cached, output) in [
        ("gpt-5", 1.25, 0.125, 10.0),
        ("gpt-5-2025-08-07", 1.25, 0.125, 10.0),
        ("gpt-5-mini", 0.25, 0.025, 2.0),
        ("gpt-5-nano", 0.05, 0.005, 0.40),
        ("gpt-5-codex", 1.25, 0.125, 10.0),
        ("gpt-5.1-codex", 1.25, 0.125, 10.0),
        ("gpt-5.1-codex-mini", 0.25, 0.025, 2.0),
        ("codex-mini-latest", 1.50, 0.375, 6.0),
        ("gpt-5.4", 2.50, 0.25, 15.0),
        ("gpt-5.5", 5.0, 0.50, 30.0),
    ] {
        let price = price(model);
        assert!(approx(price.input, input), "{model}");
        assert!(approx(price.cached_input, cached), "{model}");
        assert!(approx(price.output, output), "{model}");
    }
    // Anthropic: reads at a tenth, five-minute writes at 1.25 times, one-hour writes at twice.
    for (model, input, output) in [
        ("claude-opus-4-1-20250805", 15.0, 75.0),
        ("claude-sonnet-4-5-20250929", 3.0, 15.0),
        ("claude-haiku-4-5-20251001", 1.0, 5.0),
        ("claude-opus-4-5", 5.0, 25.0),
    ] {
        let price = price(model);
        assert!(approx(price.input, input), "{model}");
        assert!(approx(price.output, output), "{model}");
        assert!(approx(price.cached_input, input / 10.0), "{model}");
        assert!(approx(price.cache_write_5m, input * 1.25), "{model}");
        assert!(approx(price.cache_write_1h, input * 2.0), "{model}");
    }
}

#[test]
fn cache_writes_are_charged_at_their_rates_and_never_twice() {
    let price = ModelPrice {
        input: 3.0,
        output: 15.0,
        cached_input: 0.30,
        cache_write_5m: 3.75,
        cache_write_1h: 6.0,
    };
    // 1000 input of which 100 read, 200 written for five minutes, 300 for an hour.
    let counts = TokenCounts {
        input: 1000,
        output: 10,
        cached: 100,
        cache_write_5m: 200,
        cache_write_1h: 300,
    };
    let expected = (400.0 * 3.0 + 100.0 * 0.30 + 200.0 * 3.75 + 300.0 * 6.0 + 10.0 * 15.0) / 1e6;
    assert!(approx(price.cost_of(&counts), expected));
    // Counts that add up to more than the input are held to it.
    let lying = TokenCounts {
        input: 10,
        output: 0,
        cached: 4,
        cache_write_5m: 100,
        cache_write_1h: 5,
    };
    assert!(approx(
        price.cost_of(&lying),
        (4.0 * 0.30 + 5.0 * 6.0 + 1.0 * 3.75) / 1e6
    ));
    assert!(approx(price.dearest_input(), 6.0));
    // Without cache writes it is the three-rate cost.
    let plain = TokenCounts {
        input: 100,
        output: 7,
        cached: 30,
        ..TokenCounts::default()
    };
    assert!(approx(price.cost_of(&plain), price.cost(100, 7, 30)));
}

#[test]
fn a_price_file_may_set_the_cache_write_rates() {
    let table = PriceTable::from_toml(
        "[models.\"m\"]\ninput = 2.0\noutput = 4.0\ncache_write_5m = 2.5\ncache_write_1h = 3.5\n",
        "test",
    )
    .unwrap();
    let price = table.price("m").unwrap();
    assert!(approx(price.cache_write_5m, 2.5) && approx(price.cache_write_1h, 3.5));
    let err = PriceTable::from_toml(
        "[models.\"m\"]\ninput = 2.0\noutput = 4.0\ncache_write_1h = -1\n",
        "test",
    )
    .unwrap_err();
    assert!(err.to_string().contains("cache_write_1h"), "{err}");
}
