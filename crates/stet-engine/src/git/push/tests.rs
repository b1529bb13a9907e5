//! Unit tests of `crate::git::push`, in a file of their own so the module reads as code.

use super::*;

#[test]
fn the_error_stays_small_enough_to_return_by_value() {
    // `ForgeError` wraps it, and clippy's `result_large_err` starts at 128 bytes.
    assert!(std::mem::size_of::<PushError>() < 128);
}

#[test]
fn accepts_https_loopback_http_and_local_paths() {
    for url in [
        "https://github.com/octo/app.git",
        "HTTPS://github.com/octo/app",
        "https://git.example.test:8443/octo/app.git",
        "https://[2001:db8::1]/octo/app.git",
        "http://127.0.0.1:9000/octo/app.git",
        "http://127.5.6.7/octo/app.git",
        "http://localhost/octo/app.git",
        "http://LOCALHOST:80/octo/app.git",
        "http://[::1]:9000/octo/app.git",
        "http://[::ffff:127.0.0.1]/octo/app.git",
        "/srv/git/app.git",
        "/srv/git/app@2.git",
        "file:///srv/git/app.git",
    ] {
        assert!(check_url(url).is_ok(), "{url}: {:?}", check_url(url));
    }
}

#[test]
fn refuses_userinfo_without_echoing_it() {
    for (url, hidden) in [
        (
            "https://x-access-token:hunter-two@github.com/o/r",
            "hunter-two",
        ),
        ("https://someone@github.com/o/r", "someone"),
        ("https://:only-a-password@github.com/o/r", "only-a-password"),
        ("http://u:pass/word@127.0.0.1/o/r", "pass/word"),
        ("http://127.0.0.1\\@evil.example/o/r", "127.0.0.1\\"),
        ("https://user:pw%40x@[::1]/o/r", "pw%40x"),
        ("ssh://git@github.com/o/r", "git@"),
    ] {
        let err = check_url(url).unwrap_err();
        assert!(matches!(err, PushError::UrlUserinfo { .. }), "{url}: {err}");
        let text = err.to_string();
        assert!(!text.contains(hidden), "{text}");
        assert!(text.contains(WITHHELD_USERINFO), "{text}");
    }
}

#[test]
fn refuses_plain_http_beyond_loopback() {
    for url in [
        "http://github.com/o/r",
        "http://10.0.0.1/o/r",
        "http://192.0.2.1:8080/o/r",
        "http://127.0.0.1.evil.example/o/r",
        "http://localhost.evil.example/o/r",
        "http://2130706433/o/r",
        "http://[::2]/o/r",
        "http://[::ffff:10.0.0.1]/o/r",
    ] {
        assert!(
            matches!(check_url(url), Err(PushError::InsecureUrl { .. })),
            "{url}: {:?}",
            check_url(url)
        );
    }
}

#[test]
fn refuses_other_schemes_hosts_and_malformed_authorities() {
    for url in [
        "ssh://github.com/o/r",
        "git://github.com/o/r",
        "ftp://127.0.0.1/o/r",
        "github.com:o/r.git",
        "git@github.com:o/r.git",
        "relative/path.git",
        "",
        "file://server/srv/app.git",
        "https:///o/r",
        "https://:443/o/r",
        "https://github.com:/o/r",
        "https://github.com:https/o/r",
        "https://github.com:123456/o/r",
        "https://exa%6dple.com/o/r",
        "https://[::1/o/r",
        "https://[not-v6]/o/r",
        "https://[::1]x/o/r",
        "https://github.com/o/r .git",
        "https://github.com/o/r\n.git",
    ] {
        assert!(
            matches!(check_url(url), Err(PushError::UnsupportedUrl { .. })),
            "{url:?}: {:?}",
            check_url(url)
        );
    }
}

#[test]
fn shorthand_userinfo_is_withheld_too() {
    let err = check_url("deploy:hunter-two@github.com:o/r.git").unwrap_err();
    assert!(!err.to_string().contains("hunter-two"), "{err}");
    assert_eq!(
        withhold_userinfo("/srv/git/app@2.git"),
        "/srv/git/app@2.git"
    );
}

#[test]
fn an_invalid_branch_is_refused_before_the_repository_is_opened() {
    let commit = CommitSha::parse("0123456789abcdef0123456789abcdef01234567").unwrap();
    for branch in ["a..b", "", "x/", "a b", "refs/../x"] {
        let err = push(&PushRequest {
            repository: Path::new("/nonexistent/stet-push-test"),
            url: "https://github.invalid/o/r.git",
            commit: &commit,
            branch,
            credential: None,
        })
        .unwrap_err();
        assert!(
            matches!(err, PushError::InvalidBranch { .. }),
            "{branch:?}: {err}"
        );
    }
}

#[test]
fn a_url_rewritten_by_the_repository_configuration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let repository = Repository::init(dir.path()).unwrap();
    let mut config = repository.config().unwrap();
    config
        .set_str(
            "url.http://10.0.0.1/.insteadOf",
            "https://forge.example.test/",
        )
        .unwrap();
    config
        .set_str(
            "url.http://10.0.0.2/.pushInsteadOf",
            "https://push.example.test/",
        )
        .unwrap();
    for url in [
        "https://forge.example.test/o/r.git",
        "https://push.example.test/o/r.git",
    ] {
        let err = anonymous_remote(&repository, url).err().unwrap();
        assert!(
            matches!(err, PushError::UrlRewritten { .. }),
            "{url}: {err}"
        );
    }
    assert!(anonymous_remote(&repository, "https://other.example.test/o/r.git").is_ok());
    let err = remote_refs(dir.path(), "https://forge.example.test/o/r.git", None).unwrap_err();
    assert!(matches!(err, PushError::UrlRewritten { .. }), "{err}");
    assert!(repository.remotes().unwrap().is_empty());
}

#[test]
fn remote_messages_keep_the_last_state_of_each_line_without_control_characters() {
    assert_eq!(
        remote_lines("Resolving deltas:  50%\rResolving deltas: 100%\n\nfrozen\u{1b}[31m!\n"),
        "Resolving deltas: 100% | frozen!"
    );
    let long = "x".repeat(3 * MAX_REMOTE_MESSAGE_BYTES);
    let kept = remote_lines(&format!("{long}\nthe reason\n"));
    assert!(kept.ends_with("the reason"), "{kept}");
    assert!(kept.len() <= MAX_REMOTE_MESSAGE_BYTES + '…'.len_utf8());
}

#[test]
fn the_remote_message_buffer_stays_bounded() {
    let exchange = Exchange::new(
        None,
        &Route {
            url: "/srv/git/app.git",
            guard: None,
        },
    );
    for _ in 0..100 {
        exchange.record_remote_message("é".repeat(1000).as_bytes());
    }
    exchange.record_remote_message(b"\nlast words\n");
    let kept = exchange.remote_messages.borrow().clone();
    assert!(kept.len() <= 4 * MAX_REMOTE_MESSAGE_BYTES, "{}", kept.len());
    assert!(kept.ends_with("last words\n"));
}
