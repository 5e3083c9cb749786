//! Errors print each cause once, however an application prints them: `{}`, a loop over
//! `source()` (what anyhow's `{:#}` and `Report`-style printers do), or both.

use std::error::Error as _;

/// `e` as a loop over `source()` prints it: each error's message, joined by ": ".
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(s) = next {
        parts.push(s.to_string());
        next = s.source();
    }
    parts.join(": ")
}

fn assert_once(e: &(dyn std::error::Error + 'static), cause: &str) {
    for (how, text) in [("Display", e.to_string()), ("source() chain", chain(e))] {
        assert_eq!(text.matches(cause).count(), 1, "{how} prints {cause:?} once: {text}");
    }
}

#[test]
fn error_chain_prints_each_cause_once() {
    // Nothing listens on a port the system just gave back.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = thor::SessionConfig {
        reconnect: thor::ReconnectConfig {
            give_up_after: std::time::Duration::ZERO,
            ..thor::ReconnectConfig::default()
        },
        ..thor::SessionConfig::default()
    };
    let err = thor::connect_with(("127.0.0.1", port), "", cfg).unwrap_err();
    assert!(matches!(err, thor::Error::Connect { .. }), "{err:?}");
    assert_once(&err, "refused");
    assert_once(&err, &format!("127.0.0.1:{port}"));

    // A session error wrapped by the facade: a transport error inside a client error.
    let io = std::io::Error::other("the disk caught fire");
    let client = thor::ClientError::from(thor::TransportError::from(io));
    assert_once(&client, "the disk caught fire");
    let facade = thor::Error::from(client);
    assert_once(&facade, "the disk caught fire");

    // An embedded open that fails in the storage layer: the directory is a file's child.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let err = thor::open(file.join("db")).unwrap_err();
    let text = err.to_string();
    assert!(!text.is_empty());
    // Whatever the layers, no message repeats in the chain.
    let parts: Vec<String> = {
        let mut v = vec![err.to_string()];
        let mut next = err.source();
        while let Some(s) = next {
            v.push(s.to_string());
            next = s.source();
        }
        v
    };
    for (i, a) in parts.iter().enumerate() {
        for b in &parts[i + 1..] {
            assert!(!a.contains(b.as_str()), "{a:?} repeats its cause {b:?}");
        }
    }
}
