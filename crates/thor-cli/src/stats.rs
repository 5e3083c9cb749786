//! Watching a server: `thor stats ADDR` prints its counters, and `thor server --metrics-listen`
//! serves them to Prometheus, with a health check for load balancers.
//!
//! Both read the same `ServerStats` (the engine's counters, concurrency control's, the
//! sessions', and the engine's health, uptime, version and file sizes), so a counter added to
//! the server shows up in both without code here.
//!
//! # `thor stats`
//!
//! `ADDR` is `HOST:PORT` (a name or an address) or `unix:PATH`, or a replica group's
//! replicas, `R=HOST:PORT,R=HOST:PORT,...` (`thor_client::group`): then the group's leader
//! answers (give one replica's address for that replica's own counters); the token comes from
//! `--token` or `THOR_TOKEN`, as for `thor server`. The table starts with the server's
//! version, uptime, health and database size, then lists the counters, leaving out those of
//! modes the server does not run (page-based commit counters under the `obj` commit mode, the
//! WPL ones under any other mode, demotion counters with an inclusive page cache, two-phase
//! commit counters on a server that never took part in one); `--all` shows every counter,
//! and `--json` and `--prometheus` always carry all of them.
//!
//! # Metrics names
//!
//! The Prometheus text is rendered by `metrics-exporter-prometheus` from the `metrics` facade:
//! each counter of `ServerStats` is `thor_<name>`, with the `_total` suffix and type `counter`
//! if it counts events, type `gauge` if it is a level ("... now"), a ratio, a position
//! (checkpoint, pages allocated) or a setting. On top of them:
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `thor_build_info{version}` | gauge | 1, labelled with the server's version |
//! | `thor_up` | gauge | 1 while the server serves (health 0), 0 otherwise |
//! | `thor_commit_aborts_total{cause}` | counter | commits refused by concurrency control, by cause (`stale`, `threshold`, `rule1`, `rule2a`, `rule2b`, `wpl_page_rule`) |
//! | `thor_mob_fill_ratio` | gauge | MOB bytes over the MOB's budget |
//! | `thor_commit_seconds` | histogram | a commit's time in the server, from request to answer (the engine records it) |
//! | `thor_fetch_seconds` | histogram | a fetch's service time in the network driver |
//!
//! The two histograms exist only on `thor server --metrics-listen` (they are recorded as the
//! server works, not read from `ServerStats`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use thor_client::{Session, SessionConfig};
use thor_net::{ClientConfig, TcpTransport, UnixTransport};
use thor_server::Engine;
use thor_wire::stats::{HEALTH_FAILED, HEALTH_READ_ONLY, ServerStats, StatValue, version_text};
use thor_wire::{CommitMode, Transport};
use tracing::{debug, warn};

/// Options of `thor stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The server's address: HOST:PORT, or unix:PATH for a Unix-domain socket; or a replica
    /// group, R=HOST:PORT,R=HOST:PORT,... (its leader answers).
    addr: String,
    /// The server's token (as `thor server` was given it; default: $THOR_TOKEN, else none).
    #[arg(long)]
    token: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print the Prometheus text format (what `--metrics-listen` serves).
    #[arg(long)]
    prometheus: bool,
    /// Show every counter, also those of modes the server does not run.
    #[arg(long)]
    all: bool,
}

/// A session with `addr`: `unix:PATH` or `HOST:PORT` (names resolved), or a replica group
/// `R=HOST:PORT,...`, whose leader the session finds (`thor_client::group`).
pub fn connect(addr: &str, token: &str, client_name: &str) -> Result<Session> {
    let cfg = ClientConfig {
        client_name: client_name.into(),
        token: token.as_bytes().to_vec(),
        ..ClientConfig::default()
    };
    if let thor_client::ServerAddr::Group(replicas) =
        thor_client::ServerAddr::parse(addr).map_err(|why| anyhow::anyhow!("{addr}: {why}"))?
    {
        let replicas = replicas
            .into_iter()
            .map(|(id, at)| {
                let cfg = cfg.clone();
                let dial: thor_client::ReplicaDialer = Box::new(move || {
                    Ok(Box::new(TcpTransport::connect(at.as_str(), &cfg)?) as Box<dyn Transport>)
                });
                thor_client::Replica { id, dial }
            })
            .collect();
        let group = thor_client::GroupDialer::new(replicas)?;
        return Session::connect_group(group, SessionConfig::default())
            .with_context(|| format!("connecting to the leader of {addr}"));
    }
    let t: Box<dyn Transport> = match addr.strip_prefix("unix:") {
        Some(path) => Box::new(
            UnixTransport::connect(path, &cfg).with_context(|| format!("connecting to {addr}"))?,
        ),
        None => Box::new(
            TcpTransport::connect(addr, &cfg).with_context(|| format!("connecting to {addr}"))?,
        ),
    };
    Ok(Session::new(t, SessionConfig::default())?)
}

