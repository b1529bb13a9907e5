//! Unit tests of `crate::form`, in a file of their own so the module reads as code.

use super::*;

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn ctrl(character: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(character), KeyModifiers::CONTROL)
}

/// Types `text` into the focused field, one key press per character.
pub(crate) fn type_text(form: &mut NewBriefForm, text: &str) {
    for character in text.chars() {
        assert_eq!(
            form.handle_key(key(KeyCode::Char(character))),
            FormOutcome::Editing
        );
    }
}

/// Presses `code` once, expecting the form to stay open.
pub(crate) fn press(form: &mut NewBriefForm, code: KeyCode) {
    assert_eq!(form.handle_key(key(code)), FormOutcome::Editing);
}

fn filled() -> NewBriefForm {
    let mut form = NewBriefForm::new("octo/app", "main");
    type_text(&mut form, "Fix the login loop");
    form.focus = Field::Items;
    type_text(&mut form, "Reproduce it");
    press(&mut form, KeyCode::Enter);
    form
}

fn draft(title: &str, items: &[&str]) -> BriefDraft {
    BriefDraft {
        title: title.to_owned(),
        repo: "octo/app".to_owned(),
        base: "main".to_owned(),
        items: items.iter().map(|item| (*item).to_owned()).collect(),
    }
}

#[test]
fn starts_on_the_title_with_repo_and_base_prefilled() {
    let form = NewBriefForm::new("octo/app", "main");
    assert_eq!(form.focus(), Field::Title);
    assert_eq!(form.value(Field::Title), "");
    assert_eq!(form.value(Field::Repo), "octo/app");
    assert_eq!(form.value(Field::Base), "main");
    assert!(form.items().is_empty());
    assert_eq!(form.error(), None);
}

#[test]
fn typing_edits_the_focused_field() {
    let mut form = NewBriefForm::new("", "");
    type_text(&mut form, "Fix it");
    assert_eq!(form.value(Field::Title), "Fix it");
    assert_eq!(form.cursor(), 6);
    press(&mut form, KeyCode::Backspace);
    press(&mut form, KeyCode::Home);
    press(&mut form, KeyCode::Delete);
    assert_eq!(form.value(Field::Title), "ix i");
    assert_eq!(form.cursor(), 0);
    press(&mut form, KeyCode::End);
    form.handle_key(ctrl('w'));
    assert_eq!(form.value(Field::Title), "ix ");
    press(&mut form, KeyCode::Tab);
    type_text(&mut form, "字x");
    assert_eq!(form.value(Field::Repo), "字x");
    assert_eq!(form.cursor(), 3, "a wide character takes two columns");
    assert_eq!(form.value(Field::Title), "ix ");
}

#[test]
fn tab_and_arrows_move_through_the_fields_and_wrap() {
    let mut form = NewBriefForm::new("", "");
    let mut order = Vec::new();
    for _ in 0..5 {
        order.push(form.focus());
        press(&mut form, KeyCode::Tab);
    }
    use Field::{Base, Items, Repo, Title};
    assert_eq!(order, [Title, Repo, Base, Items, Title]);
    press(&mut form, KeyCode::BackTab);
    assert_eq!(form.focus(), Title);
    press(&mut form, KeyCode::Up);
    assert_eq!(form.focus(), Items);
    press(&mut form, KeyCode::Down);
    assert_eq!(form.focus(), Title);
    form.handle_key(KeyEvent::new(KeyCode::Tab, KeyModifiers::SHIFT));
    assert_eq!(form.focus(), Items);
    form.focus = Base;
    press(&mut form, KeyCode::Enter);
    assert_eq!(form.focus(), Items, "Enter outside Items moves on");
}

#[test]
fn enter_adds_items_and_submits_on_an_empty_line() {
    let mut form = filled();
    assert_eq!(form.items(), ["Reproduce it"]);
    assert_eq!(form.value(Field::Items), "");
    type_text(&mut form, "  ");
    press(&mut form, KeyCode::Backspace);
    type_text(&mut form, "Add a test ");
    press(&mut form, KeyCode::Enter);
    assert_eq!(form.items(), ["Reproduce it", "Add a test"]);
    assert_eq!(
        form.handle_key(key(KeyCode::Enter)),
        FormOutcome::Submitted(BriefDraft {
            title: "Fix the login loop".to_owned(),
            repo: "octo/app".to_owned(),
            base: "main".to_owned(),
            items: vec!["Reproduce it".to_owned(), "Add a test".to_owned()],
        })
    );
}

