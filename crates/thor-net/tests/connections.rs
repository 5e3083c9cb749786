//! Connection management over TCP: the connection limit, idle and slow-frame timeouts,
//! graceful shutdown, and the client transport's own rules (pipelining, in-flight bound,
//! oversized requests, broken connections).

mod common;

use std::time::Duration;

use common::*;
use thor_core::{PageId, builtin};
use thor_net::{NetConfig, TcpTransport};
use thor_server::ProtocolConfig;
use thor_wire::{ErrorCode, ReplyBody, Request, RequestBody, Transport, TransportError};

fn fetch_req(page: PageId) -> Request {
    Request::new(RequestBody::Fetch { page })
}

#[test]
fn connections_beyond_the_limit_are_refused_with_busy() {
    let db = Db::new();
    let config = ProtocolConfig { sessions_max: 2, ..ProtocolConfig::default() };
    let (handler, server) = serve(db.create_with(config), NetConfig::default());
    let addr = server.local_addr();
    let mut a = connect(addr, b"");
    let b = connect(addr, b"");
    match TcpTransport::connect(addr, &client_config(b"")) {
        Err(TransportError::Refused { code: ErrorCode::Busy, .. }) => {}
        other => panic!("expected Busy, got {other:?}"),
    }
    let mut s = raw(addr);
    expect_error_and_close(&mut s, ErrorCode::Busy, 0);
    // The clients inside the limit are unaffected.
    fetch(&mut a, PageId::FIRST);
    // A slot frees once the server sees a client leave; the new client may race with that.
    drop(b);
    let mut c = None;
    for _ in 0..500 {
        match TcpTransport::connect(addr, &client_config(b"")) {
            Ok(t) => {
                c = Some(t);
                break;
            }
            Err(TransportError::Refused { code: ErrorCode::Busy, .. }) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("{e}"),
        }
    }
    fetch(c.as_mut().expect("a slot was freed"), PageId::FIRST);
    assert!(handler.server_stats().sessions_refused >= 2);
    drop((a, c, s));
    server.shutdown().unwrap();
}

#[test]
fn idle_and_slow_connections_are_timed_out() {
    let db = Db::new();
    let net = NetConfig {
        idle_timeout: Duration::from_millis(100),
        frame_timeout: Duration::from_millis(100),
        ..NetConfig::default()
    };
    let (_handler, server) = serve(db.create(), net);
    let addr = server.local_addr();

    // Idle: a session that sends nothing more after Hello.
    let mut s = raw(addr);
    let hello = Request::new(RequestBody::Hello(thor_wire::Hello::new(&b""[..], "idle")));
    send_raw(&mut s, &hello.to_frame(1).unwrap());
    let (_, r) = read_frame(&mut s).unwrap();
    assert!(matches!(r.body, ReplyBody::HelloOk(_)));
    expect_error_and_close(&mut s, ErrorCode::Timeout, 0);
    drop(s);

    // Slowloris: a frame that starts and never finishes.
    let mut s = raw(addr);
    send_raw(&mut s, &hello.to_frame(1).unwrap()[..10]);
    expect_error_and_close(&mut s, ErrorCode::Timeout, 0);

    // Through the client transport, the timeout surfaces as an Error reply, then Broken.
    let mut t = connect(addr, b"");
    std::thread::sleep(Duration::from_millis(300));
    match t.round_trip(&fetch_req(PageId::FIRST)) {
        Ok(r) => {
            assert!(matches!(r.body, ReplyBody::Error { code: ErrorCode::Timeout, .. }), "{r:?}")
        }
        Err(TransportError::Io(_) | TransportError::Closed) => {}
        Err(e) => panic!("unexpected {e}"),
    }
    assert!(t.round_trip(&fetch_req(PageId::FIRST)).is_err());
    drop((s, t));
    server.shutdown().unwrap();
}

