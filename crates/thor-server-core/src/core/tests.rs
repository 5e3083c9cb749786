//! Scenario tests of the core, driven step by step: every effect is performed (or held back)
//! by the test, so each test shows one behaviour of the state machine exactly.

use std::collections::VecDeque;

use bytes::Bytes;
use thor_core::le::put_u32;
use thor_core::{ClassDesc, ClientId, Oref, PageId, PageView, RawRef, VarKind, builtin};
use thor_wire::{
    Commit, ErrorCode, Hello, RefusedCode, Reply, ReplyBody, Request, RequestBody, WIRE_VERSION,
    WireError,
};

use super::testdisk::{self, Disk, MemDb};
use super::*;

/// A core on an in-memory disk, whose effects the test performs when it chooses.
pub(super) struct Harness {
    pub disk: Disk,
    pub core: Core,
    /// Effects emitted and not yet performed or taken, in order.
    pub pending: VecDeque<Effect>,
    pub now: u64,
}

pub(super) fn config() -> CoreConfig {
    CoreConfig { page_cache_bytes: 64 * 4096, ..CoreConfig::default() }
}

impl Harness {
    pub(super) fn new(cfg: CoreConfig) -> Harness {
        Harness::with_id(cfg, ServerId(7))
    }

    /// A new database of server `id`.
    pub(super) fn with_id(cfg: CoreConfig, id: ServerId) -> Harness {
        Harness::open(MemDb::create(4096, id), cfg)
    }

    /// A core recovered from `disk` (as after a crash: whatever the log holds is replayed).
    pub(super) fn open(disk: Disk, cfg: CoreConfig) -> Harness {
        let core = testdisk::recover(&disk, cfg);
        Harness { disk, core, pending: VecDeque::new(), now: 1 }
    }

    pub(super) fn step(&mut self, input: Input) {
        self.now += 1;
        let mut fx = Vec::new();
        self.core.step(self.now, input, &mut fx);
        self.pending.extend(fx);
    }

    /// Performs every I/O effect (appends, then syncs the log) until none is left; returns the
    /// replies, answers and messages to other servers, in order.
    pub(super) fn settle(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        loop {
            let mut appended = false;
            while let Some(e) = self.pending.pop_front() {
                match e {
                    Effect::Append { lsn, record } => {
                        self.disk.borrow_mut().append(lsn, record);
                        appended = true;
                    }
                    Effect::Reply { .. } | Effect::Done { .. } | Effect::Peer { .. } => out.push(e),
                    other => {
                        let input = self.disk.borrow_mut().perform(&other).unwrap();
                        self.step(input);
                    }
                }
            }
            if !appended {
                return out;
            }
            let lsn = self.disk.borrow_mut().sync();
            self.step(Input::Durable { lsn });
        }
    }

    /// Takes the replies and answers emitted so far without performing anything.
    fn take_answers(&mut self) -> Vec<Effect> {
        let (answers, rest): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|e| matches!(e, Effect::Reply { .. } | Effect::Done { .. }));
        self.pending.extend(rest);
        answers
    }

    pub(super) fn connect(&mut self, conn: ConnId, token: &[u8]) -> ClientId {
        self.step(Input::Connect { conn });
        let r = self.request(conn, 1, RequestBody::Hello(Hello::new(token.to_vec(), "test")));
        match r.body {
            ReplyBody::HelloOk(info) => info.client_id,
            other => panic!("{other:?}"),
        }
    }

    /// Sends a request and settles; returns the one reply to it.
    pub(super) fn request(&mut self, conn: ConnId, id: u64, body: RequestBody) -> Reply {
        self.step(Input::Request { conn, id, req: Request::new(body) });
        let out = self.settle();
        let mut replies = replies_to(&out, conn);
        assert_eq!(replies.len(), 1, "one reply: {out:?}");
        let (rid, reply, _) = replies.remove(0);
        assert_eq!(rid, id);
        reply
    }

    fn commit(
        &mut self,
        conn: ConnId,
        id: u64,
        versions: Vec<(Oref, Vec<u8>)>,
        created: Vec<Vec<u8>>,
    ) -> Reply {
        self.request(conn, id, commit_body(versions, created))
    }
}

pub(super) fn commit_body(versions: Vec<(Oref, Vec<u8>)>, created: Vec<Vec<u8>>) -> RequestBody {
    RequestBody::Commit(Commit {
        reads: vec![],
        versions: versions.into_iter().map(|(o, b)| (o, Bytes::from(b))).collect(),
        created: created.into_iter().map(Bytes::from).collect(),
        id: None,
        leaves: Vec::new(),
    })
}

pub(super) fn replies_to(out: &[Effect], conn: ConnId) -> Vec<(u64, Reply, bool)> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Reply { conn: c, id, reply, close } if *c == conn => {
                Some((*id, reply.clone(), *close))
            }
            _ => None,
        })
        .collect()
}

pub(super) fn error_code(r: &Reply) -> Option<ErrorCode> {
    match &r.body {
        ReplyBody::Error { code, .. } => Some(*code),
        _ => None,
    }
}

pub(super) fn refusal(r: &Reply) -> Option<RefusedCode> {
    match &r.body {
        ReplyBody::CommitRefused { code, .. } => Some(*code),
        _ => None,
    }
}

pub(super) fn item_class() -> ClassDesc {
    ClassDesc::new("t.Item", 8, &[0], VarKind::None).unwrap()
}

/// Commits the item class and one item; returns their orefs.
pub(super) fn class_and_item(h: &mut Harness, conn: ConnId) -> (Oref, Oref) {
    let class_obj = item_class().to_class_object();
    let mut inst = item_class().new_object(RawRef::tagged_word(0), 0);
    put_u32(&mut inst, 4, RawRef::tagged_word(1)); // points at itself
    let r = h.commit(conn, 50, vec![], vec![class_obj, inst]);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!("{r:?}") };
    (created[0], created[1])
}

