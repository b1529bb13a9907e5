use chrono::TimeDelta;

use super::*;
use crate::app::tests::{brief_entry, t0};
use crate::app::{Msg, Request};

/// A salvaged result of `lines` added lines in `src/main.rs`, one held path and one file left out.
/// Its dispatch id is fixed, for snapshots.
pub(crate) fn salvaged_result(lines: usize) -> SalvagedResult {
    let dispatch: DispatchId = "stet-dispatch-00000000-0000-4000-8000-000000000029"
        .parse()
        .unwrap();
    let mut patch = String::from(
        "diff --git a/src/main.rs b/src/main.rs\n--- a/src/main.rs\n+++ b/src/main.rs\n",
    );
    patch.push_str(&format!("@@ -0,0 +1,{lines} @@\n"));
    for n in 0..lines {
        patch.push_str(&format!("+salvaged line {n}\n"));
    }
    SalvagedResult {
        dispatch,
        title: "Greet the user by name".to_owned(),
        reference: format!("refs/stet/{dispatch}"),
        files: 1,
        insertions: lines,
        deletions: 0,
        held: vec!["a protected path: .github/workflows/ci.yml".to_owned()],
        warnings: vec!["target/big.bin: larger than import.max_file_bytes, left out".to_owned()],
        patch: PatchText::new(patch),
        salvaged_at: t0() + TimeDelta::minutes(5),
    }
}

fn app_with(result: &SalvagedResult) -> App {
    let mut app = App::new(&[brief_entry("fix-greeting"), brief_entry("zz-last")], t0());
    app.set_salvaged([result.clone()]);
    app
}

#[test]
fn a_salvaged_result_is_listed_below_the_briefs_and_survives_a_reload() {
    let result = salvaged_result(3);
    let mut app = app_with(&result);
    assert_eq!(app.rows().len(), 3);
    assert!(matches!(app.rows()[2], InboxRow::Salvaged(_)));
    app.update(Msg::SelectNext);
    app.update(Msg::SelectNext);
    assert_eq!(app.selected_salvaged(), Some(&result));
    // The briefs read again from disk: the salvaged row stays, and so does the cursor on it.
    let rows = vec![
        InboxRow::from_entry(&brief_entry("fix-greeting")),
        InboxRow::from_entry(&brief_entry("new-one")),
        InboxRow::from_entry(&brief_entry("zz-last")),
    ];
    app.update(Msg::InboxReloaded(rows));
    assert_eq!(app.rows().len(), 4);
    assert_eq!(app.selected(), Some(3));
    assert_eq!(app.selected_salvaged(), Some(&result));
    // Showing the salvaged results again replaces them, not adds to them.
    app.set_salvaged([result.clone()]);
    assert_eq!(app.rows().len(), 4);
}

#[test]
fn push_discard_and_dispatch_on_a_salvaged_result_ask_nothing_of_the_engine() {
    let result = salvaged_result(3);
    let mut app = app_with(&result);
    app.update(Msg::SelectNext);
    app.update(Msg::SelectNext);
    for (key, said) in [
        (
            Msg::Approve,
            format!(
                "nothing to push: a salvaged result is incomplete and stet never pushes it; take it further with git from {}",
                result.reference
            ),
        ),
        (
            Msg::Discard,
            format!(
                "nothing to discard here: a salvaged result stays at {0} until you delete it (git update-ref -d {0})",
                result.reference
            ),
        ),
        (
            Msg::DispatchSelected,
            format!(
                "a salvaged result is not a brief, so it is not dispatched; it is kept at {}",
                result.reference
            ),
        ),
    ] {
        assert_eq!(app.update(key), None);
        assert_eq!(app.confirm(), None, "no question opens");
        assert_eq!(app.status(), Some(said));
        // A yes pressed after it answers nothing: there is no question to answer.
        let requests: Vec<Request> = [Msg::ConfirmYes, Msg::ConfirmYes]
            .into_iter()
            .filter_map(|msg| app.update(msg))
            .collect();
        assert_eq!(requests, []);
    }
}

#[test]
fn the_scroll_keys_move_the_salvaged_diff_within_its_length() {
    let result = salvaged_result(100);
    let mut app = app_with(&result);
    app.update(Msg::SelectNext);
    app.update(Msg::SelectNext);
    app.set_pages(crate::app::Pages {
        diff: 10,
        ..crate::app::Pages::default()
    });
    app.update(Msg::ScrollDown(3));
    assert_eq!(app.review_scroll(), 3);
    app.update(Msg::PageDown);
    assert!(app.review_scroll() > 3, "{}", app.review_scroll());
    app.update(Msg::FollowTail);
    assert_eq!(app.review_scroll(), result.patch.len() - 10);
    app.update(Msg::ScrollTop);
    assert_eq!(app.review_scroll(), 0);
    // Another row selected starts the next salvaged diff from its top.
    app.update(Msg::ScrollDown(5));
    app.update(Msg::SelectPrevious);
    assert_eq!(app.review_scroll(), 0);
}