/// `--token`, else `THOR_TOKEN`, else none: what `thor server` reads.
pub fn token_or_env(token: Option<String>) -> String {
    token.or_else(|| std::env::var("THOR_TOKEN").ok()).unwrap_or_default()
}

pub fn run(a: StatsArgs) -> Result<()> {
    let s = connect(&a.addr, &token_or_env(a.token), "thor stats")?;
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
        print!("{}", table(&stats, a.all));
    }
    Ok(())
}

/// The summary lines and the counters, as `thor stats` prints them.
fn table(stats: &ServerStats, all: bool) -> String {
    let mut out = String::new();
    let health = match stats.health {
        HEALTH_FAILED => {
            "FAILED: its storage failed; it refuses commits and new sessions \
                          (see its log; restart it once the disk is repaired)"
        }
        HEALTH_READ_ONLY => "read-only",
        _ => "serving",
    };
    let mode = CommitMode::from_code(stats.commit_mode as u8).map_or("?", |m| m.name());
    out.push_str(&format!(
        "server {} up {}, {health}\ndatabase {:.1} MB on disk ({:.1} MB of log), commit mode {mode}, \
         {} page cache\n\n",
        version_text(stats.server_version),
        uptime(stats.uptime_s),
        stats.database_bytes as f64 / 1e6,
        stats.log_disk_bytes as f64 / 1e6,
        if stats.page_cache_exclusive == 1 { "exclusive" } else { "inclusive" },
    ));
    out.push_str(&contention(stats));
    let mut hidden = 0;
    for ((name, v), help) in stats.iter().zip(ServerStats::HELP) {
        if !all && !shown(stats, name) {
            hidden += 1;
            continue;
        }
        let v = match v {
            StatValue::Count(n) => n.to_string(),
            StatValue::Ratio(r) => format!("{r:.3}"),
        };
        out.push_str(&format!("{name:<28} {v:>16}  {help}\n"));
    }
    if hidden > 0 {
        out.push_str(&format!(
            "({hidden} counters of modes this server does not run hidden; --all shows them)\n"
        ));
    }
    out
}

/// The contention summary: conflicts by cause, the server's refusals and the aborts clients
/// found themselves (which they report, protocol version 6), the retries, and what fair
/// retries did.
fn contention(s: &ServerStats) -> String {
    let refused: u64 = aborts(s).iter().map(|(_, n)| n).sum();
    let causes: Vec<String> =
        aborts(s).iter().filter(|(_, n)| *n > 0).map(|(c, n)| format!("{c} {n}")).collect();
    let causes =
        if causes.is_empty() { String::new() } else { format!(" ({})", causes.join(", ")) };
    format!(
        "conflicts: {refused} commits refused{causes}, {} transactions aborted at clients by \
         invalidations, {} retries\nfair retries: {} claims ({} expired unused), {} commits \
         held back ({} until their wait ran out)\nmap leaves merged: {} ({} commits with \
         leaf deltas refused)\n\n",
        s.client_invalidation_aborts,
        s.client_retries,
        s.fair_claims,
        s.fair_claims_expired,
        s.fair_held,
        s.fair_held_timed_out,
        s.leaf_merges,
        s.leaf_merges_refused,
    )
}

/// `3d 4h 5m 6s`, leaving out the leading zero units.
fn uptime(s: u64) -> String {
    let (d, h, m, s) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m {s}s"),
        _ => format!("{d}d {h}h {m}m {s}s"),
    }
}