#[test]
fn hello_opens_the_session_and_says_what_the_client_needs() {
    let mut h = Harness::new(config());
    h.step(Input::Connect { conn: 10 });
    let r = h.request(10, 1, RequestBody::Hello(Hello::new(&b""[..], "test")));
    let ReplyBody::HelloOk(info) = r.body else { panic!("{r:?}") };
    assert_eq!(info.version, WIRE_VERSION);
    assert_eq!(info.page_size, 4096);
    assert_eq!(info.root, builtin::ROOT);
    assert_eq!(info.server_id, ServerId(7));
    assert_eq!(info.client_id, ClientId(1));
    assert_eq!(h.core.client_of(10), Some(ClientId(1)));
    assert_eq!(h.core.client_name(10), Some("test"));
    assert_eq!(h.connect(11, b""), ClientId(2));
}

#[test]
fn requests_before_hello_close_the_session() {
    let mut h = Harness::new(config());
    h.step(Input::Connect { conn: 1 });
    h.step(Input::Request {
        conn: 1,
        id: 5,
        req: Request::new(RequestBody::Fetch { page: PageId::FIRST }),
    });
    let out = h.settle();
    let r = replies_to(&out, 1);
    assert_eq!(error_code(&r[0].1), Some(ErrorCode::HelloRequired));
    assert!(r[0].2, "closes");
    h.step(Input::Request {
        conn: 1,
        id: 6,
        req: Request::new(RequestBody::Hello(Hello::new(&b""[..], "late"))),
    });
    let r = replies_to(&h.settle(), 1);
    assert_eq!(error_code(&r[0].1), Some(ErrorCode::UnexpectedMessage));
}

#[test]
fn wrong_tokens_and_versions_are_refused() {
    let cfg = CoreConfig {
        protocol: ProtocolConfig { token: b"secret".to_vec(), ..ProtocolConfig::default() },
        ..config()
    };
    let mut h = Harness::new(cfg);
    for (i, token) in [&b""[..], b"secreT", b"secret!"].into_iter().enumerate() {
        let conn = 100 + i as u64;
        h.step(Input::Connect { conn });
        let r = h.request(conn, 1, RequestBody::Hello(Hello::new(token.to_vec(), "x")));
        assert_eq!(error_code(&r), Some(ErrorCode::Unauthenticated));
        h.step(Input::Disconnect { conn });
    }
    assert_eq!(h.core.server_stats().auth_failures, 3);
    h.step(Input::Connect { conn: 1 });
    let mut future = Hello::new(&b"secret"[..], "future");
    future.min_version = WIRE_VERSION + 1;
    future.max_version = WIRE_VERSION + 5;
    let r = h.request(1, 1, RequestBody::Hello(future));
    assert_eq!(error_code(&r), Some(ErrorCode::UnsupportedVersion));
    h.connect(2, b"secret");
    let r = h.request(2, 2, RequestBody::Hello(Hello::new(&b"secret"[..], "again")));
    assert_eq!(error_code(&r), Some(ErrorCode::UnexpectedMessage));
}

#[test]
fn sessions_are_bounded_and_give_their_slot_back() {
    let cfg = CoreConfig {
        protocol: ProtocolConfig { sessions_max: 2, ..ProtocolConfig::default() },
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    h.connect(2, b"");
    // Every slot is an authenticated session's: the new connection is refused.
    h.step(Input::Connect { conn: 3 });
    let r = replies_to(&h.settle(), 3);
    assert_eq!(error_code(&r[0].1), Some(ErrorCode::Busy));
    assert!(r[0].2);
    h.step(Input::Disconnect { conn: 1 });
    h.step(Input::Connect { conn: 4 });
    assert!(h.settle().is_empty(), "admitted");
    let st = h.core.server_stats();
    assert_eq!((st.sessions_open, st.sessions_opened, st.sessions_refused), (2, 3, 1));
}

#[test]
fn a_connection_waiting_for_hello_gives_its_slot_to_a_newer_one() {
    let cfg = CoreConfig {
        protocol: ProtocolConfig { sessions_max: 2, ..ProtocolConfig::default() },
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    // A silent connection takes the last slot; a client's connection pushes it out.
    h.step(Input::Connect { conn: 2 });
    h.step(Input::Connect { conn: 3 });
    let out = h.settle();
    let r = replies_to(&out, 2);
    assert_eq!(error_code(&r[0].1), Some(ErrorCode::Busy));
    assert!(r[0].2, "closed");
    assert!(replies_to(&out, 3).is_empty(), "admitted");
    let r = h.request(3, 1, RequestBody::Hello(Hello::new(&b""[..], "client")));
    assert!(matches!(r.body, ReplyBody::HelloOk(_)));
    let st = h.core.server_stats();
    assert_eq!((st.sessions_open, st.sessions_refused), (2, 1));
}

#[test]
fn fetch_returns_the_page_or_no_such_page() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let r = h.request(1, 2, RequestBody::Fetch { page: PageId::FIRST });
    let ReplyBody::Page { page, bytes } = r.body else { panic!("{r:?}") };
    assert_eq!(page, PageId::FIRST);
    assert_eq!(&bytes[..], &h.disk.borrow().read_page(PageId::FIRST).unwrap()[..]);
    let r = h.request(1, 3, RequestBody::Fetch { page: PageId::new(99).unwrap() });
    assert_eq!(error_code(&r), Some(ErrorCode::NoSuchPage));
    let r = h.request(1, 4, RequestBody::Stats);
    assert!(matches!(r.body, ReplyBody::Stats(_)), "a missing page does not end the session");
}

#[test]
fn commits_are_acknowledged_or_refused_with_their_code() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, obj) = class_and_item(&mut h, 1);
    let good = item_class().new_object(class.raw(), 0);
    let far = Oref::new(PageId::new(50).unwrap(), thor_core::Oid::new(1).unwrap());
    let cases: Vec<(RequestBody, RefusedCode)> = vec![
        (commit_body(vec![(obj, vec![0; 8])], vec![]), RefusedCode::Reshape),
        (commit_body(vec![(obj, vec![0; 16])], vec![]), RefusedCode::Reshape),
        (commit_body(vec![(class, good.clone())], vec![]), RefusedCode::ClassIsImmutable),
        (
            commit_body(vec![(obj, good.clone()), (obj, good.clone())], vec![]),
            RefusedCode::Duplicate,
        ),
        (commit_body(vec![], vec![item_class().new_object(obj.raw(), 0)]), RefusedCode::NotAClass),
        (commit_body(vec![], vec![vec![0; 4]]), RefusedCode::NotAClass),
        (
            commit_body(vec![], {
                let mut o = good.clone();
                put_u32(&mut o, 4, far.raw());
                vec![o]
            }),
            RefusedCode::BadReference,
        ),
        (
            commit_body(vec![], {
                let mut o = good.clone();
                o.extend_from_slice(&[0; 4]);
                vec![o]
            }),
            RefusedCode::BadShape,
        ),
        (commit_body(vec![], vec![vec![0; 9000]]), RefusedCode::ObjectTooLarge),
        (
            commit_body(
                vec![(Oref::new(PageId::new(40).unwrap(), thor_core::Oid::new(0).unwrap()), good)],
                vec![],
            ),
            RefusedCode::NoSuchObject,
        ),
    ];
    let before = h.core.stats().commits;
    for (i, (body, code)) in cases.into_iter().enumerate() {
        let r = h.request(1, 100 + i as u64, body);
        assert_eq!(refusal(&r), Some(code), "case {i}: {r:?}");
    }
    assert_eq!(h.core.stats().commits, before);
    assert_eq!(h.core.stats().commits_refused, 10);
}

