//! `thor server --tls-cert --tls-key [--tls-client-ca]` as a real process: it serves TLS with
//! the certificate given, requires client certificates when told to, and refuses a key
//! without a certificate or a certificate file without one.

mod common;

use std::path::Path;
use std::time::Duration;

use common::thor;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use thor_core::PageId;
use thor_net::{ClientConfig, TlsClient, TlsTransport};
use thor_wire::{ReplyBody, Request, RequestBody, Transport};

/// Writes a CA to `dir/NAME-ca.pem` and returns it.
fn ca(dir: &Path, name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join(format!("{name}-ca.pem")), ca.pem()).unwrap();
    ca
}

/// Writes a certificate for `names` signed by `ca` to `dir/NAME.pem` and its key to
/// `dir/NAME.key`.
fn issue(dir: &Path, name: &str, names: &[&str], ca: &CertifiedIssuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let cert = CertificateParams::new(names).unwrap().signed_by(&key, ca).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

fn config() -> ClientConfig {
    ClientConfig { io_timeout: Some(Duration::from_secs(20)), ..ClientConfig::default() }
}

#[test]
fn thor_server_serves_tls_and_checks_client_certificates() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    let server_ca = ca(p, "server");
    let client_ca = ca(p, "client");
    issue(p, "server", &["127.0.0.1"], &server_ca);
    issue(p, "alice", &["alice.example"], &client_ca);
    let path = |f: &str| p.join(f).to_str().unwrap().to_owned();
    let (cert, key, cca) = (path("server.pem"), path("server.key"), path("client-ca.pem"));
    let args = ["--create", "--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &cca];
    let mut cmd = thor();
    cmd.args(["server", "--dir"]).arg(p.join("db")).args(["--listen", "127.0.0.1:0"]);
    cmd.args(args).env_remove("THOR_TOKEN");
    let (proc, addr, err) = common::spawn_server(cmd, |_| {});
    let addr = addr.to_string();
    let ca_file = p.join("server-ca.pem");
    // Without a client certificate: refused.
    let anonymous = TlsClient::from_ca_file(&ca_file).unwrap();
    assert!(TlsTransport::connect(&addr, &config(), &anonymous).is_err());
    // With Alice's: served.
    let alice =
        TlsClient::with_identity_files(&ca_file, &p.join("alice.pem"), &p.join("alice.key"))
            .unwrap();
    let mut t = TlsTransport::connect(&addr, &config(), &alice).unwrap();
    let r = t.round_trip(&Request::new(RequestBody::Fetch { page: PageId::FIRST })).unwrap();
    assert!(matches!(r.body, ReplyBody::Page { .. }), "{r:?}");
    drop(t);
    let log = proc.stop(err);
    assert!(log.contains("TLS handshake failed"), "the refused client is logged: {log}");
}

#[test]
fn a_tls_key_needs_a_certificate_and_a_bad_certificate_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    let server_ca = ca(p, "server");
    issue(p, "server", &["127.0.0.1"], &server_ca);
    let key = p.join("server.key").to_str().unwrap().to_owned();
    // A key alone is refused by the argument parser, before anything is created.
    let out = thor()
        .args(["server", "--dir"])
        .arg(p.join("other"))
        .args(["--create", "--listen", "127.0.0.1:0", "--tls-key", &key])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert"));
    assert!(!p.join("other").exists());
    // A certificate file that holds no certificate is an error naming the flags, and nothing
    // is created either.
    let out = thor()
        .args(["server", "--dir"])
        .arg(p.join("other"))
        .args(["--create", "--listen", "127.0.0.1:0", "--tls-cert", &key, "--tls-key", &key])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("--tls-cert") && msg.contains("no PEM certificate"), "{msg}");
    assert!(!p.join("other").exists());
}
