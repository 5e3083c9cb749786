//! Watching a server: `thor stats ADDR` prints its counters, and `thor server --metrics-listen`
//! serves them to Prometheus.
//!
//! Both read the same `ServerStats` (the engine's counters, concurrency control's, the
//! sessions'), so a counter added to the server shows up in both without code here. In the
//! Prometheus text format every counter is `thor_<name>`: a monotonic count gets the
//! `_total` suffix and type `counter`; a level ("... now"), a ratio or a position (checkpoint,
//! pages allocated) is a `gauge`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use thor_client::{Session, SessionConfig};
use thor_net::{ClientConfig, TcpTransport};
use thor_server::Engine;
use thor_wire::stats::{ServerStats, StatValue};
use tracing::{debug, warn};

/// Options of `thor stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The server's address.
    addr: SocketAddr,
    /// The server's token (as `thor server` was given it).
    #[arg(long, default_value = "")]
    token: String,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print the Prometheus text format (what `--metrics-listen` serves).
    #[arg(long)]
    prometheus: bool,
}

pub fn run(a: StatsArgs) -> Result<()> {
    let cfg = ClientConfig {
        client_name: "thor stats".into(),
        token: a.token.into_bytes(),
        ..ClientConfig::default()
    };
    let t =
        TcpTransport::connect(a.addr, &cfg).with_context(|| format!("connecting to {}", a.addr))?;
    let s = Session::new(Box::new(t), SessionConfig::default())?;
    let stats = s.server_stats()?;
    let _ = s.close();
    if a.prometheus {
        print!("{}", prometheus_text(&stats));
    } else if a.json {
        let map: serde_json::Map<String, serde_json::Value> = stats
            .iter()
            .map(|(name, v)| {
                let v = match v {
                    StatValue::Count(n) => serde_json::Value::from(n),
                    StatValue::Ratio(r) => serde_json::Value::from(r),
                };
                (name.to_string(), v)
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&map)?);
    } else {
        for ((name, v), help) in stats.iter().zip(ServerStats::HELP) {
            let v = match v {
                StatValue::Count(n) => n.to_string(),
                StatValue::Ratio(r) => format!("{r:.3}"),
            };
            println!("{name:<28} {v:>16}  {help}");
        }
    }
    Ok(())
}

/// Whether a counter is a level rather than a running count.
fn is_gauge(name: &str, help: &str, v: StatValue) -> bool {
    matches!(v, StatValue::Ratio(_))
        || help.contains(" now")
        || matches!(name, "checkpoint" | "pages_allocated")
}

/// The counters in the Prometheus text exposition format (version 0.0.4).
pub fn prometheus_text(stats: &ServerStats) -> String {
    let mut out = String::new();
    for ((name, v), help) in stats.iter().zip(ServerStats::HELP) {
        let gauge = is_gauge(name, help, v);
        let metric = if gauge { format!("thor_{name}") } else { format!("thor_{name}_total") };
        let kind = if gauge { "gauge" } else { "counter" };
        // HELP text escapes backslashes and newlines.
        let help = help.replace('\\', "\\\\").replace('\n', " ");
        out.push_str(&format!("# HELP {metric} {help}\n# TYPE {metric} {kind}\n"));
        match v {
            StatValue::Count(n) => out.push_str(&format!("{metric} {n}\n")),
            StatValue::Ratio(r) => out.push_str(&format!("{metric} {r}\n")),
        }
    }
    out
}

/// The largest request head the metrics endpoint reads (a scraper sends a few hundred bytes).
const REQUEST_HEAD_MAX: usize = 8 << 10;
/// How long the endpoint waits for a scraper to send or take its bytes.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `GET /metrics` on `listener` from `engine`'s counters, one request per connection,
/// one connection at a time (a scraper every few seconds is the load this is for), on a thread
/// of its own that ends with the process.
pub fn serve_metrics(listener: TcpListener, engine: Arc<Engine>) {
    std::thread::Builder::new()
        .name("thor-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(c) => {
                        if let Err(e) = answer(c, &engine) {
                            debug!("metrics request: {e}");
                        }
                    }
                    Err(e) => warn!("metrics endpoint: accepting failed: {e}"),
                }
            }
        })
        .expect("spawning the metrics thread");
}

fn answer(mut c: TcpStream, engine: &Engine) -> std::io::Result<()> {
    c.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    c.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= REQUEST_HEAD_MAX {
            return respond(&mut c, "431 Request Header Fields Too Large", "text/plain", "");
        }
        let n = c.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    match (words.next(), words.next()) {
        (Some(b"GET"), Some(b"/metrics")) => {
            let body = prometheus_text(&engine.server_stats());
            respond(&mut c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", &body)
        }
        (Some(b"GET"), _) => respond(&mut c, "404 Not Found", "text/plain", "try /metrics\n"),
        _ => respond(&mut c, "405 Method Not Allowed", "text/plain", ""),
    }
}

fn respond(c: &mut TcpStream, status: &str, kind: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes())?;
    c.write_all(body.as_bytes())?;
    c.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_totals_and_levels_are_gauges() {
        let s = ServerStats {
            commits: 7,
            mob_bytes: 4096,
            commits_per_fsync: 2.5,
            ..Default::default()
        };
        let text = prometheus_text(&s);
        assert!(
            text.contains("# TYPE thor_commits_total counter\nthor_commits_total 7\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE thor_mob_bytes gauge\nthor_mob_bytes 4096\n"), "{text}");
        assert!(text.contains("thor_commits_per_fsync 2.5\n"), "{text}");
        assert!(text.contains("# HELP thor_commits_total Commits acknowledged.\n"), "{text}");
        // Every counter appears once, with help and type.
        assert_eq!(text.matches("# TYPE ").count(), ServerStats::FIELDS.len());
    }
}