#[test]
fn goodbye_acks_and_closes_and_stats_count() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let mut req = Request::new(RequestBody::Abort);
    req.piggyback.acks = vec![builtin::ROOT];
    req.piggyback.discarded = vec![PageId::FIRST, PageId::FIRST];
    h.step(Input::Request { conn: 1, id: 2, req });
    assert_eq!(replies_to(&h.settle(), 1)[0].1.body, ReplyBody::Ack);
    let r = h.request(1, 3, RequestBody::Stats);
    let ReplyBody::Stats(st) = r.body else { panic!() };
    assert_eq!((st.requests, st.acks_received, st.discarded_pages_received), (3, 1, 2));
    h.step(Input::Request { conn: 1, id: 4, req: Request::new(RequestBody::Goodbye) });
    let r = replies_to(&h.settle(), 1);
    assert_eq!(r[0].1.body, ReplyBody::Ack);
    assert!(r[0].2, "Goodbye closes");
    h.step(Input::ProtocolError { conn: 1, id: 0, error: WireError::UnknownType(0x77) });
    let r = replies_to(&h.settle(), 1);
    assert!(matches!(r[0].1.body, ReplyBody::Error { code: ErrorCode::UnknownType, .. }));
    assert_eq!(h.core.server_stats().protocol_errors, 1);
}

#[test]
fn bad_configurations_are_refused() {
    for protocol in [
        ProtocolConfig {
            token: vec![0; thor_wire::limits::TOKEN_BYTES_MAX + 1],
            ..Default::default()
        },
        ProtocolConfig { sessions_max: 0, ..Default::default() },
        ProtocolConfig { max_frame_bytes: 100, ..Default::default() },
    ] {
        assert!(matches!(protocol.validate(), Err(EngineError::BadOptions(_))));
    }
}

#[test]
fn a_commit_is_answered_only_once_durable() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, _) = class_and_item(&mut h, 1);
    h.step(Input::Request {
        conn: 1,
        id: 9,
        req: Request::new(commit_body(vec![], vec![item_class().new_object(class.raw(), 0)])),
    });
    assert!(h.take_answers().is_empty(), "no reply before the log is durable");
    let appended: Vec<_> =
        h.pending.iter().filter(|e| matches!(e, Effect::Append { .. })).collect();
    assert_eq!(appended.len(), 1);
    let out = h.settle();
    assert!(matches!(replies_to(&out, 1)[0].1.body, ReplyBody::CommitOk { .. }));
}

#[test]
fn replies_to_one_client_leave_in_request_order() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, _) = class_and_item(&mut h, 1);
    let fetch = || Request::new(RequestBody::Fetch { page: PageId::FIRST });
    let create = commit_body(vec![], vec![item_class().new_object(class.raw(), 0)]);
    h.step(Input::Request { conn: 1, id: 10, req: Request::new(create) });
    h.step(Input::Request { conn: 1, id: 11, req: fetch() });
    h.step(Input::Request { conn: 2, id: 20, req: fetch() });
    // Client 2 is not held back by client 1's commit; client 1's fetch is.
    let now = h.take_answers();
    assert_eq!(replies_to(&now, 2).len(), 1);
    assert!(replies_to(&now, 1).is_empty());
    let out = h.settle();
    let ids: Vec<u64> = replies_to(&out, 1).iter().map(|r| r.0).collect();
    assert_eq!(ids, vec![10, 11], "in request order");
}

#[test]
fn requests_past_the_bound_are_answered_in_order_and_not_executed() {
    use thor_wire::limits::IN_FLIGHT_MAX;
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, _) = class_and_item(&mut h, 1);
    let create = || commit_body(vec![], vec![item_class().new_object(class.raw(), 0)]);
    let commits_before = h.core.stats().commits;
    // A commit waits for the log; the requests after it are held back, up to the bound.
    h.step(Input::Request { conn: 1, id: 10, req: Request::new(create()) });
    let held = IN_FLIGHT_MAX as u64;
    for i in 0..held {
        h.step(Input::Request { conn: 1, id: 11 + i, req: Request::new(RequestBody::Stats) });
    }
    // Past the bound: three commits, dropped.
    let dropped: Vec<u64> = (0..3).map(|k| 11 + held + k).collect();
    for &id in &dropped {
        h.step(Input::Request { conn: 1, id, req: Request::new(create()) });
    }
    assert!(replies_to(&h.take_answers(), 1).is_empty(), "nothing before the commit's reply");
    let r = replies_to(&h.settle(), 1);
    let ids: Vec<u64> = r.iter().map(|x| x.0).collect();
    let mut want: Vec<u64> = (10..11 + held).collect();
    want.extend(&dropped);
    assert_eq!(ids, want, "in request order");
    assert!(matches!(r[0].1.body, ReplyBody::CommitOk { .. }));
    assert!(r[1..=held as usize].iter().all(|x| matches!(x.1.body, ReplyBody::Stats(_))));
    for (k, x) in r[held as usize + 1..].iter().enumerate() {
        assert_eq!(error_code(&x.1), Some(ErrorCode::UnexpectedMessage));
        assert_eq!(x.2, k == dropped.len() - 1, "only the last one closes");
    }
    assert_eq!(h.core.stats().commits, commits_before + 1, "no dropped commit ran");
    // The session is closed: anything more is refused.
    h.step(Input::Request { conn: 1, id: 99, req: Request::new(RequestBody::Stats) });
    let r = replies_to(&h.settle(), 1);
    assert_eq!(error_code(&r[0].1), Some(ErrorCode::UnexpectedMessage));
}