#[test]
fn the_client_transport_pipelines_and_checks_its_requests() {
    let db = Db::new();
    let config = ProtocolConfig { max_frame_bytes: 64 << 10, ..ProtocolConfig::default() };
    let (_handler, server) = serve(db.create_with(config), NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    assert_eq!(t.server().max_frame_bytes, 64 << 10);
    assert_eq!(t.server().root, builtin::ROOT);
    assert!(matches!(t.recv(), Err(TransportError::NothingInFlight)));

    // Pipelining: replies come back in order.
    let pages: Vec<PageId> = (0..thor_wire::limits::IN_FLIGHT_MAX).map(|_| PageId::FIRST).collect();
    for p in &pages {
        t.send(&fetch_req(*p)).unwrap();
    }
    assert!(matches!(
        t.send(&fetch_req(PageId::FIRST)),
        Err(TransportError::TooManyInFlight { .. })
    ));
    for p in &pages {
        match t.recv().unwrap().body {
            ReplyBody::Page { page, .. } => assert_eq!(page, *p),
            other => panic!("{other:?}"),
        }
    }

    // A request larger than the server's frame limit is refused locally and nothing breaks.
    let class = commit_ok(&mut t, vec![], vec![item_class().to_class_object()])[0];
    let big: Vec<Vec<u8>> = (0..40).map(|i| item(class.raw(), 0, i, &[1; 2000])).collect();
    match t.round_trip(&commit_req(vec![], big)) {
        Err(TransportError::BadRequest(thor_wire::WireError::FrameTooLarge { .. })) => {}
        other => panic!("expected BadRequest, got {other:?}"),
    }
    fetch(&mut t, PageId::FIRST);

    // A missing page is an error reply; the session goes on.
    let r = t.round_trip(&fetch_req(PageId::new(999).unwrap())).unwrap();
    assert!(matches!(r.body, ReplyBody::Error { code: ErrorCode::NoSuchPage, .. }));
    fetch(&mut t, PageId::FIRST);

    // Stats, Abort, then Goodbye: acked, and the connection is over.
    let r = t.round_trip(&Request::new(RequestBody::Stats)).unwrap();
    let ReplyBody::Stats(st) = r.body else { panic!() };
    assert_eq!(st.commits, 1);
    assert!(st.bytes_received > 0 && st.bytes_sent > st.bytes_received);
    let r = t.round_trip(&Request::new(RequestBody::Abort)).unwrap();
    assert_eq!(r.body, ReplyBody::Ack);
    let r = t.round_trip(&Request::new(RequestBody::Goodbye)).unwrap();
    assert_eq!(r.body, ReplyBody::Ack);
    assert!(t.round_trip(&fetch_req(PageId::FIRST)).is_err());
    drop(t);
    server.shutdown().unwrap();
}

#[test]
fn shutdown_answers_in_flight_requests_and_closes_idle_connections() {
    let db = Db::new();
    let engine = db.create();
    let (handler, server) = serve(engine, NetConfig::default());
    let addr = server.local_addr();
    let mut busy = connect(addr, b"");
    let class = commit_ok(&mut busy, vec![], vec![item_class().to_class_object()])[0];
    let mut idle = raw(addr);
    let hello = Request::new(RequestBody::Hello(thor_wire::Hello::new(&b""[..], "idle")));
    send_raw(&mut idle, &hello.to_frame(1).unwrap());
    assert!(matches!(read_frame(&mut idle).unwrap().1.body, ReplyBody::HelloOk(_)));

    // A commit is on the wire when shutdown begins: it is either handled and acknowledged, or
    // not read at all and answered with ShuttingDown. Either way the answer tells the truth.
    busy.send(&commit_req(vec![], vec![item(class.raw(), 0, 42, b"last")])).unwrap();
    let stopper = std::thread::spawn(move || server.shutdown());
    let committed = match busy.recv().unwrap().body {
        ReplyBody::CommitOk { created, .. } => Some(created[0]),
        ReplyBody::Error { code: ErrorCode::ShuttingDown, .. } => None,
        other => panic!("{other:?}"),
    };
    expect_error_and_close(&mut idle, ErrorCode::ShuttingDown, 0);
    // Closing our ends lets the server's lingering closes finish at once.
    drop((busy, idle));
    stopper.join().unwrap().unwrap();
    assert!(std::net::TcpStream::connect(addr).is_err(), "no longer listening");

    let stats = handler.server_stats();
    assert_eq!(stats.commits, 1 + committed.is_some() as u64);
    drop(handler);
    let engine = db.open();
    let (_h, server) = serve(engine, NetConfig::default());
    let mut t = connect(server.local_addr(), b"");
    if let Some(oref) = committed {
        assert_eq!(seq_of(&read(&mut t, oref)), 42);
    }
    drop(t);
    server.shutdown().unwrap();
}

#[test]
fn pipelining_past_the_bound_answers_in_order() {
    use thor_wire::limits::IN_FLIGHT_MAX;
    let db = Db::new();
    let (engine, gate) = db.create_gated(ProtocolConfig::default());
    let (_, server) = serve(engine.clone(), NetConfig::default());
    let addr = server.local_addr();
    let mut setup = connect(addr, b"");
    let class = commit_ok(&mut setup, vec![], vec![item_class().to_class_object()])[0];
    let commits_before = engine.server_stats().commits;
    let errors_before = engine.server_stats().protocol_errors;
    let mut s = raw(addr);
    raw_hello(&mut s, b"");
    let commit = |seq| commit_req(vec![], vec![item(class.raw(), 0, seq, b"x")]);
    // The log cannot be made durable: the first commit stays deferred, and the requests after
    // it are held back in the core, up to the bound.
    gate.shut();
    let mut frames = commit(1).to_frame(10).unwrap();
    let held = IN_FLIGHT_MAX as u64;
    for id in 11..11 + held {
        frames.extend(fetch_req(PageId::FIRST).to_frame(id).unwrap());
    }
    // Past the bound: three commits, dropped.
    let dropped: Vec<u64> = (11 + held..14 + held).collect();
    for (k, &id) in dropped.iter().enumerate() {
        frames.extend(commit(2 + k as u32).to_frame(id).unwrap());
    }
    send_raw(&mut s, &frames);
    // Each dropped request counts as a protocol error: once all three are counted, the core
    // has every request. Nothing is answered before the commit is.
    wait_until(|| engine.server_stats().protocol_errors == errors_before + 3);
    assert!(quiet_and_open(&mut s), "nothing answered out of order");
    gate.open();
    let mut ids = Vec::new();
    while let Some((id, r)) = read_frame(&mut s) {
        match id {
            10 => assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}"),
            id if id < 11 + held => assert!(matches!(r.body, ReplyBody::Page { .. }), "{r:?}"),
            id => match r.body {
                ReplyBody::Error { code: ErrorCode::UnexpectedMessage, message } => {
                    assert!(message.contains(&format!("request {id} dropped")), "{message}")
                }
                other => panic!("request {id}: {other:?}"),
            },
        }
        ids.push(id);
    }
    let mut want: Vec<u64> = (10..11 + held).collect();
    want.extend(&dropped);
    assert_eq!(ids, want, "every reply in request order, then the connection closes");
    assert_eq!(engine.server_stats().commits, commits_before + 1, "no dropped commit took effect");
    // The server goes on serving others.
    fetch(&mut setup, PageId::FIRST);
    drop((s, setup));
    server.shutdown().unwrap();
}