/// Whether `thor stats` shows counter `name` without `--all`: not if it belongs to a mode the
/// server does not run.
fn shown(s: &ServerStats, name: &str) -> bool {
    let obj = s.commit_mode == u64::from(CommitMode::Obj.code());
    let wpl = s.commit_mode == u64::from(CommitMode::Wpl.code());
    let twopc_seen = s.twopc_prepared
        + s.twopc_read_only
        + s.twopc_decided_commit
        + s.twopc_decided_abort
        + s.twopc_parts_committed
        + s.twopc_parts_aborted
        + s.twopc_in_doubt
        + s.twopc_coordinating
        + s.twopc_presumed_aborts
        > 0;
    if name.starts_with("wpl_") {
        return wpl;
    }
    match name {
        "page_commits" | "page_records" | "page_records_early" | "page_record_bytes"
        | "pages_shipped" | "redo_reads" | "pages_early" => !obj,
        "demotions_reordered"
        | "demotions_stored"
        | "demote_notices"
        | "demotions_wanted"
        | "demotions_refused"
        | "demoted_bytes" => s.page_cache_exclusive == 1,
        n if n.starts_with("twopc_") => twopc_seen,
        _ => true,
    }
}

/// Whether a counter is a level rather than a running count.
fn is_gauge(name: &str, help: &str, v: StatValue) -> bool {
    matches!(v, StatValue::Ratio(_))
        || help.contains(" now")
        || matches!(
            name,
            "checkpoint" | "pages_allocated" | "server_version" | "mob_bytes_max" | "commit_mode"
        )
}

/// The counters of `concurrency control` refusals, by cause, for `thor_commit_aborts_total`.
fn aborts(s: &ServerStats) -> [(&'static str, u64); 6] {
    [
        ("stale", s.refused_stale),
        ("threshold", s.refused_threshold),
        ("rule1", s.refused_rule1),
        ("rule2a", s.refused_rule2a),
        ("rule2b", s.refused_rule2b),
        ("wpl_page_rule", s.wpl_page_rule_refusals),
    ]
}

/// Puts `stats` into the `metrics` recorder in force (the global one of `thor server`, or a
/// local one): every counter and gauge set to the snapshot's value.
fn record(stats: &ServerStats) {
    for ((name, v), help) in stats.iter().zip(ServerStats::HELP) {
        // HELP text is one line.
        let help = help.replace('\n', " ");
        if is_gauge(name, &help, v) {
            let metric = format!("thor_{name}");
            metrics::describe_gauge!(metric.clone(), help);
            let value = match v {
                StatValue::Count(n) => n as f64,
                StatValue::Ratio(r) => r,
            };
            metrics::gauge!(metric).set(value);
        } else {
            let metric = format!("thor_{name}_total");
            metrics::describe_counter!(metric.clone(), help);
            if let StatValue::Count(n) = v {
                metrics::counter!(metric).absolute(n);
            }
        }
    }
    metrics::describe_gauge!("thor_build_info", "1, labelled with the server's version.");
    metrics::gauge!("thor_build_info", "version" => version_text(stats.server_version)).set(1.0);
    metrics::describe_gauge!("thor_up", "1 while the server serves (health 0), 0 otherwise.");
    metrics::gauge!("thor_up").set(if stats.health == 0 { 1.0 } else { 0.0 });
    metrics::describe_counter!(
        "thor_commit_aborts_total",
        "Commits refused by concurrency control, by cause."
    );
    for (cause, n) in aborts(stats) {
        metrics::counter!("thor_commit_aborts_total", "cause" => cause).absolute(n);
    }
    metrics::describe_gauge!("thor_mob_fill_ratio", "MOB bytes over the MOB's budget, now.");
    let fill = stats.mob_bytes as f64 / stats.mob_bytes_max.max(1) as f64;
    metrics::gauge!("thor_mob_fill_ratio").set(fill);
}

/// Bucket bounds of the latency histograms, in seconds: 10 us to 10 s, about three per
/// decade.
const LATENCY_BUCKETS_S: &[f64] = &[
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// The recorder's settings: the `_seconds` metrics are Prometheus histograms.
fn builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS_S)
        .expect("the bucket list is not empty")
}

/// The counters in the Prometheus text exposition format (version 0.0.4), rendered by a
/// recorder of its own (`thor stats --prometheus`).
pub fn prometheus_text(stats: &ServerStats) -> String {
    let recorder = builder().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || record(stats));
    handle.run_upkeep();
    handle.render()
}