#[test]
fn a_fetch_that_misses_the_cache_waits_for_the_read_alone() {
    let cfg = CoreConfig { page_cache_bytes: 4096, ..config() };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    h.connect(2, b"");
    class_and_item(&mut h, 1);
    // Fill several pages and install them so that the one-page cache holds only the last.
    let items = six_installed_pages(&mut h);
    let cold = items[0].page().unwrap();
    h.step(Input::Request {
        conn: 1,
        id: 70,
        req: Request::new(RequestBody::Fetch { page: cold }),
    });
    assert!(h.take_answers().is_empty(), "waits for the read");
    assert!(h.pending.iter().any(|e| matches!(e, Effect::Read { page } if *page == cold)));
    let hot = items[5].page().unwrap();
    h.step(Input::Request { conn: 2, id: 80, req: Request::new(RequestBody::Fetch { page: hot }) });
    assert_eq!(replies_to(&h.take_answers(), 2).len(), 1, "other clients are served meanwhile");
    let out = h.settle();
    assert!(matches!(replies_to(&out, 1)[0].1.body, ReplyBody::Page { .. }));
    assert_eq!(h.core.stats().fetch_reads, 1);
}

#[test]
fn commits_wait_for_room_in_the_mob_and_go_on_after_an_install() {
    let cfg = CoreConfig { mob_bytes: 16 << 10, ..config() };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    h.connect(2, b"");
    let big = ClassDesc::new("t.Big", 8, &[0], VarKind::Bytes).unwrap();
    let r = h.commit(1, 2, vec![], vec![big.to_class_object()]);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!() };
    let class = created[0];
    // Two commits of 10 KB each: the second does not fit until the first is installed.
    for (conn, id) in [(1, 3), (2, 4)] {
        let obj = big.new_object(class.raw(), 2500);
        let c = commit_body(vec![], vec![obj.clone(), obj.clone(), obj.clone(), obj]);
        h.step(Input::Request { conn, id, req: Request::new(c) });
    }
    // Perform only the appends and syncs, not installs: the second commit stays queued.
    let mut installs = Vec::new();
    loop {
        let mut appended = false;
        while let Some(e) = h.pending.pop_front() {
            match e {
                Effect::Append { record, .. } => {
                    h.disk.borrow_mut().append_next(record);
                    appended = true;
                }
                e @ Effect::Install(_) => installs.push(e),
                _ => {}
            }
        }
        if !appended {
            break;
        }
        let lsn = h.disk.borrow_mut().sync();
        h.step(Input::Durable { lsn });
    }
    assert_eq!(h.core.stats().commits_queued, 1, "the second commit waits for room");
    assert_eq!(h.core.stats().mob_waits, 1);
    assert_eq!(installs.len(), 1, "an install round was started");
    h.pending.extend(installs);
    let out = h.settle();
    assert!(matches!(replies_to(&out, 2)[0].1.body, ReplyBody::CommitOk { .. }));
    assert!(h.core.stats().mob_bytes <= 16 << 10 || h.core.stats().mob_entries <= 4);
}

#[test]
fn validation_reads_the_pages_it_needs() {
    let cfg = CoreConfig { page_cache_bytes: 4096, ..config() };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    let big = ClassDesc::new("t.Big", 8, &[0], VarKind::Bytes).unwrap();
    let r = h.commit(1, 2, vec![], vec![big.to_class_object()]);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!() };
    let class = created[0];
    let objs: Vec<Vec<u8>> = (0..6).map(|_| big.new_object(class.raw(), 3000)).collect();
    let r = h.commit(1, 3, vec![], objs);
    let ReplyBody::CommitOk { created: items, .. } = r.body else { panic!() };
    h.step(Input::Direct { ticket: 1, op: DirectOp::FlushRound });
    h.settle();
    // Rewrite the first item, whose page is no longer cached: validation reads it.
    let mut v = big.new_object(class.raw(), 3000);
    v[16 + 5] = 42;
    h.step(Input::Request {
        conn: 1,
        id: 4,
        req: Request::new(commit_body(vec![(items[0], v)], vec![])),
    });
    assert!(h.pending.iter().any(|e| matches!(e, Effect::Read { .. })), "{:?}", h.pending);
    let out = h.settle();
    assert!(matches!(replies_to(&out, 1)[0].1.body, ReplyBody::CommitOk { .. }), "{out:?}");
    assert!(h.core.stats().validation_reads >= 1);
}

#[test]
fn a_log_failure_fails_what_waits_and_refuses_later_commits() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, _) = class_and_item(&mut h, 1);
    let c = commit_body(vec![], vec![item_class().new_object(class.raw(), 0)]);
    h.step(Input::Request { conn: 1, id: 5, req: Request::new(c.clone()) });
    h.pending.clear();
    h.step(Input::LogFailed { why: "disk on fire".into() });
    let r = replies_to(&h.take_answers(), 1);
    assert_eq!(error_code(&r[0].1), Some(ErrorCode::ServerFailed));
    assert!(!r[0].2, "the session stays open");
    let r = h.request(1, 6, c);
    assert_eq!(error_code(&r), Some(ErrorCode::ServerFailed));
    // Fetches still work.
    assert!(matches!(
        h.request(1, 7, RequestBody::Fetch { page: PageId::FIRST }).body,
        ReplyBody::Page { .. }
    ));
}

