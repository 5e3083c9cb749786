//! Fixtures shared by the tests that run `thor server` as a real process.
#![allow(dead_code)]

pub mod bank;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStderr, Command, Stdio};

/// The `thor` binary under test.
pub fn thor() -> Command {
    Command::new(env!("CARGO_BIN_EXE_thor"))
}

/// A `thor server` process, killed and reaped when dropped (also when a test fails).
pub struct ServerProcess(pub Child);

impl ServerProcess {
    /// SIGKILL: the server gets no chance to flush or say goodbye.
    pub fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    /// SIGTERM, expecting a clean exit; returns the rest of the log.
    pub fn stop(mut self, mut log: BufReader<ChildStderr>) -> String {
        let status =
            Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status().unwrap();
        assert!(status.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut log, &mut rest).unwrap();
        let code = self.0.wait().unwrap();
        assert!(code.success(), "exit status {code}; log:\n{rest}");
        rest
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Starts `thor server --dir DIR --listen 127.0.0.1:0 EXTRA...` with `THOR_TOKEN` set to
/// `token` (or unset) and returns it with the address it logged and the rest of its log.
pub fn start(
    dir: &std::path::Path,
    extra: &[&str],
    token: Option<&str>,
) -> (ServerProcess, SocketAddr, BufReader<ChildStderr>) {
    let mut cmd = thor();
    cmd.args(["server", "--dir"]).arg(dir).args(["--listen", "127.0.0.1:0"]).args(extra);
    match token {
        Some(t) => cmd.env("THOR_TOKEN", t),
        None => cmd.env_remove("THOR_TOKEN"),
    };
    spawn_server(cmd, |_| {})
}

/// Spawns `cmd`, a `thor server` command, and waits until it logs that it listens, showing
/// `seen` every log line before that one; returns it with the address it logged and the rest
/// of its log.
pub fn spawn_server(
    mut cmd: Command,
    mut seen: impl FnMut(&str),
) -> (ServerProcess, SocketAddr, BufReader<ChildStderr>) {
    let mut server = ServerProcess(cmd.stderr(Stdio::piped()).spawn().unwrap());
    let mut log = BufReader::new(server.0.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "the server exited before listening");
        if let Some(rest) = line.split("listening on ").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().parse().unwrap();
            return (server, addr, log);
        }
        seen(&line);
    }
}

/// Drains the rest of a server's log on a thread, so the server never blocks writing it.
pub fn drain(mut log: BufReader<ChildStderr>) {
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
}

/// A free loopback port (bound and released: a server started right after gets it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `thor server --dir DIR --listen ADDR --create` on a fixed address (a restarted server
/// must be found where its clients look) and waits until it listens.
pub fn start_at(dir: &std::path::Path, addr: SocketAddr) -> ServerProcess {
    start_at_with(dir, addr, &[])
}

/// [`start_at`] with more arguments for `thor server` (a commit mode, say).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn start_at_with(dir: &std::path::Path, addr: SocketAddr, extra: &[&str]) -> ServerProcess {
    let mut cmd = thor();
    cmd.args(["server", "--create", "--dir"]).arg(dir).arg("--listen").arg(addr.to_string());
    cmd.args(extra);
    cmd.env_remove("THOR_TOKEN");
    let (server, _, log) = spawn_server(cmd, |_| {});
    drain(log);
    server
}
