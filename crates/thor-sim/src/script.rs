//! Hand-written scenarios: a small language for stepping a cluster of real server cores one
//! message at a time, with golden output ([`goldenscript`], in the manner of toydb's and
//! raft-rs's scripts).
//!
//! The seeded worlds ([`crate::world`], [`crate::twopc`]) find bugs by covering many shapes
//! of run; a scenario pins one shape down so that a reader sees it happen: which message
//! arrives first, what a restarted server answers, what each client is told. The servers are
//! the two-phase world's (the same [`crate::twopc`] settings, accounts with an opening balance
//! of 1,000), each over its own [`MemDisk`]; the client is one connection per server. Client
//! requests arrive at once; server-to-server messages wait in a queue until the script
//! delivers or drops them; the disk is instant (every append is synced before the next input,
//! so a crash loses nothing acknowledged and nothing prepared); time passes only when the
//! script says so.
//!
//! # Commands
//!
//! - `servers N [accounts=K]`: N servers (1 to 3), each with K accounts (default 2); then
//!   the clock moves past the refusal window of a fresh open, so that the client's
//!   timestamps are served.
//! - `transfer NAME from=S.A to=S.A [amount=X] [ahead=D] [bad=S]`: a transaction moving X
//!   (default 10) from account A of server S to another; the first server coordinates; its
//!   timestamp is the clock plus D (default 10) µs. It reads the balances as they are now.
//!   With `bad=S` its part at server S writes an object of the wrong shape, which S refuses:
//!   a participant that votes no.
//! - `prepare NAME at=S`: the client sends NAME's `Prepare` to server S.
//! - `deliver [from=S] [to=S] [all]`: the oldest queued server-to-server message (from S,
//!   to S) arrives; with `all`, every one, including those the deliveries send, until none
//!   matches. `drop` takes the same arguments and loses them instead.
//! - `crash S`: server S dies (its connection breaks, messages to it are lost);
//!   `restart S`: it recovers from its disk and the client reconnects.
//! - `tick [us=D]`: D µs pass (default a tick of the seeded world) and every live server
//!   gets a tick.
//! - `state [S]`: two-phase commit's state and counters and the accounts' balances at S (or
//!   every server).
//!
//! Every command prints what the client was told (`client <- s1: T committed`) and the
//! messages servers queued (`s2 -> s1 queued: vote no T`), so the golden output shows each
//! step's consequences. `tests/scenarios.rs` runs every script in `tests/scenarios/`;
//! `UPDATE_GOLDENFILES=1` rewrites their output.

use std::collections::{BTreeMap, VecDeque};
use std::error::Error;
use std::fmt::Write as _;

use bytes::Bytes;
use thor_core::le::{put_u32, u32_at};
use thor_core::{ClassDesc, Oref, PageView, RawRef, ServerId, VarKind};
use thor_server::io;
use thor_server::{CommitIn, ConnId, DirectOp, DirectResult, Effect, Input};
use thor_storage::MemDisk;
use thor_wire::{
    CLIENT_TIE_BIT, Commit, Hello, Participant, PeerMsg, Prepare, ReplyBody, Request, RequestBody,
    Stamp,
};

use crate::check::Violation;
use crate::server::{self, Node};
use crate::twopc::{BALANCE_AT, OPENING, TICK_US, TXN_AT, WRITER_AT, core_config};

/// The client's connection at every server (one client, one connection each).
const CONN: ConnId = 1;

/// Servers a script may start.
const SERVERS_MAX: usize = 3;

/// Accounts a server may hold in a script.
const ACCOUNTS_MAX: usize = 16;

/// Deliveries one `deliver all` may make before it is declared endless.
const DELIVERIES_MAX: usize = 1_000;

type Res<T> = Result<T, Box<dyn Error>>;

/// A server: its disk, its process if it is up, its accounts.
struct Server {
    disk: MemDisk,
    node: Option<Node>,
    class: Oref,
    accounts: Vec<Oref>,
}

/// The replies and peer messages of a step, in order.
#[derive(Default)]
struct Said(Vec<Effect>);

impl server::Settled for Said {
    fn said(&mut self, effect: Effect) {
        self.0.push(effect);
    }
}

/// One account a transaction writes: (server, account, balance it writes).
type Write = (usize, usize, u32);