/// How often the recorder folds recorded histogram samples into their buckets (the memory of
/// samples between two upkeeps is what the server records in this long).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// How long the endpoint gives a scraper to send its request and take the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// `thor server --metrics-listen`: `GET /metrics` (the Prometheus text) and `GET /health` (200
/// while the server serves, 503 once its storage failed) over HTTP/1.1, served by hyper on a
/// thread of its own. [`MetricsServer::shutdown`] stops it and drops its engine handle, so that
/// the server's last reference can close the engine (which checkpoints).
#[derive(Debug)]
pub struct MetricsServer {
    /// Fired to stop the accept loop.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The thread; it ends (dropping the engine) once stopped.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Installs the Prometheus recorder as the program's `metrics` recorder. Call it before the
    /// engine opens, so that the engine's latency histograms record into it.
    pub fn install_recorder() -> Result<PrometheusHandle> {
        let recorder = builder().build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder)
            .map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))?;
        Ok(handle)
    }

    /// Serves `listener` from `engine` until [`MetricsServer::shutdown`].
    pub fn start(
        listener: std::net::TcpListener,
        engine: Arc<Engine>,
        handle: PrometheusHandle,
    ) -> Result<MetricsServer> {
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new().name("thor-metrics".into()).spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => return warn!("metrics endpoint: {e}"),
                };
                // Histogram samples wait in the recorder until upkeep folds them into their
                // buckets; without a scraper for hours they would pile up.
                let upkeep = handle.clone();
                tokio::spawn(async move {
                    let mut every = tokio::time::interval(UPKEEP_EVERY);
                    loop {
                        every.tick().await;
                        upkeep.run_upkeep();
                    }
                });
                serve(listener, Arc::new(Scrape { engine, handle }), stopped).await;
            })
            // The runtime goes here, with every connection task and its engine handle.
        })?;
        Ok(MetricsServer { stop: Some(stop), thread: Some(thread) })
    }

    /// Stops serving and waits until the thread (and every engine handle it held) is gone.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            warn!("the metrics thread panicked");
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// What a scrape reads.
struct Scrape {
    /// The server's engine.
    engine: Arc<Engine>,
    /// The installed recorder's renderer.
    handle: PrometheusHandle,
}

impl Scrape {
    fn answer(&self, method: &hyper::Method, path: &str) -> (hyper::StatusCode, String) {
        use hyper::StatusCode;
        if method != hyper::Method::GET {
            return (StatusCode::METHOD_NOT_ALLOWED, String::new());
        }
        match path {
            "/metrics" => {
                record(&self.engine.server_stats());
                self.handle.run_upkeep();
                (StatusCode::OK, self.handle.render())
            }
            "/health" => match self.engine.health() {
                thor_server::Health::Failed { cause, .. } => {
                    (StatusCode::SERVICE_UNAVAILABLE, format!("failed: {cause}\n"))
                }
                thor_server::Health::ReadOnly => (StatusCode::OK, "read-only\n".into()),
                _ => (StatusCode::OK, "serving\n".into()),
            },
            _ => (StatusCode::NOT_FOUND, "try /metrics or /health\n".into()),
        }
    }
}

