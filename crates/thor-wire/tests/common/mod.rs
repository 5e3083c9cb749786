//! Proptest strategies for every message of the protocol.
#![allow(dead_code)]

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use thor_core::ids::PAGE_ID_MAX;
use thor_core::{ClientId, Lsn, Oid, Oref, PageId, ServerId};
use thor_wire::limits::{FRAME_BYTES_MAX, FRAME_BYTES_SETTING_MIN, PREFETCH_PAGES_MAX};
use thor_wire::{
    BackupInfo, CLIENT_TIE_BIT, CacheVerdict, Commit, ErrorCode, Hello, HistoryPoint, ImageFile,
    ImageInfo, Outcome, Participant, PeerMsg, Piggyback, Prefetch, PrefetchHint, Prepare, RaftMsg,
    RefusedCode, ReplicaReply, ReplicaRequest, Reply, ReplyBody, Request, RequestBody, Resume,
    Resumed, Seen, SeenRange, ServerInfo, ServerStats, Stamp,
};

pub fn oref() -> impl Strategy<Value = Oref> {
    (1..=PAGE_ID_MAX, 0u16..512)
        .prop_map(|(p, o)| Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap()))
}

pub fn page_id() -> impl Strategy<Value = PageId> {
    (1..=PAGE_ID_MAX).prop_map(|p| PageId::new(p).unwrap())
}

pub fn blob(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max).prop_map(Bytes::from)
}

pub fn piggyback() -> impl Strategy<Value = Piggyback> {
    (
        vec(oref(), 0..8),
        vec(page_id(), 0..8),
        vec(page_id(), 0..8),
        vec((page_id(), vec(any::<u8>(), 1024..=1024)), 0..3),
        proptest::option::of(contention()),
    )
        .prop_map(|(acks, discarded, demoted, data, contention)| Piggyback {
            acks,
            discarded,
            demoted,
            demoted_pages: data.into_iter().map(|(p, b)| (p, Bytes::from(b))).collect(),
            contention,
        })
}

/// A well-formed contention report (version 6): at least one count, the object exactly when
/// an invalidation abort is reported.
pub fn contention() -> impl Strategy<Value = thor_wire::Contention> {
    let most = thor_wire::limits::CONTENTION_COUNT_MAX as u32;
    (0..=most, 0..=most, oref()).prop_filter_map("an empty report", |(aborts, retries, o)| {
        let c = thor_wire::Contention {
            invalidation_aborts: aborts,
            retries,
            object: (aborts > 0).then_some(o),
        };
        (!c.is_empty()).then_some(c)
    })
}

pub fn request_body() -> impl Strategy<Value = RequestBody> {
    prop_oneof![
        (any::<u16>(), any::<u16>(), blob(64), "\\PC{0,20}").prop_map(|(a, b, token, name)| {
            RequestBody::Hello(Hello { min_version: a, max_version: b, token, client_name: name })
        }),
        page_id().prop_map(|page| RequestBody::Fetch { page }),
        (
            page_id(),
            0..=PREFETCH_PAGES_MAX as u16,
            proptest::sample::select(PrefetchHint::ALL.to_vec())
        )
            .prop_map(|(page, extra, hint)| RequestBody::Prefetch(Prefetch {
                page,
                extra,
                hint
            })),
        (
            vec(oref(), 0..16),
            vec((oref(), blob(48)), 0..8),
            vec(blob(48), 0..8),
            proptest::option::of(1u64..)
        )
            .prop_map(|(reads, versions, created, id)| RequestBody::Commit(Commit {
                reads,
                versions,
                created,
                id,
                leaves: Vec::new()
            })),
        (
            any::<u64>(),
            proptest::option::of((point(), point())),
            proptest::option::of(1u64..),
            vec(page_id(), 0..16)
        )
            .prop_map(|(key, seen, commit, pages)| RequestBody::Resume(Resume {
                key,
                seen: seen.map(|(high, complete)| SeenRange { high, complete }),
                commit,
                pages
            })),
        Just(RequestBody::Abort),
        Just(RequestBody::Stats),
        Just(RequestBody::Goodbye),
        "\\PC{0,40}".prop_map(|path| RequestBody::Backup { path }),
        prepare().prop_map(|p| RequestBody::Prepare(Box::new(p))),
        peer().prop_map(RequestBody::Peer),
        replica_request().prop_map(RequestBody::Replica),
        (any::<u64>(), vec(blob(64), 0..4), vec(page_id(), 0..3)).prop_map(
            |(txn, records, pages)| {
                let pages = pages.into_iter().map(|p| (p, Bytes::from(vec![9u8; 1024]))).collect();
                RequestBody::PageRecords(thor_wire::PageRecords { txn, records, pages })
            }
        ),
        (
            (any::<u64>(), any::<u8>(), vec(oref(), 0..8), vec(oref(), 0..8)),
            (vec(blob(48), 0..4), vec(blob(64), 0..4), vec(page_id(), 0..3)),
        )
            .prop_map(|((txn, mode, reads, writes), (created, records, pages))| {
                let pages = pages.into_iter().map(|p| (p, Bytes::from(vec![7u8; 1024]))).collect();
                RequestBody::PageCommit(thor_wire::PageCommit {
                    txn,
                    mode,
                    reads,
                    writes,
                    created,
                    records,
                    pages,
                })
            }),
    ]
}