/// A transaction the script defined.
struct Txn {
    name: String,
    number: u32,
    stamp: Stamp,
    coordinator: usize,
    writes: Vec<Write>,
    /// The server whose part writes an object of the wrong shape (a no vote).
    bad: Option<usize>,
}

/// The scripted cluster; a [`goldenscript::Runner`]. See the module documentation.
#[derive(Default)]
pub struct Scenario {
    now: u64,
    servers: Vec<Server>,
    /// Server-to-server messages in flight, oldest first: (from, to, message).
    net: VecDeque<(usize, usize, PeerMsg)>,
    txns: Vec<Txn>,
    /// The client's requests: id -> (transaction, server).
    requests: BTreeMap<u64, (usize, usize)>,
    next_id: u64,
    /// What the command in progress printed.
    out: String,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("now", &self.now)
            .field("servers", &self.servers.len())
            .field("in_flight", &self.net.len())
            .finish()
    }
}

impl goldenscript::Runner for Scenario {
    type Command = goldenscript::Command;

    fn run(&mut self, command: &goldenscript::Command, _: &goldenscript::Context) -> Res<String> {
        let mut args = command.consume_args();
        match command.name.as_str() {
            "servers" => {
                let n: usize = args.next_pos().ok_or("servers N")?.parse()?;
                let k = args.take_key("accounts").map(str::parse).transpose()?.unwrap_or(2);
                args.reject_next()?;
                self.start_cluster(n, k)?;
            }
            "transfer" => self.define(&mut args)?,
            "prepare" => {
                let name = args.next_pos().ok_or("prepare NAME at=S")?;
                let at = server_arg(args.take_key("at").ok_or("prepare NAME at=S")?)?;
                args.reject_next()?;
                self.prepare(name, at)?;
            }
            "deliver" | "drop" => {
                let from = args.take_key("from").map(server_arg).transpose()?;
                let to = args.take_key("to").map(server_arg).transpose()?;
                let all = args.next_pos() == Some("all");
                args.reject_next()?;
                self.deliver(command.name == "deliver", from, to, all)?;
            }
            "crash" => {
                let s = server_arg(args.next_pos().ok_or("crash S")?)?;
                args.reject_next()?;
                self.crash(s)?;
            }
            "restart" => {
                let s = server_arg(args.next_pos().ok_or("restart S")?)?;
                args.reject_next()?;
                self.restart(s)?;
            }
            "tick" => {
                let us = args.take_key("us").map(str::parse).transpose()?.unwrap_or(TICK_US);
                args.reject_next()?;
                self.tick(us)?;
            }
            "state" => {
                let s = args.next_pos().map(server_arg).transpose()?;
                args.reject_next()?;
                self.state(s)?;
            }
            other => return Err(format!("no command {other}").into()),
        }
        Ok(std::mem::take(&mut self.out))
    }
}

/// A server's number in a script (1-based) as an index.
fn server_arg(s: &str) -> Res<usize> {
    let n: usize = s.trim_start_matches('s').parse()?;
    if n == 0 || n > SERVERS_MAX {
        return Err(format!("no server {s}").into());
    }
    Ok(n - 1)
}

/// `S.A` (server, account), both as indexes.
fn account_arg(s: &str) -> Res<(usize, usize)> {
    let (sv, a) = s.split_once('.').ok_or_else(|| format!("{s} is not S.A"))?;
    Ok((server_arg(sv)?, a.parse()?))
}

fn violation(v: Violation) -> Box<dyn Error> {
    v.0.into()
}