/// Accepts until `stopped`; one request per connection.
async fn serve(
    listener: tokio::net::TcpListener,
    scrape: Arc<Scrape>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    warn!("metrics endpoint: accepting failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let scrape = scrape.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                let (status, body) = scrape.answer(req.method(), req.uri().path());
                let kind = if status == hyper::StatusCode::OK && req.uri().path() == "/metrics" {
                    "text/plain; version=0.0.4; charset=utf-8"
                } else {
                    "text/plain; charset=utf-8"
                };
                let response = hyper::Response::builder()
                    .status(status)
                    .header(hyper::header::CONTENT_TYPE, kind)
                    .body(Full::new(Bytes::from(body)));
                async move { response }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            match tokio::time::timeout(SCRAPE_TIMEOUT, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!("metrics request: {e}"),
                Err(_) => debug!("metrics request: timed out"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_totals_and_levels_are_gauges() {
        let s = ServerStats {
            commits: 7,
            mob_bytes: 4096,
            mob_bytes_max: 8192,
            commits_per_fsync: 2.5,
            refused_rule1: 3,
            server_version: thor_wire::stats::version_number(0, 1, 0),
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
        assert!(text.contains("thor_commit_aborts_total{cause=\"rule1\"} 3\n"), "{text}");
        assert!(text.contains("thor_build_info{version=\"0.1.0\"} 1\n"), "{text}");
        assert!(text.contains("thor_mob_fill_ratio 0.5\n"), "{text}");
        assert!(text.contains("thor_up 1\n"), "{text}");
        // Every counter appears once, with help and type, and so do the five extras.
        assert_eq!(text.matches("# TYPE ").count(), ServerStats::FIELDS.len() + 4);
    }

    thor_client::class! {
        pub class Note("stats.Note") { n: u64 }
    }

    /// The endpoint's answers before and after the disk fills up: `/health` turns 503 with the
    /// cause, and `/metrics` says it (an engine on a full `FaultDisk`, no tmpfs).
    #[test]
    fn health_and_metrics_show_a_storage_failure() {
        use thor_storage::FaultDisk;
        let handle = MetricsServer::install_recorder().unwrap();
        let disk = FaultDisk::new();
        let opts = thor_server::EngineOptions {
            background_flusher: false,
            ..thor_server::EngineOptions::default()
        };
        let engine = Arc::new(Engine::create(Arc::new(disk.clone()), opts).unwrap());
        let scrape = Scrape { engine: engine.clone(), handle };
        let get = |path| scrape.answer(&hyper::Method::GET, path);
        assert_eq!(get("/health"), (hyper::StatusCode::OK, "serving\n".to_string()));
        let t =
            thor_net::LocalTransport::connect(engine.clone(), &ClientConfig::default()).unwrap();
        let s = Session::new(Box::new(t), SessionConfig::default()).unwrap();
        s.create_fixed::<Note>().unwrap().set(Note::n, 1).unwrap();
        s.commit().unwrap();
        let (status, body) = get("/metrics");
        assert_eq!(status, hyper::StatusCode::OK);
        assert!(body.contains("thor_up 1\n") && body.contains("thor_health 0\n"), "{body}");
        assert!(body.contains("thor_commit_seconds_count"), "{body}");

        disk.set_capacity(Some(disk.used_bytes()));
        let failed = (0..1000).find_map(|i| {
            s.create_fixed::<Note>().unwrap().set(Note::n, i).unwrap();
            s.commit().err()
        });
        let err = failed.expect("the full disk refused a commit");
        assert!(err.to_string().contains("No space left on device"), "{err}");
        let (status, body) = get("/health");
        assert_eq!(status, hyper::StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.starts_with("failed: ") && body.contains("No space left"), "{body}");
        let (_, body) = get("/metrics");
        assert!(body.contains("thor_up 0\n") && body.contains("thor_health 1\n"), "{body}");
        assert!(body.contains("thor_storage_failures_total 1\n"), "{body}");
        assert_eq!(get("/nothing").0, hyper::StatusCode::NOT_FOUND);
        assert_eq!(
            scrape.answer(&hyper::Method::POST, "/metrics").0,
            hyper::StatusCode::METHOD_NOT_ALLOWED
        );
    }

    #[test]
    fn the_contention_line_shows_refusals_client_aborts_and_retries() {
        let s = ServerStats {
            refused_stale: 5,
            refused_rule1: 2,
            client_invalidation_aborts: 30,
            client_retries: 37,
            fair_claims: 3,
            fair_held: 4,
            ..Default::default()
        };
        let t = table(&s, false);
        assert!(
            t.contains(
                "conflicts: 7 commits refused (stale 5, rule1 2), 30 transactions aborted at \
                 clients by invalidations, 37 retries\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("fair retries: 3 claims (0 expired unused), 4 commits held back"),
            "{t}"
        );
        assert!(t.contains("client_invalidation_aborts") && t.contains("fair_held "), "{t}");
    }

    #[test]
    fn counters_of_modes_that_are_off_are_hidden() {
        let s = ServerStats { page_cache_exclusive: 0, ..Default::default() };
        let t = table(&s, false);
        assert!(!t.contains("demotions_stored") && !t.contains("page_commits "), "{t}");
        assert!(!t.contains("wpl_images") && !t.contains("twopc_prepared"), "{t}");
        assert!(t.contains("commits ") && t.contains("--all shows them"), "{t}");
        assert!(t.contains("serving"), "{t}");
        let all = table(&s, true);
        assert!(all.contains("demotions_stored") && all.contains("wpl_images"), "{all}");
        let s = ServerStats {
            page_cache_exclusive: 1,
            commit_mode: u64::from(CommitMode::Wpl.code()),
            twopc_prepared: 1,
            health: HEALTH_FAILED,
            uptime_s: 3_723,
            ..Default::default()
        };
        let t = table(&s, false);
        assert!(t.contains("demotions_stored") && t.contains("wpl_images"), "{t}");
        assert!(t.contains("conflicts: 0 commits refused, 0 transactions aborted"), "{t}");
        assert!(t.contains("page_commits ") && t.contains("twopc_prepared"), "{t}");
        assert!(t.contains("FAILED") && t.contains("up 1h 2m 3s"), "{t}");
    }
}