pub fn point() -> impl Strategy<Value = HistoryPoint> {
    (any::<u64>(), any::<u64>()).prop_map(|(l, mark)| HistoryPoint { lsn: Lsn(l), mark })
}

pub fn stamp() -> impl Strategy<Value = Stamp> {
    (any::<u64>(), any::<u32>())
        .prop_map(|(time_us, tie)| Stamp { time_us, tie: tie | CLIENT_TIE_BIT })
}

/// A well-formed prepare: distinct participants, this server's part, a coordinator that writes
/// (or none if nobody writes).
pub fn prepare() -> impl Strategy<Value = Prepare> {
    (
        stamp(),
        proptest::sample::subsequence((1u32..40).collect::<Vec<_>>(), 2..6),
        vec(any::<bool>(), 6),
        vec(oref(), 0..8),
        vec((oref(), blob(24)), 0..4),
    )
        .prop_map(|(stamp, servers, writes, reads, versions)| {
            let participants: Vec<Participant> = servers
                .iter()
                .zip(&writes)
                .map(|(&s, &w)| Participant { server: ServerId(s), writes: w })
                .collect();
            let coordinator = participants.iter().find(|p| p.writes).map(|p| p.server);
            let commit =
                Commit { reads, versions, created: Vec::new(), id: None, leaves: Vec::new() };
            Prepare { stamp, coordinator, participants, commit }
        })
}

/// A request between replicas (version 10).
pub fn replica_request() -> impl Strategy<Value = ReplicaRequest> {
    prop_oneof![
        (any::<u32>(), 1u64.., 1u64.., blob(200)).prop_map(|(g, from, to, msg)| {
            ReplicaRequest::Raft(RaftMsg { group: ServerId(g), from, to, msg })
        }),
        any::<u64>().prop_map(|l| ReplicaRequest::ImageBegin { min_lsn: Lsn(l) }),
        (any::<u64>(), proptest::sample::select(ImageFile::ALL.to_vec()), any::<u64>())
            .prop_map(|(image, file, offset)| ReplicaRequest::ImageChunk { image, file, offset }),
        any::<u64>().prop_map(|image| ReplicaRequest::ImageEnd { image }),
    ]
}

/// A reply between replicas (version 10).
pub fn replica_reply() -> impl Strategy<Value = ReplicaReply> {
    prop_oneof![
        (1u64.., any::<u64>(), any::<u64>(), any::<u64>(), 0u32..=4096).prop_map(
            |(image, c, pages_bytes, dwb_bytes, superblock_bytes)| {
                ReplicaReply::Image(ImageInfo {
                    image,
                    checkpoint: Lsn(c),
                    pages_bytes,
                    dwb_bytes,
                    superblock_bytes,
                })
            }
        ),
        any::<u64>().prop_map(|l| ReplicaReply::ImageTooOld { have: Lsn(l) }),
        blob(300).prop_map(ReplicaReply::Chunk),
    ]
}