impl Scenario {
    fn start_cluster(&mut self, n: usize, accounts: usize) -> Res<()> {
        if !self.servers.is_empty() || n == 0 || n > SERVERS_MAX || accounts > ACCOUNTS_MAX {
            return Err(format!("servers {n} accounts={accounts}: at most once, 1 to {SERVERS_MAX} servers, {ACCOUNTS_MAX} accounts").into());
        }
        self.now = 1_000_000;
        self.next_id = 1;
        let desc = ClassDesc::new("sim.Account", 12, &[], VarKind::None).expect("a valid class");
        for s in 0..n {
            let disk = MemDisk::new();
            io::create(&disk, 4096, ServerId(s as u32 + 1))?;
            self.servers.push(Server { disk, node: None, class: Oref::NULL, accounts: Vec::new() });
            self.open(s, n)?;
            let mut created = vec![Bytes::from(desc.to_class_object())];
            for _ in 0..accounts {
                let mut a = desc.new_object(RawRef::tagged_word(0), 0);
                put_u32(&mut a, BALANCE_AT, OPENING);
                created.push(Bytes::from(a));
            }
            let op = DirectOp::Commit(CommitIn { created, ..CommitIn::default() });
            let out = match self.step(s, Input::Direct { ticket: 1, op })?.pop() {
                Some(DirectResult::Committed(Ok(out))) => out,
                other => return Err(format!("setup commit: {other:?}").into()),
            };
            self.servers[s].class = out.created[0];
            self.servers[s].accounts = out.created[1..].to_vec();
            writeln!(self.out, "s{} up: {accounts} accounts of {OPENING}", s + 1)?;
        }
        // After an open, timestamps up to `future_max_us` ahead of the clock are refused.
        self.now += core_config(n, 0).twopc.future_max_us + 1_000;
        Ok(())
    }

    /// Recovers server `s` from its disk and connects the client to it.
    fn open(&mut self, s: usize, n: usize) -> Res<()> {
        let study = thor_server::StudyOptions::default();
        let (mut node, _) = server::open(&self.servers[s].disk, core_config(n, 0), &study)?;
        node.core.recovered_at(self.now);
        self.servers[s].node = Some(node);
        self.step(s, Input::Connect { conn: CONN })?;
        let hello = Request::new(RequestBody::Hello(Hello::new(&b""[..], "scenario")));
        self.step(s, Input::Request { conn: CONN, id: 0, req: hello })?;
        Ok(())
    }

    /// Steps server `s` with `input` and performs every effect at once: appends are synced,
    /// disk effects done, replies printed, peer messages queued. Returns the direct answers.
    fn step(&mut self, s: usize, input: Input) -> Res<Vec<DirectResult>> {
        let Some(node) = self.servers[s].node.as_mut() else { return Ok(Vec::new()) };
        let mut said = Said::default();
        let answers = server::settle_now(node, self.now, input, &mut said).map_err(violation)?;
        for e in said.0 {
            self.said(s, e)?;
        }
        Ok(answers)
    }

    /// Prints a reply of server `s` to the client (but not the `Hello`'s, request 0), or
    /// queues and prints a message of `s` to another server.
    fn said(&mut self, s: usize, e: Effect) -> Res<()> {
        match e {
            Effect::Reply { id, reply, .. } if id != 0 => {
                let what = self.describe_reply(id, &reply.body);
                writeln!(self.out, "client <- s{}: {what}", s + 1)?;
            }
            Effect::Peer { to, msg } => {
                let t = to.0 as usize - 1;
                writeln!(self.out, "s{} -> s{} queued: {}", s + 1, t + 1, self.msg(&msg))?;
                self.net.push_back((s, t, msg));
            }
            _ => {}
        }
        Ok(())
    }

    /// What a reply tells the client, by the transaction it answers.
    fn describe_reply(&self, id: u64, body: &ReplyBody) -> String {
        let name = match self.requests.get(&id) {
            Some(&(t, _)) => self.txns[t].name.as_str(),
            None => "-",
        };
        match body {
            ReplyBody::CommitOk { .. } => format!("{name} committed"),
            ReplyBody::Prepared { .. } => format!("{name} prepared"),
            ReplyBody::CommitRefused { code, .. } => format!("{name} refused ({code})"),
            other => format!("{name} {}", other.name()),
        }
    }

    /// A peer message, with the transaction named.
    fn msg(&self, m: &PeerMsg) -> String {
        let stamp = m.stamp();
        let name = self
            .txns
            .iter()
            .find(|t| t.stamp == stamp)
            .map_or_else(|| stamp.to_string(), |t| t.name.clone());
        match *m {
            PeerMsg::Vote { yes: true, .. } => format!("vote yes {name}"),
            PeerMsg::Vote { yes: false, .. } => format!("vote no {name}"),
            PeerMsg::Decide { commit: true, .. } => format!("decide commit {name}"),
            PeerMsg::Decide { commit: false, .. } => format!("decide abort {name}"),
            PeerMsg::DecideAck { .. } => format!("decide-ack {name}"),
            PeerMsg::Query { .. } => format!("query {name}"),
            PeerMsg::AskVote { .. } => format!("ask-vote {name}"),
        }
    }