#[test]
fn ctrl_s_submits_from_anywhere_with_the_pending_item_last() {
    let mut form = filled();
    type_text(&mut form, "Then the test");
    form.focus = Field::Title;
    let FormOutcome::Submitted(draft) = form.handle_key(ctrl('s')) else {
        panic!("Ctrl-S submits a complete form");
    };
    assert_eq!(draft.items, ["Reproduce it", "Then the test"]);
    assert_eq!(form.error(), None);
}

#[test]
fn submit_names_the_field_to_fix_and_focuses_it() {
    let mut form = NewBriefForm::new("octo", "");
    form.focus = Field::Items;
    assert_eq!(form.handle_key(ctrl('s')), FormOutcome::Editing);
    assert_eq!(form.focus(), Field::Title);
    assert_eq!(
        form.error(),
        Some("Title: the title is empty; say in a few words what the brief is for")
    );

    type_text(&mut form, "   ");
    form.handle_key(ctrl('s'));
    assert_eq!(form.focus(), Field::Title, "a blank title is empty");
    type_text(&mut form, "Fix");
    assert!(form.error().is_some(), "kept until the next submit");

    form.handle_key(ctrl('s'));
    assert_eq!(form.focus(), Field::Repo);
    assert_eq!(
        form.error(),
        Some("Repo: \"octo\" must be `owner/name`, e.g. octo/app")
    );
    for bad in ["/app", "octo/", "octo//x", "octo/a b", "../app"] {
        let mut form = NewBriefForm::new(bad, "main");
        type_text(&mut form, "Fix");
        form.handle_key(ctrl('s'));
        assert_eq!(form.focus(), Field::Repo, "{bad}");
        assert!(form.error().unwrap().starts_with("Repo: "), "{bad}");
    }

    type_text(&mut form, "/app");
    form.handle_key(ctrl('s'));
    assert_eq!(form.focus(), Field::Base);
    assert!(
        form.error()
            .unwrap()
            .starts_with("Base: the base branch is empty")
    );
    type_text(&mut form, "ma..in");
    form.handle_key(ctrl('s'));
    assert_eq!(
        form.error(),
        Some(
            "Base: \"ma..in\" is not a branch git accepts: the branch name contains \"..\" at byte 2"
        )
    );
    for _ in 0..4 {
        press(&mut form, KeyCode::Backspace);
    }
    type_text(&mut form, "in");

    form.focus = Field::Title;
    form.handle_key(ctrl('s'));
    assert_eq!(form.focus(), Field::Items);
    assert_eq!(
        form.error(),
        Some("Items: a brief needs at least one item; type one and press Enter")
    );
    press(&mut form, KeyCode::Enter);
    assert_eq!(
        form.focus(),
        Field::Items,
        "an empty line with no items submits"
    );
    assert!(form.error().unwrap().starts_with("Items: "));
}

#[test]
fn esc_cancels_from_any_field() {
    for field in Field::ALL {
        let mut form = filled();
        form.focus = field;
        assert_eq!(form.handle_key(key(KeyCode::Esc)), FormOutcome::Cancelled);
    }
}

#[test]
fn only_presses_act() {
    let mut form = NewBriefForm::new("", "");
    for kind in [KeyEventKind::Release, KeyEventKind::Repeat] {
        for code in [
            KeyCode::Char('x'),
            KeyCode::Tab,
            KeyCode::Esc,
            KeyCode::Enter,
        ] {
            let event = KeyEvent::new_with_kind(code, KeyModifiers::NONE, kind);
            assert_eq!(form.handle_key(event), FormOutcome::Editing);
        }
        let save = KeyEvent::new_with_kind(KeyCode::Char('s'), KeyModifiers::CONTROL, kind);
        assert_eq!(form.handle_key(save), FormOutcome::Editing);
    }
    assert_eq!(form.value(Field::Title), "");
    assert_eq!(form.focus(), Field::Title);
    assert_eq!(form.error(), None);
}

#[test]
fn control_characters_are_not_typed() {
    let mut form = NewBriefForm::new("", "");
    type_text(&mut form, "a\u{1b}\u{7}\u{202e}b");
    assert_eq!(form.value(Field::Title), "ab");
}

