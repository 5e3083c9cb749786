//! A storage failure, one behaviour per test, on a fault-injecting disk (a `FaultDisk` made
//! full with `set_capacity`, not a tmpfs, so that CI runs it): the failure is said once at
//! ERROR and shown in health and counters; commits and new sessions are refused with the
//! reason; reads of committed data go on; a retry loop of opens on the full disk leaves the
//! directory as it was; once space is back the database opens with every acknowledged commit.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use thor_core::Oref;
use thor_server::{CommitRequest, Engine, EngineError, Health, ReplySink};
use thor_storage::{Disk, FaultDisk};
use thor_wire::{ErrorCode, Reply, ReplyBody, Request, RequestBody};

/// What the engine logs, captured as text: `tracing_subscriber`'s formatter writing into a
/// shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// A subscriber that writes every event (level first) here.
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        let sink = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .finish()
    }

    /// The lines logged at ERROR.
    fn errors(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines().filter(|l| l.contains("ERROR")).map(str::to_owned).collect()
    }
}

/// A connection's replies, as the engine delivers them.
#[derive(Default)]
struct Replies(Mutex<Vec<(u64, Reply, bool)>>);

impl ReplySink for Replies {
    fn deliver(&self, id: u64, reply: Reply, close: bool) {
        self.0.lock().unwrap().push((id, reply, close));
    }
}

/// Every file of the disk with its bytes: what "leaves nothing behind" compares.
fn files(disk: &FaultDisk) -> Vec<(String, Vec<u8>)> {
    disk.list().unwrap().into_iter().map(|n| (n.clone(), disk.file_bytes(&n).unwrap())).collect()
}

/// Commits one new item; its oref.
fn create_one(e: &Engine, class: Oref, seq: u32) -> Result<Oref, EngineError> {
    let created = vec![item(class.raw(), 0, 1, seq, &[seq as u8; 200])];
    Ok(e.commit(CommitRequest { versions: vec![], created })?.created[0])
}

#[test]
fn full_disk_is_reported_and_recovered() {
    let disk = FaultDisk::new();
    let log = Captured::default();
    let _log = tracing::subscriber::set_default(log.subscriber());
    let e = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&e);
    let mut acked = Vec::new();
    for seq in 0..20 {
        acked.push((create_one(&e, class, seq).unwrap(), seq));
    }
    // A session opened before the failure, which goes on reading after it.
    let early = Arc::new(Replies::default());
    let conn = e.connect(early.clone());
    let hello = Request::new(RequestBody::Hello(thor_wire::Hello::new(Vec::new(), "early")));
    e.settle(e.request(conn, 1, hello));
    assert!(matches!(early.0.lock().unwrap()[0].1.body, ReplyBody::HelloOk(_)));
    assert_eq!(e.health(), Health::Serving);

    // The disk fills up: the next commit that needs space fails, and so does every later one.
    disk.set_capacity(Some(disk.used_bytes()));
    let mut seq = 20;
    let err = loop {
        match create_one(&e, class, seq) {
            Ok(oref) => acked.push((oref, seq)),
            Err(err) => break err,
        }
        seq += 1;
        assert!(seq < 10_000, "the full disk never refused a commit");
    };
    assert!(matches!(err, EngineError::Failed(_)), "{err}");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    let later = create_one(&e, class, seq + 1).unwrap_err();
    assert!(matches!(later, EngineError::Failed(_)), "{later}");

    // Said once, at ERROR, with the cause.
    let errors = log.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("No space left on device"), "{}", errors[0]);

    // Shown in health and in the counters.
    match e.health() {
        Health::Failed { cause, .. } => assert!(cause.contains("No space left"), "{cause}"),
        other => panic!("health {other:?}"),
    }
    // A new session is refused with the reason, and closed.
    let late = Arc::new(Replies::default());
    e.connect(late.clone());
    let (id, reply, close) = late.0.lock().unwrap()[0].clone();
    assert_eq!((id, close), (0, true));
    match reply.body {
        ReplyBody::Error { code, message } => {
            assert_eq!(code, ErrorCode::ServerFailed);
            assert!(message.contains("no new sessions"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let s = e.server_stats();
    assert_eq!((s.health, s.storage_failures, s.sessions_refused_failed), (1, 1, 1));
    assert!(s.database_bytes > 0 && s.log_disk_bytes > 0);

    // Reads of committed data go on: direct fetches, and the session opened before.
    for &(oref, seq) in &acked {
        assert_eq!(fields(&read(&e, oref).unwrap()).2, seq);
    }
    let (last, _) = *acked.last().unwrap();
    let fetch = Request::new(RequestBody::Fetch { page: last.page().unwrap() });
    e.settle(e.request(conn, 2, fetch));
    assert!(
        matches!(early.0.lock().unwrap().last().unwrap().1.body, ReplyBody::Page { .. }),
        "the early session still reads"
    );
    // Closing a failed engine writes nothing (it does not install) and says why.
    let before = files(&disk);
    assert!(matches!(e.close(), Err(EngineError::Failed(_))));
    assert_eq!(files(&disk), before);

    // A retry loop of opens while the disk is still full never makes things worse.
    for attempt in 0..20 {
        if let Ok(e) = Engine::open(arc(disk.clone()), small_opts()) {
            e.halt();
        }
        assert_eq!(files(&disk), before, "open attempt {attempt} changed the directory");
    }

    // Space is back: the database opens with every acknowledged commit and takes new ones.
    disk.set_capacity(None);
    let e = Engine::open(arc(disk.clone()), small_opts()).unwrap();
    assert_eq!(e.health(), Health::Serving);
    for &(oref, seq) in &acked {
        assert_eq!(fields(&read(&e, oref).unwrap()).2, seq, "acknowledged commit {seq}");
    }
    let fresh = create_one(&e, class, 9_999).unwrap();
    assert_eq!(fields(&read(&e, fresh).unwrap()).2, 9_999);
    e.close().unwrap();
}

#[test]
fn failed_opens_leave_nothing_behind() {
    let disk = FaultDisk::new();
    let e = Engine::create(arc(disk.clone()), small_opts()).unwrap();
    let class = install_class(&e);
    let mut acked = Vec::new();
    for seq in 0..10 {
        acked.push((create_one(&e, class, seq).unwrap(), seq));
    }
    e.halt();
    // A crash left half a flush batch after the last record: the next open must keep those
    // bytes in a `.torn` file before it cuts them, which a full disk does not allow.
    let segment = disk
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| thor_storage::log::parse_segment_name("log", n).is_some())
        .max()
        .unwrap();
    disk.edit_file(&segment, |b| b.extend_from_slice(&[0x5a; 37])).unwrap();
    disk.set_capacity(Some(disk.used_bytes()));
    let before = files(&disk);
    for attempt in 0..100 {
        let err = Engine::open(arc(disk.clone()), small_opts()).unwrap_err();
        assert!(err.to_string().contains("No space left on device"), "attempt {attempt}: {err}");
        assert_eq!(files(&disk), before, "open attempt {attempt} left something behind");
    }
    // Space is back: one open keeps the tail in one file and serves every commit.
    disk.set_capacity(None);
    let e = Engine::open(arc(disk.clone()), small_opts()).unwrap();
    for &(oref, seq) in &acked {
        assert_eq!(fields(&read(&e, oref).unwrap()).2, seq);
    }
    let torn: Vec<_> = disk.list().unwrap().into_iter().filter(|n| n.contains(".torn")).collect();
    assert_eq!(torn.len(), 1, "{torn:?}");
    e.close().unwrap();
}
