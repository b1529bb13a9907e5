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
