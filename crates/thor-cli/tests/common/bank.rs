//! The bank that `thor bench transfer-client` keeps, as tests drive and audit it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};

use thor_client::{Session, SessionConfig};
use thor_net::{ClientConfig, TcpTransport};

use super::thor;

thor_client::class! {
    /// As `thor bench transfer-client` stores it.
    pub class Account("bench.Account") {
        balance: u64,
        version: u64,
    }
}

thor_client::class! {
    pub class Accounts("bench.Accounts") {}
    var refs<Account>;
}

thor_client::class! {
    pub class Bank("bench.Bank") {}
    var refs<Accounts>;
}

/// `thor bench transfer-client` against `addr` as client `id`, recording its history in
/// `history`, with `extra` arguments.
pub fn transfer_client(addr: SocketAddr, id: u32, history: &Path, extra: &[&str]) -> Child {
    thor()
        .args(["bench", "transfer-client", "--connect", &addr.to_string()])
        .args(["--client", &id.to_string(), "--history"])
        .arg(history)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a client process and fails the test, with its log, if it failed; returns its log.
pub fn finish(c: Child) -> String {
    let out = c.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "a client failed ({}):\n{log}", out.status);
    log
}

/// Every account's `(oref, balance, version)` as the server at `addr` has it, read in a new
/// session.
pub fn accounts(addr: SocketAddr) -> Vec<(u64, u64, u64)> {
    let cfg = ClientConfig { client_name: "audit".into(), ..ClientConfig::default() };
    let t = TcpTransport::connect(addr, &cfg).unwrap();
    let s = Session::new(Box::new(t), SessionConfig::default()).unwrap();
    let bank = s.get(s.root::<Bank>(0).unwrap()).unwrap();
    let mut out = Vec::new();
    for c in 0..bank.var_len() {
        let chunk = s.get(bank.var_ref(c)).unwrap();
        for i in 0..chunk.var_len() {
            let r = chunk.var_ref(i);
            let a = s.get(r).unwrap();
            let oref = u64::from(r.oref().unwrap().raw());
            out.push((oref, a.get(Account::balance), a.get(Account::version)));
        }
    }
    out
}