    /// The balance account `a` of server `s` holds now, read directly.
    fn balance(&mut self, s: usize, a: usize) -> Res<(u32, u32, u32)> {
        let o =
            *self.servers[s].accounts.get(a).ok_or_else(|| format!("no account s{}.{a}", s + 1))?;
        let page = o.page().expect("a real page");
        let bytes =
            match self.step(s, Input::Direct { ticket: 2, op: DirectOp::Fetch(page) })?.pop() {
                Some(DirectResult::Page(Ok(b))) => b,
                other => return Err(format!("fetch of {page}: {other:?}").into()),
            };
        let view = PageView::parse(&bytes)?;
        let obj = view.object(o.oid()).ok_or_else(|| format!("{o} is missing"))?;
        Ok((u32_at(obj, WRITER_AT), u32_at(obj, TXN_AT), u32_at(obj, BALANCE_AT)))
    }

    fn define(&mut self, args: &mut goldenscript::ArgumentConsumer<'_>) -> Res<()> {
        let usage = "transfer NAME from=S.A to=S.A [amount=X] [ahead=D] [bad=S]";
        let name = args.next_pos().ok_or(usage)?.to_string();
        let from = account_arg(args.take_key("from").ok_or(usage)?)?;
        let to = account_arg(args.take_key("to").ok_or(usage)?)?;
        let amount: u32 = args.take_key("amount").map(str::parse).transpose()?.unwrap_or(10);
        let ahead: u64 = args.take_key("ahead").map(str::parse).transpose()?.unwrap_or(10);
        let bad = args.take_key("bad").map(server_arg).transpose()?;
        args.reject_next()?;
        for s in [from.0, to.0].into_iter().chain(bad) {
            if self.servers.get(s).is_none_or(|sv| sv.node.is_none()) {
                return Err(format!("{name}: server s{} is not up", s + 1).into());
            }
        }
        let (fb, tb) = (self.balance(from.0, from.1)?.2, self.balance(to.0, to.1)?.2);
        let amount = amount.min(fb);
        let number = self.txns.len() as u32 + 1;
        let stamp = Stamp { time_us: self.now + ahead, tie: CLIENT_TIE_BIT | (1 << 16) | number };
        self.txns.push(Txn {
            name: name.clone(),
            number,
            stamp,
            coordinator: from.0,
            writes: vec![(from.0, from.1, fb - amount), (to.0, to.1, tb + amount)],
            bad,
        });
        writeln!(
            self.out,
            "{name}: {amount} from s{}.{} to s{}.{}, coordinator s{}",
            from.0 + 1,
            from.1,
            to.0 + 1,
            to.1,
            from.0 + 1
        )?;
        Ok(())
    }

