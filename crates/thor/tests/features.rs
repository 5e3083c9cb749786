//! The `embedded` feature: without it the facade is a client alone.

/// `cargo tree` of the facade as a client-only program depends on it (no default features):
/// it links the client and its TCP transport, never the engine, its storage or tokio.
#[test]
fn without_embedded_the_facade_does_not_link_the_server() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--offline", "-p", "thor", "--no-default-features", "-e", "normal"])
        .args(["--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.contains("thor-client") && tree.contains("thor-net"), "{tree}");
    for server_side in ["thor-server", "thor-storage", "tokio"] {
        assert!(!tree.contains(server_side), "a client-only build links {server_side}:\n{tree}");
    }
}