#[test]
fn large_object_roots_are_checked() {
    use thor_core::large::{LeafKind, encode};
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let objs = encode(&vec![5u8; 10_000], LeafKind::Bytes, 4096);
    let r = h.commit(1, 2, vec![], objs.clone());
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let mut bad = objs.clone();
    thor_core::le::put_u64(&mut bad[0], 4, 1 << 40);
    let r = h.commit(1, 3, vec![], bad);
    assert_eq!(refusal(&r), Some(RefusedCode::BadShape), "{r:?}");
    let mut bad = objs;
    put_u32(&mut bad[0], 12, 9);
    let r = h.commit(1, 4, vec![], bad);
    assert_eq!(refusal(&r), Some(RefusedCode::BadShape), "{r:?}");
}

// ---- Concurrency control (CLOCC) ----

/// Two items of the item class on one page, committed by `conn`; returns the class and
/// the items.
pub(super) fn two_items(h: &mut Harness, conn: ConnId) -> (Oref, Oref, Oref) {
    let (class, item) = class_and_item(h, conn);
    let r = h.commit(conn, 51, vec![], vec![item_of(class, 1)]);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!("{r:?}") };
    assert_eq!(created[0].page(), item.page(), "on one page");
    (class, item, created[0])
}

/// An item of `class` whose payload word is `v` and whose reference is null.
pub(super) fn item_of(class: Oref, v: u32) -> Vec<u8> {
    let mut o = item_class().new_object(class.raw(), 0);
    put_u32(&mut o, 8, v);
    o
}

/// A commit that read `reads` and writes `writes` (each item gets payload `v`).
pub(super) fn txn(class: Oref, reads: &[Oref], writes: &[Oref], v: u32) -> RequestBody {
    RequestBody::Commit(Commit {
        reads: reads.to_vec(),
        versions: writes.iter().map(|o| (*o, Bytes::from(item_of(class, v)))).collect(),
        created: vec![],
        id: None,
        leaves: Vec::new(),
    })
}

#[test]
fn lost_update_refused() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, _) = two_items(&mut h, 1);
    // Both clients have x's page and read x; both write it.
    for conn in [1, 2] {
        h.request(conn, 3, RequestBody::Fetch { page: x.page().unwrap() });
    }
    let r = h.request(1, 4, txn(class, &[x], &[x], 10));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let r = h.request(2, 4, txn(class, &[x], &[x], 20));
    assert_eq!(refusal(&r), Some(RefusedCode::Stale), "{r:?}");
    assert_eq!(r.invalidations, vec![x], "the refusal carries the invalidation");
    let st = h.core.cc.counters();
    assert_eq!((st.refused_stale, st.invalidations_sent), (1, 1));
}

#[test]
fn write_skew_refused() {
    // T1 reads x and y and writes x; T2 reads x and y and writes y. Either alone is fine;
    // both would leave a state no serial order gives.
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, y) = two_items(&mut h, 1);
    for conn in [1, 2] {
        h.request(conn, 3, RequestBody::Fetch { page: x.page().unwrap() });
    }
    // Both commits arrive before either is durable: T2 meets T1 committing (rule 1).
    h.step(Input::Request { conn: 1, id: 4, req: Request::new(txn(class, &[x, y], &[x], 1)) });
    h.step(Input::Request { conn: 2, id: 4, req: Request::new(txn(class, &[x, y], &[y], 2)) });
    let out = h.settle();
    let r1 = &replies_to(&out, 1)[0].1;
    let r2 = &replies_to(&out, 2)[0].1;
    assert!(matches!(r1.body, ReplyBody::CommitOk { .. }), "{r1:?}");
    assert_eq!(refusal(r2), Some(RefusedCode::Conflict), "{r2:?}");
    assert_eq!(h.core.cc.counters().refused_rule1, 1);
    // And once T1 is durable, the same T2 meets x in its client's invalid set.
    let r = h.request(2, 5, txn(class, &[x, y], &[y], 2));
    assert_eq!(refusal(&r), Some(RefusedCode::Stale), "{r:?}");
}

#[test]
fn rule1_refusal_waits_for_the_writer_and_carries_its_invalidation() {
    // T2 read x, which T1 (prepared, not yet durable) writes. T2's refusal is held until T1 is
    // durable, so that it carries x's invalidation: T2's next attempt reads the new x instead
    // of failing again on its stale copy.
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, y) = two_items(&mut h, 1);
    for conn in [1, 2] {
        h.request(conn, 3, RequestBody::Fetch { page: x.page().unwrap() });
    }
    h.step(Input::Request { conn: 1, id: 4, req: Request::new(txn(class, &[x], &[x], 1)) });
    h.step(Input::Request { conn: 2, id: 4, req: Request::new(txn(class, &[x], &[y], 2)) });
    assert!(h.take_answers().is_empty(), "neither is answered before T1 is durable");
    assert_eq!(h.core.cc.counters().refused_rule1, 1, "T2 was refused at validation");
    let out = h.settle();
    let r1 = &replies_to(&out, 1)[0].1;
    let r2 = &replies_to(&out, 2)[0].1;
    assert!(matches!(r1.body, ReplyBody::CommitOk { .. }), "{r1:?}");
    assert_eq!(refusal(r2), Some(RefusedCode::Conflict), "{r2:?}");
    assert_eq!(r2.invalidations, vec![x], "the refusal brings the writer's invalidation");
}