#[test]
fn silent_connections_do_not_lock_out_clients() {
    let db = Db::new();
    // The default slots (256); a handshake deadline far away, so that it is not what lets
    // the client in.
    let net = NetConfig { handshake_timeout: SAFETY_TIMEOUT * 3, ..NetConfig::default() };
    let (engine, server) = serve(db.create(), net);
    let addr = server.local_addr();
    let slots = thor_server::limits::SESSIONS_MAX_DEFAULT;
    let share = slots / thor_server::limits::PRE_HELLO_SESSIONS_SHARE;
    // A few clients in session first.
    let mut clients: Vec<TcpTransport> = (0..4).map(|_| connect(addr, b"")).collect();
    // As many silent connections as there are slots: they never say Hello.
    let mut silent: Vec<_> = (0..slots).map(|_| raw(addr)).collect();
    // Beyond their share, each pushes out the oldest of them: they hold the share, no more.
    wait_until(|| engine.server_stats().sessions_refused == (slots - share) as u64);
    expect_error_and_close(&mut silent[0], ErrorCode::Busy, 0);
    assert!(quiet_and_open(&mut silent[slots - 1]), "the newest are still connected");
    // A client still gets in, and every client is served.
    let mut late = connect(addr, b"");
    fetch(&mut late, PageId::FIRST);
    for c in &mut clients {
        fetch(c, PageId::FIRST);
    }
    assert_eq!(engine.server_stats().sessions_open as usize, clients.len() + 1 + share - 1);
    drop((clients, silent, late));
    server.shutdown().unwrap();
}

#[test]
fn a_connection_silent_past_the_handshake_deadline_is_closed() {
    let db = Db::new();
    let net = NetConfig { handshake_timeout: Duration::from_millis(200), ..NetConfig::default() };
    let (_engine, server) = serve(db.create(), net);
    let addr = server.local_addr();
    // A client that says Hello at once, connected before the silent one.
    let mut client = connect(addr, b"");
    let mut silent = raw(addr);
    expect_error_and_close(&mut silent, ErrorCode::Timeout, 0);
    // The client's deadline passed before the silent one's: its session is not affected.
    fetch(&mut client, PageId::FIRST);
    assert_eq!(server.stats().handshakes_timed_out.load(std::sync::atomic::Ordering::Relaxed), 1);
    drop(client);
    server.shutdown().unwrap();
}
