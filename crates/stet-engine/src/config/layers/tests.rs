//! Unit tests of `crate::config::layers`, in a file of their own so the module reads as code.

use std::path::Path;

use super::*;
use crate::config::FileRole;

fn layers(files: &[(&str, FileRole)]) -> Layers {
    Layers::new(
        files
            .iter()
            .enumerate()
            .map(|(index, (text, role))| {
                let path = format!("/layer{index}/stet.toml");
                Layer::parse(Path::new(&path), text, *role).unwrap()
            })
            .collect(),
    )
}

const USER: FileRole = FileRole::User;
const REPO: FileRole = FileRole::Repository;
const TRUSTED: FileRole = FileRole::TrustedRepository;

#[test]
fn a_machine_setting_comes_from_the_user_or_a_trusted_file_never_an_untrusted_one() {
    let mut read = layers(&[
        ("[dispatch]\nimage = \"user\"\n", USER),
        ("\n\n[dispatch]\nimage = \"repo\"\n", REPO),
    ]);
    let image = read.machine("dispatch.image", Reason::Image, |s| &s.dispatch.image);
    assert_eq!(image.unwrap().value, "user");
    assert_eq!(
        read.refusals(),
        [Refusal {
            file: PathBuf::from("/layer1/stet.toml"),
            line: 4,
            field: "dispatch.image",
            why: "is a machine setting: it chooses the image the agent runs in".to_owned()
        }]
    );

    let mut read = layers(&[
        ("[dispatch]\nimage = \"user\"\n", USER),
        ("[dispatch]\nimage = \"repo\"\n", TRUSTED),
    ]);
    let image = read.machine("dispatch.image", Reason::Image, |s| &s.dispatch.image);
    assert_eq!(image.unwrap().value, "repo");
    assert!(read.refusals().is_empty());
}

#[test]
fn a_limit_only_goes_down_from_an_untrusted_file() {
    let pick: Pick<u64> = |s| &s.dispatch.timeout_secs;
    let cases = [
        // (user, repository, wanted, refused)
        (None, Some(600), Some(600), false),
        (None, Some(1800), Some(1800), false),
        (None, Some(1801), None, true),
        (Some(3600), Some(3000), Some(3000), false),
        (Some(3600), Some(3601), Some(3600), true),
        (Some(600), Some(900), Some(600), true),
    ];
    for (user, repository, wanted, refused) in cases {
        let mut files = Vec::new();
        let user_text = user.map(|secs| format!("[dispatch]\ntimeout_secs = {secs}\n"));
        let repository_text = repository.map(|secs| format!("[dispatch]\ntimeout_secs = {secs}\n"));
        if let Some(text) = &user_text {
            files.push((text.as_str(), USER));
        }
        if let Some(text) = &repository_text {
            files.push((text.as_str(), REPO));
        }
        let mut read = layers(&files);
        let found = read.at_most("dispatch.timeout_secs", pick, Some(1800));
        assert_eq!(found.map(|f| f.value), wanted, "{user:?} {repository:?}");
        assert_eq!(
            !read.refusals().is_empty(),
            refused,
            "{user:?} {repository:?}"
        );
    }

    let mut read = layers(&[("[dispatch]\ntimeout_secs = 7200\n", TRUSTED)]);
    let found = read.at_most("dispatch.timeout_secs", pick, Some(1800));
    assert_eq!(found.unwrap().value, 7200, "a trusted file may raise it");
}

#[test]
fn a_ceiling_with_no_bound_beneath_may_be_set_and_only_lowered() {
    let pick: Pick<f64> = |s| &s.dispatch.cost_ceiling_usd;
    let mut read = layers(&[("[dispatch]\ncost_ceiling_usd = 2.5\n", REPO)]);
    assert_eq!(
        read.at_most("dispatch.cost_ceiling_usd", pick, None)
            .unwrap()
            .value,
        2.5
    );
    let mut read = layers(&[
        ("[dispatch]\ncost_ceiling_usd = 1\n", USER),
        ("[dispatch]\ncost_ceiling_usd = 100\n", REPO),
    ]);
    assert_eq!(
        read.at_most("dispatch.cost_ceiling_usd", pick, None)
            .unwrap()
            .value,
        1.0
    );
    let refusal = &read.refusals()[0];
    assert_eq!(refusal.field, "dispatch.cost_ceiling_usd");
    assert!(
        refusal.why.contains("/layer0/stet.toml:2"),
        "{}",
        refusal.why
    );
}

#[test]
fn protected_paths_from_a_repository_file_add_and_the_users_replace() {
    let pick: Pick<Vec<String>> = |s| &s.review.protected_paths;
    let mut read = layers(&[("[review]\nprotected_paths = [\"docs/**\"]\n", REPO)]);
    let lists = read.adds("review.protected_paths", pick);
    assert!(lists.base.is_none(), "the default stays");
    assert_eq!(lists.added[0].value, ["docs/**"]);

    let mut read = layers(&[
        ("[review]\nprotected_paths = [\"ci/**\"]\n", USER),
        ("[review]\nprotected_paths = []\n", TRUSTED),
    ]);
    let lists = read.adds("review.protected_paths", pick);
    assert_eq!(lists.base.unwrap().value, ["ci/**"]);
    assert_eq!(lists.added.len(), 1);
    assert!(
        lists.added[0].value.is_empty(),
        "an empty list adds nothing"
    );
    assert!(read.refusals().is_empty());
}

#[test]
fn the_network_only_stays_off_from_an_untrusted_file() {
    let pick: Pick<bool> = |s| &s.dispatch.allow_network;
    let mut read = layers(&[
        ("[dispatch]\nallow_network = true\n", USER),
        ("[dispatch]\nallow_network = false\n", REPO),
    ]);
    let found = read.stays_off("dispatch.allow_network", Reason::Network, pick);
    assert!(!found.unwrap().value, "the repository turned it off");
    assert!(read.refusals().is_empty());

    let mut read = layers(&[("[dispatch]\nallow_network = true\n", REPO)]);
    assert!(
        read.stays_off("dispatch.allow_network", Reason::Network, pick)
            .is_none()
    );
    assert_eq!(read.refusals()[0].line, 2);
}

#[test]
fn a_free_setting_comes_from_the_highest_layer() {
    let mut read = layers(&[
        ("[harness.script]\npace = 0.5\n", USER),
        ("[harness.script]\npace = 3\n", REPO),
    ]);
    let pace = read.free("harness.script.pace", |s| &s.harness.script.pace);
    assert_eq!(pace.unwrap().value, 3.0);
    assert_eq!(
        read.catalog(),
        [("harness.script.pace", Class::Project(Rule::Free))]
    );
}