pub fn peer() -> impl Strategy<Value = PeerMsg> {
    (0u8..5, stamp(), any::<u32>(), any::<bool>()).prop_map(|(op, stamp, from, flag)| {
        let from = ServerId(from);
        match op {
            0 => PeerMsg::Vote { stamp, from, yes: flag },
            1 => PeerMsg::Decide { stamp, from, commit: flag },
            2 => PeerMsg::DecideAck { stamp, from },
            3 => PeerMsg::Query { stamp, from },
            _ => PeerMsg::AskVote { stamp, from },
        }
    })
}

pub fn request() -> impl Strategy<Value = Request> {
    (request_body(), piggyback()).prop_map(|(body, piggyback)| Request { body, piggyback })
}

fn stats() -> impl Strategy<Value = ServerStats> {
    (vec(any::<u64>(), 109), -1e12f64..1e12, 0f64..1e6).prop_map(|(w, a, b)| ServerStats {
        commits: w[0],
        versions_committed: w[1],
        objects_created: w[2],
        commits_refused: w[3],
        log_bytes: w[4],
        log_fsyncs: w[5],
        commits_per_fsync: a,
        mob_bytes: w[6],
        mob_entries: w[7],
        fetches: w[8],
        fetch_versions_applied: w[9],
        cache_hits: w[10],
        cache_misses: w[11],
        fetch_reads: w[12],
        installation_reads: w[13],
        validation_reads: w[14],
        flush_rounds: w[15],
        pages_written: w[16],
        versions_installed: w[17],
        write_absorption: b,
        mob_waits: w[18],
        checkpoint: w[19],
        pages_allocated: w[20],
        sessions_open: w[21],
        sessions_opened: w[22],
        sessions_refused: w[23],
        requests: w[24],
        protocol_errors: w[25],
        auth_failures: w[26],
        acks_received: w[27],
        discarded_pages_received: w[28],
        bytes_received: w[29],
        bytes_sent: w[30],
        refused_stale: w[31],
        refused_threshold: w[32],
        refused_rule1: w[33],
        refused_rule2a: w[34],
        refused_rule2b: w[35],
        retried_passed: w[36],
        read_only_validated: w[37],
        invalidations_added: w[38],
        invalidations_sent: w[39],
        invalidations_acked: w[40],
        invalid_entries: w[41],
        directory_entries: w[42],
        directories_coarsened: w[43],
        vq_len: w[44],
        sessions_expired: w[45],
        page_cache_exclusive: w[46],
        demotions_reordered: w[47],
        demotions_stored: w[48],
        demote_notices: w[49],
        demotions_wanted: w[50],
        demotions_refused: w[51],
        demoted_bytes: w[52],
        twopc_prepared: w[53],
        twopc_read_only: w[54],
        twopc_decided_commit: w[55],
        twopc_decided_abort: w[56],
        twopc_parts_committed: w[57],
        twopc_parts_aborted: w[58],
        twopc_in_doubt: w[59],
        twopc_coordinating: w[60],
        twopc_presumed_aborts: w[61],
        commit_mode: w[62],
        page_commits: w[63],
        page_records: w[64],
        page_records_early: w[65],
        page_record_bytes: w[66],
        pages_shipped: w[67],
        redo_reads: w[68],
        wpl_images: w[69],
        wpl_checkpoints: w[70],
        wpl_installed: w[71],
        wpl_restored: w[72],
        wpl_page_rule_refusals: w[73],
        wpl_table: w[74],
        pages_early: w[75],
        prefetch_requests: w[76],
        pages_prefetched: w[77],
        prefetch_uncached: w[78],
        fetch_service_ns: w[79],
        fetches_served: w[80],
        page_read_ns: w[81],
        health: w[82],
        storage_failures: w[83],
        sessions_refused_failed: w[84],
        uptime_s: w[85],
        server_version: w[86],
        database_bytes: w[87],
        log_disk_bytes: w[88],
        mob_bytes_max: w[89],
        client_invalidation_aborts: w[90],
        client_retries: w[91],
        fair_claims: w[92],
        fair_held: w[93],
        fair_held_timed_out: w[94],
        fair_claims_expired: w[95],
        leaf_merges: w[96],
        leaf_merges_refused: w[97],
        twopc_prepares_missed: w[98],
        group_replica_id: w[99],
        group_voters: w[100],
        group_role: w[101],
        group_term: w[102],
        group_leader: w[103],
        group_commit_index: w[104],
        group_applied_index: w[105],
        group_lag_max: w[106],
        group_restarts: w[107],
        group_images_installed: w[108],
    })
}