#[test]
fn read_only_sees_one_snapshot() {
    // A read-only transaction that read x before and y after another transaction changed
    // both saw no serial state: refused. One that read current copies commits with no record.
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, y) = two_items(&mut h, 1);
    h.request(2, 3, RequestBody::Fetch { page: x.page().unwrap() });
    let r = h.request(1, 4, txn(class, &[x, y], &[x, y], 7));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let before = h.core.next_lsn();
    let r = h.request(2, 4, txn(class, &[x, y], &[], 0));
    assert_eq!(refusal(&r), Some(RefusedCode::Stale));
    let mut acks = r.invalidations.clone();
    acks.sort();
    assert_eq!(acks, vec![x, y]);
    // The client applies and acknowledges them, fetches the page again, reads both afresh.
    let mut req = Request::new(RequestBody::Fetch { page: x.page().unwrap() });
    req.piggyback.acks = acks;
    h.step(Input::Request { conn: 2, id: 5, req });
    h.settle();
    let r = h.request(2, 6, txn(class, &[x, y], &[], 0));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(h.core.next_lsn(), before, "read-only: no log record");
    assert_eq!(h.core.cc.counters().read_only_validated, 1);
}

#[test]
fn ack_clears_invalid_set() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, _) = two_items(&mut h, 1);
    h.request(2, 3, RequestBody::Fetch { page: x.page().unwrap() });
    h.request(1, 4, txn(class, &[x], &[x], 1));
    // The invalidation rides on client 2's next reply, whatever it is.
    let r = h.request(2, 4, RequestBody::Stats);
    assert_eq!(r.invalidations, vec![x]);
    assert_eq!(h.core.cc.invalid_entries(), 1);
    // Not acknowledged: a transaction that used x is refused.
    let r = h.request(2, 5, txn(class, &[x], &[], 0));
    assert_eq!(refusal(&r), Some(RefusedCode::Stale));
    assert!(r.invalidations.is_empty(), "each invalidation is sent once");
    // Acknowledged (with the commit itself): the invalid set is empty and it commits.
    let mut req = Request::new(txn(class, &[x], &[], 0));
    req.piggyback.acks = vec![x];
    h.step(Input::Request { conn: 2, id: 6, req });
    let r = replies_to(&h.settle(), 2).remove(0).1;
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    assert_eq!(h.core.cc.invalid_entries(), 0);
    assert_eq!(h.core.cc.counters().invalidations_acked, 1);
}

#[test]
fn discarded_page_leaves_directory() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, _) = two_items(&mut h, 1);
    h.request(2, 3, RequestBody::Fetch { page: x.page().unwrap() });
    assert_eq!(h.core.cc.directory_entries(), 2, "client 1 created on the page, 2 fetched it");
    let mut req = Request::new(RequestBody::Stats);
    req.piggyback.discarded = vec![x.page().unwrap()];
    h.step(Input::Request { conn: 2, id: 4, req });
    h.settle();
    assert_eq!(h.core.cc.directory_entries(), 1, "client 2's entry left");
    h.request(1, 4, txn(class, &[x], &[x], 1));
    let r = h.request(2, 5, RequestBody::Stats);
    assert!(r.invalidations.is_empty(), "no invalidation for a page the client dropped");
    assert_eq!(h.core.cc.counters().invalidations_added, 0);
}

#[test]
fn creator_learns_of_changes_to_created_objects() {
    // A client keeps the objects it created cached without ever fetching their page: the page
    // enters its directory at the commit, so another client's change reaches it.
    let mut h = Harness::new(config());
    h.connect(1, b"");
    h.connect(2, b"");
    let (class, x, _) = two_items(&mut h, 1);
    h.request(2, 3, RequestBody::Fetch { page: x.page().unwrap() });
    let r = h.request(2, 4, txn(class, &[x], &[x], 7));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let r = h.request(1, 60, RequestBody::Stats);
    assert_eq!(r.invalidations, vec![x], "the creator hears of the change");
    // And a commit of the creator that read its stale copy is refused.
    let r = h.request(1, 61, txn(class, &[x], &[], 0));
    assert!(matches!(r.body, ReplyBody::CommitRefused { code: RefusedCode::Stale, .. }), "{r:?}");
}

/// Commits through the embedded path at an explicit timestamp (as a coordinator's prepare
/// will); returns the answer.
fn direct_at(
    h: &mut Harness,
    ticket: Ticket,
    reads: &[Oref],
    writes: &[(Oref, Vec<u8>)],
    ts: cc::Timestamp,
) -> Result<CommitOutcome, EngineError> {
    let c = CommitIn {
        versions: writes.iter().map(|(o, b)| (*o, Bytes::from(b.clone()))).collect(),
        reads: reads.to_vec(),
        ts: Some(ts),
        ..CommitIn::default()
    };
    h.step(Input::Direct { ticket, op: DirectOp::Commit(c) });
    let out = h.settle();
    out.into_iter()
        .find_map(|e| match e {
            Effect::Done { ticket: t, result: DirectResult::Committed(r) } if t == ticket => {
                Some(r)
            }
            _ => None,
        })
        .expect("answered")
}

#[test]
fn old_timestamp_below_threshold_refused() {
    let cfg = CoreConfig {
        cc: cc::CcConfig { vq_entries_max: 2, ..cc::CcConfig::default() },
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    let (class, x, y) = two_items(&mut h, 1);
    let first = h.core.cc.last_ts();
    for v in 0..4 {
        h.request(1, 10 + v, txn(class, &[y], &[y], v as u32));
    }
    assert!(h.core.cc.threshold() > first, "the bounded queue raised the threshold");
    let r = direct_at(&mut h, 900, &[], &[(x, item_of(class, 5))], first);
    assert!(matches!(r, Err(EngineError::Conflict(cc::Refusal::TooOld { .. }))), "{r:?}");
    assert_eq!(h.core.cc.counters().refused_threshold, 1);
    // Refused over the wire, it is TooOld.
    let (reply, _) = error_reply(&r.unwrap_err());
    assert_eq!(refusal(&reply), Some(RefusedCode::TooOld));
}

#[test]
fn queue_restored_after_crash() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, y) = two_items(&mut h, 1);
    // S reads x and writes y, durable in the log, not installed.
    let r = h.request(1, 5, txn(class, &[x], &[y], 3));
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    let s_ts = h.core.cc.last_ts();
    let queued = h.core.cc.vq_len();
    // Crash: a new core recovers from the same disk.
    let mut h = Harness::open(h.disk.clone(), config());
    assert_eq!(h.core.cc.vq_len(), queued, "every commit after the checkpoint is back");
    assert!(h.core.cc.last_ts() >= s_ts, "timestamps continue above the restored ones");
    // T at a timestamp before S writes x, which S read: rule 2a finds the restored S, and T
    // is retried after it.
    let before_s = cc::Timestamp { time_us: s_ts.time_us - 1, server: s_ts.server };
    let r = direct_at(&mut h, 901, &[], &[(x, item_of(class, 9))], before_s);
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(h.core.cc.counters().retried_passed, 1, "S's restored read set was consulted");
    // Below the first restored transaction nothing validates.
    let r = direct_at(&mut h, 902, &[], &[(x, item_of(class, 9))], cc::Timestamp::default());
    assert!(matches!(r, Err(EngineError::Conflict(cc::Refusal::TooOld { .. }))), "{r:?}");
}