#[test]
fn fields_stop_growing_at_their_limit() {
    let mut form = NewBriefForm::new("", "");
    type_text(&mut form, &"t".repeat(MAX_TITLE_CHARS + 5));
    assert_eq!(form.value(Field::Title).chars().count(), MAX_TITLE_CHARS);

    form.handle_key(ctrl('w'));
    assert_eq!(form.value(Field::Title), "");
    type_text(&mut form, &"u".repeat(MAX_TITLE_CHARS - 1));
    form.handle_key(ctrl('y'));
    assert_eq!(
        form.value(Field::Title).chars().count(),
        MAX_TITLE_CHARS - 1,
        "a yank past the limit is refused whole"
    );

    form.focus = Field::Items;
    type_text(&mut form, &"i".repeat(MAX_ITEM_CHARS + 1));
    assert_eq!(form.value(Field::Items).chars().count(), MAX_ITEM_CHARS);
}

#[test]
fn a_brief_holds_at_most_fifty_items() {
    let mut form = filled();
    for number in 2..=MAX_ITEMS {
        type_text(&mut form, &number.to_string());
        press(&mut form, KeyCode::Enter);
    }
    assert_eq!(form.items().len(), MAX_ITEMS);
    type_text(&mut form, "one more");
    press(&mut form, KeyCode::Enter);
    assert_eq!(form.items().len(), MAX_ITEMS);
    assert_eq!(form.value(Field::Items), "one more");
    assert_eq!(form.error(), Some("Items: a brief holds at most 50 items"));
    assert_eq!(form.handle_key(ctrl('s')), FormOutcome::Editing);
    form.handle_key(ctrl('u'));
    assert!(matches!(
        form.handle_key(ctrl('s')),
        FormOutcome::Submitted(draft) if draft.items.len() == MAX_ITEMS
    ));
}

#[test]
fn slugs_are_valid_brief_ids() {
    assert_eq!(
        slug("Fix the login redirect loop"),
        "fix-the-login-redirect-loop"
    );
    assert_eq!(slug("  --Héllo,   \"World\"!! v2 "), "h-llo-world-v2");
    assert_eq!(slug("字字 ✓"), "brief");
    assert_eq!(slug(""), "brief");
    let long = slug(&"word ".repeat(40));
    assert!(long.len() <= MAX_SLUG_BYTES, "{long}");
    assert!(!long.ends_with('-'), "{long}");
    for title in ["Fix it", "!!", &"ab-".repeat(40), "a_b"] {
        let id = slug(title);
        assert!(
            Brief::parse(
                &format!("{id}-{MAX_NAME_ATTEMPTS}"),
                Path::new("x.toml"),
                ""
            )
            .is_err_and(|error| !matches!(error, BriefError::InvalidId { .. })),
            "{title} gives the id {id}"
        );
    }
}

/// The inbox of the repository at `root`.
fn inbox_of(root: &Path) -> PathBuf {
    root.join(".stet").join("briefs")
}

#[test]
fn save_writes_a_brief_the_parser_reads_back() {
    let root = tempfile::tempdir().unwrap();
    let inbox = inbox_of(root.path());
    let draft = draft("Fix the login loop", &["Reproduce it", "Add a test"]);
    let entry = save(root.path(), &draft).unwrap();
    assert_eq!(entry.path, inbox.join("fix-the-login-loop.toml"));
    let brief = entry.brief.unwrap();
    assert_eq!(brief, Brief::from_file(&entry.path).unwrap());
    assert_eq!(brief.id, "fix-the-login-loop");
    assert_eq!(brief.title, draft.title);
    assert_eq!(brief.workflow, WORKFLOW);
    assert_eq!(brief.target.repo, draft.repo);
    assert_eq!(brief.target.base, draft.base);
    assert_eq!(brief.target.branch, None);
    let texts: Vec<&str> = brief.items.iter().map(|item| item.text.as_str()).collect();
    assert_eq!(texts, draft.items);
}

#[test]
fn save_writes_plain_toml() {
    let root = tempfile::tempdir().unwrap();
    let entry = save(root.path(), &draft("Fix it", &["Do \"this\""])).unwrap();
    assert_eq!(
        std::fs::read_to_string(entry.path).unwrap(),
        "title = \"Fix it\"\nworkflow = \"implement\"\n\n[target]\nrepo = \"octo/app\"\nbase = \"main\"\n\n[[items]]\ntext = 'Do \"this\"'\n"
    );
}