pub fn reply_body() -> impl Strategy<Value = ReplyBody> {
    prop_oneof![
        (
            1u16..,
            any::<u32>(),
            10u32..=15,
            oref(),
            any::<u32>(),
            FRAME_BYTES_SETTING_MIN..=FRAME_BYTES_MAX,
            (any::<bool>(), proptest::sample::select(thor_wire::CommitMode::ALL.to_vec()))
        )
            .prop_map(|(version, s, shift, root, c, max, (demotions, commit_mode))| {
                ReplyBody::HelloOk(ServerInfo {
                    version,
                    server_id: ServerId(s),
                    page_size: 1 << shift,
                    root,
                    client_id: ClientId(c),
                    max_frame_bytes: max,
                    demotions,
                    commit_mode,
                })
            }),
        (page_id(), vec(any::<u8>(), 1024..=1024))
            .prop_map(|(page, b)| ReplyBody::Page { page, bytes: Bytes::from(b) }),
        (proptest::collection::btree_set(page_id(), 1..5), any::<u8>()).prop_map(
            |(pages, fill)| {
                // Distinct pages of one size; the order of the set is not the point.
                ReplyBody::Pages(
                    pages.into_iter().map(|p| (p, Bytes::from(vec![fill; 1024]))).collect(),
                )
            }
        ),
        (any::<u64>(), vec(oref(), 0..16))
            .prop_map(|(l, created)| ReplyBody::CommitOk { lsn: Lsn(l), created }),
        (proptest::sample::select(RefusedCode::ALL), "\\PC{0,40}")
            .prop_map(|(code, message)| ReplyBody::CommitRefused { code, message }),
        Just(ReplyBody::Ack),
        vec(oref(), 0..8).prop_map(|created| ReplyBody::Prepared { created }),
        stats().prop_map(|s| ReplyBody::Stats(Box::new(s))),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(l, p, g)| {
            ReplyBody::BackupDone(BackupInfo { lsn: Lsn(l), page_bytes: p, log_bytes: g })
        }),
        (proptest::sample::select(ErrorCode::ALL), "\\PC{0,40}")
            .prop_map(|(code, message)| ReplyBody::Error { code, message }),
        replica_reply().prop_map(ReplyBody::Replica),
        (0u8..3, 0u8..4, any::<u64>(), vec(oref(), 0..8)).prop_map(|(c, o, lsn, created)| {
            let cache = [CacheVerdict::None, CacheVerdict::Kept, CacheVerdict::Dropped][c as usize];
            let outcome = match o {
                0 => None,
                1 => Some(Outcome::Committed { lsn: Lsn(lsn), created }),
                2 => Some(Outcome::NotCommitted),
                _ => Some(Outcome::Unknown),
            };
            ReplyBody::Resumed(Resumed { cache, outcome })
        }),
    ]
}

pub fn reply() -> impl Strategy<Value = Reply> {
    (
        reply_body(),
        vec(oref(), 0..8),
        vec(page_id(), 0..8),
        proptest::option::of((point(), any::<bool>(), any::<bool>())),
    )
        .prop_map(|(body, invalidations, wanted, seen)| Reply {
            body,
            invalidations,
            wanted,
            seen: seen.map(|(stamp, complete, settled)| Seen { stamp, complete, settled }),
        })
}