/// Commits (as connection 1) six objects of 3,000 bytes, one per 4 KiB page, and installs
/// them; returns their orefs.
pub(super) fn six_installed_pages(h: &mut Harness) -> Vec<Oref> {
    let big = ClassDesc::new("t.Big", 8, &[0], VarKind::Bytes).unwrap();
    let r = h.commit(1, 60, vec![], vec![big.to_class_object()]);
    let ReplyBody::CommitOk { created, .. } = r.body else { panic!() };
    let objs: Vec<Vec<u8>> = (0..6).map(|_| big.new_object(created[0].raw(), 3000)).collect();
    let r = h.commit(1, 61, vec![], objs);
    let ReplyBody::CommitOk { created: items, .. } = r.body else { panic!("{r:?}") };
    h.step(Input::Direct { ticket: 1, op: DirectOp::FlushRound });
    h.settle();
    items
}

/// Two cold pages fetched by a client through a page cache of two pages, after an install
/// round left its last two pages there: returns the cache's order (evict-next first), the two
/// cold pages and the two installed ones.
fn two_cold_fetches(mode: crate::pagecache::CacheMode) -> (Vec<PageId>, [PageId; 2], [PageId; 2]) {
    let cfg = CoreConfig { page_cache_bytes: 2 * 4096, page_cache_mode: mode, ..config() };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    let items = six_installed_pages(&mut h);
    let page = |i: usize| items[i].page().unwrap();
    let installed = h.core.page_cache_order();
    assert_eq!(installed.len(), 2, "the round left two pages cached: {installed:?}");
    for (id, i) in [(70, 1), (71, 2)] {
        let r = h.request(1, id, RequestBody::Fetch { page: page(i) });
        assert!(matches!(r.body, ReplyBody::Page { .. }));
    }
    (h.core.page_cache_order(), [page(1), page(2)], [installed[0], installed[1]])
}

#[test]
fn an_exclusive_cache_puts_pages_read_for_clients_next() {
    use crate::pagecache::CacheMode;
    // Exclusive: each cold page goes to the evict-next end, so the second one replaces the
    // first and the installed pages stay.
    let (order, [a, b], [_, newest]) = two_cold_fetches(CacheMode::Exclusive);
    assert_eq!(order, vec![b, newest], "{a:?} was read for the client and went first");
    // Inclusive: the cold pages are the most recent and push the installed ones out.
    let (order, [a, b], _) = two_cold_fetches(CacheMode::Inclusive);
    assert_eq!(order, vec![a, b]);
}

impl Harness {
    /// Sends a request carrying `pb` and settles; returns the one reply to it.
    fn request_with(
        &mut self,
        conn: ConnId,
        id: u64,
        body: RequestBody,
        pb: thor_wire::Piggyback,
    ) -> Reply {
        self.step(Input::Request { conn, id, req: Request { body, piggyback: pb } });
        let out = self.settle();
        let mut replies = replies_to(&out, conn);
        assert_eq!(replies.len(), 1, "one reply: {out:?}");
        replies.remove(0).1
    }

    fn fetch_bytes(&mut self, conn: ConnId, id: u64, page: PageId) -> Bytes {
        match self.request(conn, id, RequestBody::Fetch { page }).body {
            ReplyBody::Page { bytes, .. } => bytes,
            other => panic!("{other:?}"),
        }
    }

    fn demote_notice(&mut self, conn: ConnId, id: u64, page: PageId) -> Vec<PageId> {
        let pb = thor_wire::Piggyback { demoted: vec![page], ..Default::default() };
        self.request_with(conn, id, RequestBody::Stats, pb).wanted
    }

    fn demote_data(&mut self, conn: ConnId, id: u64, page: PageId, bytes: Bytes) {
        let pb = thor_wire::Piggyback { demoted_pages: vec![(page, bytes)], ..Default::default() };
        self.request_with(conn, id, RequestBody::Stats, pb);
    }
}

/// An exclusive core with a page cache of two pages over six installed pages, client 1
/// connected and holding page `items[1]`'s page, which the cache no longer has (client 1
/// fetched two more after it). Returns the harness, the items and the held page's bytes.
fn a_client_holding_an_uncached_page() -> (Harness, Vec<Oref>, Bytes) {
    let cfg = CoreConfig {
        page_cache_bytes: 2 * 4096,
        page_cache_mode: crate::pagecache::CacheMode::Exclusive,
        ..config()
    };
    let mut h = Harness::new(cfg);
    h.connect(1, b"");
    let items = six_installed_pages(&mut h);
    let page = |i: usize| items[i].page().unwrap();
    let held = h.fetch_bytes(1, 70, page(1));
    h.fetch_bytes(1, 71, page(2));
    h.fetch_bytes(1, 72, page(3));
    assert!(!h.core.page_cache_order().contains(&page(1)), "read for the client, evicted");
    (h, items, held)
}

#[test]
fn demoted_page_is_asked_for_and_lands_at_evict_last() {
    let (mut h, items, held) = a_client_holding_an_uncached_page();
    let p1 = items[1].page().unwrap();
    assert_eq!(h.demote_notice(1, 80, p1), vec![p1], "not cached, current: the server asks");
    h.demote_data(1, 81, p1, held.clone());
    let order = h.core.page_cache_order();
    assert_eq!(order.last(), Some(&p1), "at the evict-last end: {order:?}");
    let s = h.core.server_stats();
    assert_eq!((s.demote_notices, s.demotions_wanted, s.demotions_stored), (1, 1, 1));
    assert_eq!(s.demotions_refused, 0);
    // Another client now reads the page from the cache: the demoted bytes, exactly.
    h.connect(2, b"");
    assert_eq!(h.fetch_bytes(2, 90, p1), held);
}