    /// The client sends transaction `name`'s prepare to server `s`.
    fn prepare(&mut self, name: &str, s: usize) -> Res<()> {
        let t = self
            .txns
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| format!("no txn {name}"))?;
        let txn = &self.txns[t];
        let mut participants: Vec<Participant> = Vec::new();
        for &(sv, _, _) in &txn.writes {
            if !participants.iter().any(|p| p.server.0 as usize == sv + 1) {
                participants.push(Participant { server: ServerId(sv as u32 + 1), writes: true });
            }
        }
        if !participants.iter().any(|p| p.server.0 as usize == s + 1) {
            return Err(format!("{name} has no part at s{}", s + 1).into());
        }
        let mut commit = Commit::default();
        let desc = ClassDesc::new("sim.Account", 12, &[], VarKind::None).expect("a valid class");
        for &(sv, a, balance) in txn.writes.iter().filter(|w| w.0 == s) {
            let o = self.servers[sv].accounts[a];
            commit.reads.push(o);
            let v = if txn.bad == Some(s) {
                // The wrong shape: the server refuses the part (a no vote).
                vec![0u8; 4]
            } else {
                let mut v = desc.new_object(self.servers[sv].class.raw(), 0);
                put_u32(&mut v, WRITER_AT, 1);
                put_u32(&mut v, TXN_AT, txn.number);
                put_u32(&mut v, BALANCE_AT, balance);
                v
            };
            commit.versions.push((o, Bytes::from(v)));
        }
        let p = Prepare {
            stamp: txn.stamp,
            coordinator: Some(ServerId(txn.coordinator as u32 + 1)),
            participants,
            commit,
        };
        let id = self.next_id;
        self.next_id += 1;
        self.requests.insert(id, (t, s));
        if self.servers[s].node.is_none() {
            writeln!(self.out, "s{} is down: the prepare is lost", s + 1)?;
            return Ok(());
        }
        let req = Request::new(RequestBody::Prepare(Box::new(p)));
        self.step(s, Input::Request { conn: CONN, id, req })?;
        Ok(())
    }

    /// Delivers (or drops) the oldest queued message from `from` to `to`; every one with `all`.
    fn deliver(
        &mut self,
        deliver: bool,
        from: Option<usize>,
        to: Option<usize>,
        all: bool,
    ) -> Res<()> {
        for _ in 0..DELIVERIES_MAX {
            let Some(i) = self
                .net
                .iter()
                .position(|&(f, t, _)| from.is_none_or(|x| x == f) && to.is_none_or(|x| x == t))
            else {
                if !all {
                    return Err("no such message in flight".into());
                }
                return Ok(());
            };
            let (f, t, msg) = self.net.remove(i).expect("found");
            let verb = if deliver { "delivered" } else { "dropped" };
            writeln!(self.out, "s{} -> s{} {verb}: {}", f + 1, t + 1, self.msg(&msg))?;
            if deliver {
                if self.servers[t].node.is_some() {
                    self.step(t, Input::Peer { msg })?;
                } else {
                    writeln!(self.out, "s{} is down: lost", t + 1)?;
                }
            }
            if !all {
                return Ok(());
            }
        }
        Err(format!("deliver all: more than {DELIVERIES_MAX} messages").into())
    }

    fn crash(&mut self, s: usize) -> Res<()> {
        if self.servers[s].node.take().is_none() {
            return Err(format!("s{} is already down", s + 1).into());
        }
        self.servers[s].disk.crash(self.now);
        let before = self.net.len();
        self.net.retain(|&(_, t, _)| t != s);
        writeln!(self.out, "s{} crashed ({} messages to it lost)", s + 1, before - self.net.len())?;
        Ok(())
    }

    fn restart(&mut self, s: usize) -> Res<()> {
        if self.servers[s].node.is_some() {
            return Err(format!("s{} is up", s + 1).into());
        }
        crate::check::offline(&self.servers[s].disk, "a scenario's crashed server")
            .map_err(violation)?;
        let n = self.servers.len();
        self.open(s, n)?;
        let t = self.servers[s].node.as_ref().expect("opened").core.twopc_stats();
        writeln!(self.out, "s{} recovered, parts in doubt: {}", s + 1, t.in_doubt)?;
        Ok(())
    }

    fn tick(&mut self, us: u64) -> Res<()> {
        self.now += us;
        for s in 0..self.servers.len() {
            self.step(s, Input::Tick)?;
        }
        Ok(())
    }

    fn state(&mut self, only: Option<usize>) -> Res<()> {
        for s in 0..self.servers.len() {
            if only.is_some_and(|o| o != s) {
                continue;
            }
            let Some(node) = &self.servers[s].node else {
                writeln!(self.out, "s{}: down", s + 1)?;
                continue;
            };
            let t = node.core.twopc_stats();
            let refused_threshold = node.core.server_stats().refused_threshold;
            let c = t.counters;
            writeln!(
                self.out,
                "s{}: in doubt {}, coordinating {}; prepared {}, early no votes {}, presumed aborts {}, refused too old {refused_threshold}",
                s + 1,
                t.in_doubt,
                t.coordinating,
                c.prepared,
                c.early_no_votes,
                c.presumed_aborts,
            )?;
            let mut accounts = Vec::new();
            for a in 0..self.servers[s].accounts.len() {
                let (w, x, b) = self.balance(s, a)?;
                let by = if w == 0 { "opening".to_string() } else { format!("txn {x}") };
                accounts.push(format!("s{}.{a}={b} ({by})", s + 1));
            }
            writeln!(self.out, "  {}", accounts.join(", "))?;
        }
        Ok(())
    }
}