#[test]
fn taken_names_get_a_number() {
    let root = tempfile::tempdir().unwrap();
    let draft = draft("Fix it", &["x"]);
    let names: Vec<PathBuf> = (0..3)
        .map(|_| save(root.path(), &draft).unwrap().path)
        .collect();
    let inbox = inbox_of(root.path());
    assert_eq!(
        names,
        ["fix-it.toml", "fix-it-2.toml", "fix-it-3.toml"].map(|name| inbox.join(name))
    );
}

#[test]
fn save_never_overwrites() {
    let root = tempfile::tempdir().unwrap();
    let inbox = inbox_of(root.path());
    std::fs::create_dir_all(&inbox).unwrap();
    let taken = inbox.join("fix-it.toml");
    std::fs::write(&taken, "precious").unwrap();
    let dangling = inbox.join("fix-it-2.toml");
    std::os::unix::fs::symlink(root.path().join("nowhere"), &dangling).unwrap();
    let entry = save(root.path(), &draft("Fix it", &["x"])).unwrap();
    assert_eq!(entry.path, inbox.join("fix-it-3.toml"));
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "precious");
    assert!(
        !root.path().join("nowhere").exists(),
        "the symlink is not followed"
    );
}

#[test]
fn a_link_on_the_way_to_the_inbox_fails_the_save_and_nothing_is_written_outside() {
    for linked in [".stet", ".stet/briefs"] {
        let root = tempfile::tempdir().unwrap();
        let repository = root.path().join("repo");
        let outside = root.path().join("outside");
        std::fs::create_dir_all(repository.join(".stet")).unwrap();
        std::fs::create_dir_all(outside.join("briefs")).unwrap();
        let link = repository.join(linked);
        let target = if linked == ".stet" {
            std::fs::remove_dir(&link).unwrap();
            outside.clone()
        } else {
            outside.join("briefs")
        };
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = save(&repository, &draft("Fix it", &["x"])).unwrap_err();
        assert!(
            matches!(&error, FormError::Inbox(BeneathError::Link { path }) if *path == link),
            "{error}"
        );
        assert!(error.to_string().contains("it is a link"), "{error}");
        assert!(
            error.to_string().contains(&*link.to_string_lossy()),
            "{error}"
        );
        assert_eq!(
            std::fs::read_dir(outside.join("briefs")).unwrap().count(),
            0,
            "written through {linked}"
        );
    }
}

#[test]
fn awkward_text_round_trips() {
    let root = tempfile::tempdir().unwrap();
    let title = "Don't \"quote\" me \\ on 'this' — ünïcödé 字 ''' \"\"\"";
    let items = [
        "line one\nline \"two\"\n\tthree '''",
        "{{title}} $(rm -rf /) ✓",
    ];
    let entry = save(root.path(), &draft(title, &items)).unwrap();
    let brief = entry.brief.unwrap();
    assert_eq!(brief.title, title);
    let texts: Vec<&str> = brief.items.iter().map(|item| item.text.as_str()).collect();
    assert_eq!(texts, items);
    assert_eq!(brief.id, "don-t-quote-me-on-this-n-c-d");
}

#[test]
fn a_brief_the_parser_refuses_is_removed() {
    let root = tempfile::tempdir().unwrap();
    let error = save(root.path(), &draft("Two\nlines", &["x"])).unwrap_err();
    let FormError::Unreadable { file, .. } = &error else {
        panic!("{error}");
    };
    let inbox = inbox_of(root.path());
    assert_eq!(*file, inbox.join("two-lines.toml"));
    assert!(error.to_string().contains("two-lines.toml"), "{error}");
    assert!(error.to_string().contains("field `title`"), "{error}");
    assert_eq!(std::fs::read_dir(&inbox).unwrap().count(), 0);
}

#[test]
fn save_errors_name_the_path() {
    let root = tempfile::tempdir().unwrap();
    let blocker = root.path().join(".stet");
    std::fs::write(&blocker, "").unwrap();
    let error = save(root.path(), &draft("Fix", &["x"])).unwrap_err();
    assert!(
        matches!(error, FormError::Inbox(BeneathError::Io { .. })),
        "{error}"
    );
    assert!(
        error.to_string().contains(&*blocker.to_string_lossy()),
        "{error}"
    );
}