/// A new version of `item` (a `t.Big` of `six_installed_pages`, whose page is `page`) with
/// its last byte set, so that it differs from the installed one.
fn a_new_version(page: &[u8], item: Oref) -> Vec<u8> {
    let view = PageView::parse(page).unwrap();
    let obj = view.object(item.oid()).unwrap();
    let mut v = obj.to_vec();
    *v.last_mut().unwrap() ^= 0x5a;
    v
}

#[test]
fn stale_demotion_refused() {
    // Written after the fetch, before the notice: not even asked for.
    let (mut h, items, held) = a_client_holding_an_uncached_page();
    let p1 = items[1].page().unwrap();
    h.connect(2, b"");
    let r = h.commit(2, 92, vec![(items[1], a_new_version(&held, items[1]))], vec![]);
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    // (Validating the commit read the page into the cache, where the notice reorders it.)
    assert!(h.demote_notice(1, 80, p1).is_empty(), "stale at the notice");
    h.demote_data(1, 81, p1, held.clone());
    let s = h.core.server_stats();
    assert_eq!((s.demotions_stored, s.demotions_refused), (0, 1), "unsolicited data is refused");
    assert_ne!(h.fetch_bytes(2, 93, p1), held);

    // Written after the server asked, before the data came: refused.
    let (mut h, items, held) = a_client_holding_an_uncached_page();
    let p1 = items[1].page().unwrap();
    h.connect(2, b"");
    assert_eq!(h.demote_notice(1, 80, p1), vec![p1]);
    let v = a_new_version(&held, items[1]);
    let r = h.commit(2, 92, vec![(items[1], v.clone())], vec![]);
    assert!(matches!(r.body, ReplyBody::CommitOk { .. }), "{r:?}");
    h.demote_data(1, 81, p1, held);
    let s = h.core.server_stats();
    assert_eq!((s.demotions_stored, s.demotions_refused), (0, 1));
    // A fetch returns the committed version, even after the version is installed.
    h.step(Input::Direct { ticket: 1, op: DirectOp::FlushRound });
    h.settle();
    let now = h.fetch_bytes(2, 93, p1);
    let view = PageView::parse(&now).unwrap();
    assert_eq!(view.object(items[1].oid()).unwrap(), &v[..]);
}

#[test]
fn demoted_bytes_other_than_those_sent_are_refused() {
    let (mut h, items, held) = a_client_holding_an_uncached_page();
    let p1 = items[1].page().unwrap();
    assert_eq!(h.demote_notice(1, 80, p1), vec![p1]);
    // A client that sent its frame with a reference swizzled in place, say: one bit off.
    let mut forged = held.to_vec();
    forged[200] ^= 1;
    h.demote_data(1, 81, p1, Bytes::from(forged));
    assert!(!h.core.page_cache_order().contains(&p1));
    assert_eq!(h.core.server_stats().demotions_refused, 1);
}

#[test]
fn demotion_of_a_page_the_cache_holds_is_control_only() {
    let (mut h, items, _) = a_client_holding_an_uncached_page();
    let p3 = items[3].page().unwrap();
    let before = h.core.page_cache_order();
    assert_eq!(before.first(), Some(&p3), "read for the client: evict-next");
    assert!(h.demote_notice(1, 80, p3).is_empty(), "cached: no data wanted");
    let after = h.core.page_cache_order();
    assert_eq!(after.last(), Some(&p3), "reordered to evict-last: {after:?}");
    let s = h.core.server_stats();
    assert_eq!((s.demotions_reordered, s.demotions_wanted, s.demoted_bytes), (1, 0, 0));
}

#[test]
fn an_inclusive_server_takes_no_demotions() {
    let mut h = Harness::new(config());
    h.step(Input::Connect { conn: 10 });
    let r = h.request(10, 1, RequestBody::Hello(Hello::new(&b""[..], "test")));
    let ReplyBody::HelloOk(info) = r.body else { panic!("{r:?}") };
    assert!(!info.demotions);
    let items = {
        h.connect(1, b"");
        six_installed_pages(&mut h)
    };
    let p1 = items[1].page().unwrap();
    let held = h.fetch_bytes(10, 2, p1);
    assert!(h.demote_notice(10, 3, p1).is_empty());
    h.demote_data(10, 4, p1, held);
    let s = h.core.server_stats();
    assert_eq!((s.demotions_wanted, s.demotions_stored, s.demoted_bytes), (0, 0, 0));
}

/// The core's own commit path (`commit_path`): object shipping takes no whole pages,
/// refusing such a commit at its gate before anything reaches the log.
#[test]
fn a_whole_page_commit_to_a_server_not_in_wpl_mode_is_refused_at_the_gate() {
    let mut h = Harness::new(config());
    h.connect(1, b"");
    let (class, x, _) = two_items(&mut h, 1);
    let next = h.core.store.next_lsn();
    let page = x.page().expect("an object's page");
    let c = CommitIn {
        versions: vec![(x, Bytes::from(item_of(class, 9)))],
        pages: Some(vec![(page, Bytes::from(vec![0u8; 4096]))]),
        ..CommitIn::default()
    };
    h.step(Input::Direct { ticket: 77, op: DirectOp::Commit(c) });
    let out = h.settle();
    let answer = out.iter().find_map(|e| match e {
        Effect::Done { ticket: 77, result: DirectResult::Committed(r) } => Some(r),
        _ => None,
    });
    assert!(
        matches!(answer, Some(Err(EngineError::Invalid(InvalidCommit::BadPageRecord(_))))),
        "{answer:?}"
    );
    assert_eq!(h.core.store.next_lsn(), next, "nothing was appended");
    assert_eq!(h.core.stats().wpl, commit_path::WplCounters::default());
}
