//! The example programs run as tests, so that they keep working: each is included as a module
//! and its body called (their `main`s read the command line, which here is the test
//! harness's).

#[allow(dead_code)] // The examples' `main`s are not called here.
#[path = "../examples/embedded.rs"]
mod embedded;

#[allow(dead_code)]
#[path = "../examples/client_server.rs"]
mod client_server;

/// The second run finds the bank the first one made, and both keep its total (the example
/// asserts it).
#[test]
fn the_embedded_example_runs_twice_on_one_database() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bank.db");
    embedded::run(&path).unwrap();
    embedded::run(&path).unwrap();
}

/// Two clients over loopback TCP; every increment is counted once (the example asserts it).
#[test]
fn the_client_server_example_runs() {
    client_server::run().unwrap();
}
