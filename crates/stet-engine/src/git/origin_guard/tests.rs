//! Unit tests of `crate::git::origin_guard`: how origins compare and where a redirect may lead.

use super::*;

#[test]
fn origins_compare_scheme_host_and_port_whole() {
    let of = |url: &str| Origin::of(url).unwrap();
    assert_eq!(of("https://GitHub.com/o/r"), of("https://github.com:443/x"));
    assert_eq!(of("http://127.0.0.1/o"), of("http://127.0.0.1:80/p"));
    assert_ne!(of("https://github.com"), of("http://github.com"));
    assert_ne!(of("https://github.com"), of("https://github.com:8443"));
    assert_ne!(of("http://127.0.0.1:9000"), of("http://localhost:9000"));
    assert_ne!(of("https://github.com"), of("https://github.com.evil"));
    assert_eq!(
        of("https://user:secret@github.com/o").to_string(),
        "https://github.com:443"
    );
    for url in ["ftp://host/x", "/srv/git", "file:///srv/git", "not a url"] {
        assert!(Origin::of(url).is_none(), "{url}");
    }
}

#[test]
fn a_redirect_stays_only_within_the_checked_origin() {
    let guard = OriginGuard::start("http://127.0.0.1:9/octo/app.git").unwrap();
    let shared = &guard.shared;
    let base = shared.local_base.clone();
    assert_eq!(
        within(shared, "/octo/moved.git/info/refs?service=git-upload-pack"),
        Ok(format!(
            "{base}/octo/moved.git/info/refs?service=git-upload-pack"
        ))
    );
    assert_eq!(
        within(shared, "http://127.0.0.1:9/octo/moved.git"),
        Ok(format!("{base}/octo/moved.git"))
    );
    assert_eq!(
        within(shared, "//127.0.0.1:9/octo/moved.git"),
        Ok(format!("{base}/octo/moved.git"))
    );
    for (location, to) in [
        ("http://127.0.0.1:10/octo/app.git", "http://127.0.0.1:10"),
        ("http://localhost:9/octo/app.git", "http://localhost:9"),
        ("https://127.0.0.1:9/octo/app.git", "https://127.0.0.1:9"),
        ("//evil.example/x", "http://evil.example:80"),
        (
            "http://x-access-token:secret@127.0.0.1:10/",
            "http://127.0.0.1:10",
        ),
    ] {
        assert_eq!(within(shared, location), Err(to.to_owned()), "{location}");
    }
    let unreadable = within(shared, "ftp://user:secret@elsewhere/x").unwrap_err();
    assert!(!unreadable.contains("secret"), "{unreadable}");
}

#[test]
fn the_local_url_keeps_the_checked_path_behind_a_private_prefix() {
    let guard = OriginGuard::start("https://github.com/octo/app.git").unwrap();
    let local = guard.local_url();
    assert!(local.starts_with("http://127.0.0.1:"), "{local}");
    assert!(local.ends_with("/octo/app.git"), "{local}");
    assert_eq!(guard.origin().to_string(), "https://github.com:443");
    assert_eq!(
        Origin::of(&local).as_ref(),
        Some(guard.local_origin()),
        "{local}"
    );
    assert_eq!(
        guard.unmask(&format!("failed to reach {local}")),
        "failed to reach https://github.com:443/octo/app.git"
    );
    assert!(OriginGuard::start("/srv/git/app.git").is_err());
}
