//! Which field of a brief an error is about: the path (`items[2].anchor.lines`) of the key or value
//! that holds a byte offset of the TOML, found in the parser's spanned tree.

use std::ops::{Range, RangeInclusive};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a field path: a table key or an array index.
#[derive(Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// The field an error at byte `offset` is about, as a path like `items[2].anchor.lines`: the
/// innermost key or value that contains the offset or, when the TOML is broken there, the last key
/// that starts before it on the same line.
pub(super) fn field_path_at(table: &DeTable<'_>, text: &str, offset: usize) -> Option<String> {
    let mut steps = Vec::new();
    if find_in_table(table, offset, &mut steps) {
        return Some(render_path(&steps));
    }
    let line_start = text
        .get(..offset)
        .and_then(|before| before.rfind('\n'))
        .map_or(0, |newline| newline + 1);
    let mut nearest = None;
    find_nearest_key_in_table(table, &(line_start..=offset), &mut steps, &mut nearest);
    nearest.map(|(_, steps)| render_path(&steps))
}

fn render_path(steps: &[PathStep]) -> String {
    let mut path = String::new();
    for step in steps {
        match step {
            PathStep::Key(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                if !key.is_empty()
                    && key
                        .bytes()
                        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
                {
                    path.push_str(key);
                } else {
                    path.push_str(&format!("\"{}\"", key.escape_debug()));
                }
            }
            PathStep::Index(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

fn find_in_table(table: &DeTable<'_>, offset: usize, steps: &mut Vec<PathStep>) -> bool {
    for (key, value) in table.iter() {
        steps.push(PathStep::Key(key.get_ref().to_string()));
        if span_contains(&key.span(), offset) || find_in_value(value, offset, steps) {
            return true;
        }
        steps.pop();
    }
    false
}

fn find_in_value(value: &Spanned<DeValue<'_>>, offset: usize, steps: &mut Vec<PathStep>) -> bool {
    let found_inside = match value.get_ref() {
        DeValue::Table(table) => find_in_table(table, offset, steps),
        DeValue::Array(array) => {
            let mut found = false;
            for (index, element) in array.iter().enumerate() {
                steps.push(PathStep::Index(index));
                if find_in_value(element, offset, steps) {
                    found = true;
                    break;
                }
                steps.pop();
            }
            found
        }
        _ => false,
    };
    found_inside || span_contains(&value.span(), offset)
}

/// The key starting last within `window`, with its path, kept in `nearest`.
type NearestKey = Option<(usize, Vec<PathStep>)>;

fn find_nearest_key_in_table(
    table: &DeTable<'_>,
    window: &RangeInclusive<usize>,
    steps: &mut Vec<PathStep>,
    nearest: &mut NearestKey,
) {
    for (key, value) in table.iter() {
        steps.push(PathStep::Key(key.get_ref().to_string()));
        let start = key.span().start;
        if window.contains(&start) && nearest.as_ref().is_none_or(|(best, _)| start >= *best) {
            *nearest = Some((start, steps.clone()));
        }
        find_nearest_key_in_value(value, window, steps, nearest);
        steps.pop();
    }
}

fn find_nearest_key_in_value(
    value: &Spanned<DeValue<'_>>,
    window: &RangeInclusive<usize>,
    steps: &mut Vec<PathStep>,
    nearest: &mut NearestKey,
) {
    match value.get_ref() {
        DeValue::Table(table) => find_nearest_key_in_table(table, window, steps, nearest),
        DeValue::Array(array) => {
            for (index, element) in array.iter().enumerate() {
                steps.push(PathStep::Index(index));
                find_nearest_key_in_value(element, window, steps, nearest);
                steps.pop();
            }
        }
        _ => {}
    }
}

fn span_contains(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}
