//! HAC's mechanisms one by one, over a core driven the way `ClientCache` drives it, with
//! synthetic pages of a test class: objects `[class | ref | tag | count | payload]`.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use thor_core::{ClassDesc, Oid, Oref, PageId, PageMut, VarKind};

use super::*;
use crate::core::{F_LIVE, NOT_RESIDENT, Need};
use crate::manager::{CacheConfig, ClientCache, PolicyConfig};

pub(crate) const PAGE: usize = 4096;
/// Offsets of the test class's fields within an object.
pub(crate) const REF_AT: usize = 4;
pub(crate) const TAG_AT: usize = 8;

pub(crate) fn oref(p: u32, o: u16) -> Oref {
    Oref::new(PageId::new(p).unwrap(), Oid::new(o).unwrap())
}

pub(crate) fn class() -> (Oref, ClassDesc) {
    (oref(1, 7), ClassDesc::new("test.T", 8, &[0], VarKind::Bytes).unwrap())
}

/// An object with tag `tag`, `payload` bytes of variable part, referencing `to`.
pub(crate) fn obj(tag: u32, payload: usize, to: Option<Oref>) -> Vec<u8> {
    let (c, desc) = class();
    let mut o = desc.new_object(c.raw(), payload);
    thor_core::le::put_u32(&mut o, REF_AT, to.map_or(0, Oref::raw));
    thor_core::le::put_u32(&mut o, TAG_AT, tag);
    let start = desc.var_offset();
    for (k, b) in o[start..start + payload].iter_mut().enumerate() {
        *b = (tag as usize + k) as u8;
    }
    o
}

pub(crate) fn page_of(page: u32, objs: &[Vec<u8>]) -> Vec<u8> {
    let mut b = vec![0u8; PAGE];
    let mut p = PageMut::init(&mut b, PageId::new(page).unwrap()).unwrap();
    for o in objs {
        p.append(o).unwrap();
    }
    b
}

/// A core and HAC, driven like `ClientCache` drives them.
struct Rig {
    core: CacheCore,
    hac: Hac,
}

impl Rig {
    fn new(frames: usize, params: HacParams) -> Rig {
        // Room for the tables besides `frames` frames.
        let mut core = CacheCore::new((frames + 2) * PAGE, PAGE).unwrap();
        let (c, desc) = class();
        core.register_class(c.raw(), Arc::new(desc)).unwrap();
        let hac = Hac::new(core.frames.len(), params).unwrap();
        Rig { core, hac }
    }

    /// Installs `page` in free frame `f`.
    fn install_in(&mut self, f: u32, page: u32, objs: &[Vec<u8>]) {
        let at = self.core.free.iter().position(|&x| x == f).expect("frame is free");
        self.core.free.remove(at);
        self.core.install_page(f, PageId::new(page).unwrap(), &page_of(page, objs)).unwrap();
        self.hac.page_installed(&mut self.core, f);
    }

    /// Installs `page` in whatever frame is free, freeing one first if needed.
    fn install(&mut self, page: u32, objs: &[Vec<u8>]) -> u32 {
        if self.core.free.is_empty() {
            self.hac.free_frame(&mut self.core, &mut ReplacementTimer::default()).unwrap();
        }
        let f = *self.core.free.last().unwrap();
        self.install_in(f, page, objs);
        f
    }

    /// Accesses `o` (installing it), as the hit or slow path does; returns its entry.
    fn access(&mut self, o: Oref) -> u32 {
        let i = self.core.entry_for(o).unwrap();
        match self.core.locate(i).unwrap() {
            Need::Resident(loc) => {
                let f = self.core.frame_of(loc);
                let e = &mut self.core.entries[i as usize];
                let meta = &mut self.core.frames[f as usize];
                let decays = self.core.decays[f as usize];
                self.hac.touch(e, i, meta, decays, f);
            }
            other => panic!("{o:?} not resident: {other:?}"),
        }
        i
    }

    /// Installs `o` and sets its usage.
    fn with_usage(&mut self, o: Oref, usage: u8) -> u32 {
        let i = self.access(o);
        self.core.set_usage(i, usage);
        i
    }

    fn loc(&self, o: Oref) -> Option<u32> {
        let i = self.core.lookup(o.raw())?;
        let loc = self.core.entries[i as usize].loc;
        (loc != NOT_RESIDENT).then_some(loc)
    }

    fn tag_at(&self, loc: u32) -> u32 {
        self.core.arena.read_u32(loc as usize + TAG_AT)
    }

    fn check(&self) {
        self.core.check_invariants().unwrap();
    }

    /// Makes `f`'s stale candidates and all others go away, so a test chooses the victim.
    fn only_candidate(&mut self, f: u32, decay: bool) -> FrameUsage {
        self.hac.candidates = CandidateSet::new(self.hac.params.epochs as usize);
        let usage = self.hac.frame_usage(&mut self.core, f, decay);
        self.hac.add_candidate(f, usage);
        usage
    }
}

fn params(n: u32, s: u32) -> HacParams {
    HacParams { secondary_pointers: n, scan_frames: s, ..HacParams::default() }
}

#[test]
fn access_sets_the_top_bit_and_the_primary_scan_decays() {
    let mut r = Rig::new(8, params(0, 1));
    let f = r.install(2, &[obj(0, 8, None), obj(1, 8, None), obj(2, 8, None)]);
    let a = r.access(oref(2, 0));
    assert_eq!(r.core.usage(a), USAGE_TOP);
    r.core.set_usage(a, 0b0101);
    r.access(oref(2, 0));
    assert_eq!(r.core.usage(a), 0b1101);
    let b = r.with_usage(oref(2, 1), 15);
    // Point the primary pointer at the frame: one scan decays and adds it.
    r.hac.primary = f as usize;
    r.hac.scan(&mut r.core);
    assert_eq!(r.core.usage(a), 7, "(13 + 1) >> 1");
    assert_eq!(r.core.usage(b), 8, "(15 + 1) >> 1");
    let c = r.hac.candidates.peek().unwrap();
    assert_eq!(c.frame, f);
    // Usages 7, 8 and an uninstalled 0: T = 7 keeps one of three (1/3 < 2/3).
    assert_eq!(c.usage, FrameUsage { threshold: 7, hot: 1, objects: 3 });
    assert_eq!(r.hac.primary_pointer(), f as usize + 1);
    assert_eq!(r.hac.stats.frames_scanned, 1);
}

#[test]
fn usage_decays_exactly_over_many_scans_without_visiting_entries() {
    // The frame counts its decays and shifts its counts by usage; entries catch up when read,
    // and every 16th decay rewrites them. Over 70 decays, with objects used at different
    // times, every entry's usage and the frame's counts match decaying each entry by hand.
    let mut r = Rig::new(8, params(0, 1));
    let f = r.install(2, &[obj(0, 8, None), obj(1, 8, None), obj(2, 8, None), obj(3, 8, None)]);
    let entries: Vec<u32> = (0..4).map(|k| r.access(oref(2, k))).collect();
    let mut model = [USAGE_TOP; 4];
    for round in 0..70u32 {
        // Objects 0 and 1 are used every 2 and 3 decays, object 2 every 20, object 3 only
        // just before the 16th decay (it then stays unused for more than 16).
        for (k, &i) in entries.iter().enumerate() {
            let used = match k {
                0 => round % 2 == 0,
                1 => round % 3 == 0,
                2 => round % 20 == 0,
                _ => round == 15,
            };
            if used {
                r.access(oref(2, k as u16));
                model[k] |= USAGE_TOP;
            }
            assert_eq!(r.core.usage(i), model[k], "object {k} before decay {round}");
        }
        let usage = r.hac.frame_usage(&mut r.core, f, true);
        for u in &mut model {
            *u = (*u + 1) >> 1;
        }
        let mut h = UsageHistogram::default();
        model.iter().for_each(|&u| h.add(u, 0));
        assert_eq!(usage, h.frame_usage(4, r.hac.params.retention), "after decay {round}");
        r.check();
    }
    assert_eq!(r.core.decays[f as usize], 70);
}

#[test]
fn secondary_pointers_add_frames_with_few_installed_objects() {
    // N = 2, S = 1: per epoch one frame at the primary pointer and one at each secondary.
    let mut r = Rig::new(14, params(2, 1));
    let n = r.core.frames.len();
    let six: Vec<Vec<u8>> = (0..6).map(|k| obj(k, 8, None)).collect();
    let mut frames = Vec::new();
    let mut page = 2;
    while !r.core.free.is_empty() {
        frames.push(r.install(page, &six));
        page += 1;
    }
    let gap = n / 3;
    let primary = frames[0] as usize;
    let (s1, s2) = ((primary + gap) % n, (primary + 2 * gap) % n);
    let page_in = |r: &Rig, f: usize| r.core.frames[f].page;
    // s1: one of six installed (1/6 < R): added. s2: five of six (5/6): not added.
    let p1 = page_in(&r, s1);
    let u = r.with_usage(oref(p1, 0), 15);
    let p2 = page_in(&r, s2);
    for k in 0..5 {
        r.with_usage(oref(p2, k), 15);
    }
    r.hac.primary = primary;
    r.hac.scan(&mut r.core);
    let mut added = Vec::new();
    while let Some((_, c)) = r.hac.candidates.pop() {
        added.push((c.frame as usize, c.usage));
    }
    added.sort_by_key(|a| a.0);
    let mut want = vec![
        (primary, FrameUsage { threshold: 0, hot: 0, objects: 6 }),
        (s1, FrameUsage { threshold: 0, hot: 1, objects: 6 }),
    ];
    want.sort_by_key(|a| a.0);
    assert_eq!(added, want);
    assert_eq!(r.core.usage(u), 15, "secondary pointers do not decay");
    assert_eq!(r.hac.primary_pointer(), primary + 1);
    r.check();
}

#[test]
fn compaction_keeps_hot_objects_in_address_order_in_the_target() {
    let mut r = Rig::new(8, HacParams::default());
    // Victim 1: its hot objects become the first target's contents.
    let x = r.install(2, &[obj(20, 40, None), obj(21, 40, None)]);
    r.with_usage(oref(2, 0), 9);
    r.with_usage(oref(2, 1), 9);
    r.only_candidate(x, false);
    assert!(!r.hac.compact(&mut r.core, x, 0), "no target yet: the victim becomes it");
    assert_eq!(r.hac.target(), Some(x));
    assert_eq!(r.core.frames[x as usize].kind, FrameKind::Compacted);
    assert_eq!(r.core.page_frame(PageId::new(2).unwrap()), None, "its page is gone");
    // Victim 2: c (hot), b (cold), a (hot), d (never installed); installed c before a.
    let v =
        r.install(3, &[obj(30, 16, None), obj(31, 16, None), obj(32, 16, None), obj(33, 16, None)]);
    r.with_usage(oref(3, 2), 12);
    r.with_usage(oref(3, 0), 12);
    let b = r.with_usage(oref(3, 1), 1);
    let usage = r.only_candidate(v, false);
    // Usages 12, 1, 12, 0: T = 1 keeps 2 of 4.
    assert_eq!(usage, FrameUsage { threshold: 1, hot: 2, objects: 4 });
    let before = r.hac.stats;
    assert!(r.hac.compact(&mut r.core, v, usage.threshold));
    assert_eq!(r.core.frames[v as usize].kind, FrameKind::Free);
    assert!(r.core.free.contains(&v));
    // The target now holds 20, 21, then 30 and 32 in their page order.
    let mut locs: Vec<(u32, u32)> = [(2, 0), (2, 1), (3, 0), (3, 2)]
        .iter()
        .map(|&(p, o)| {
            let loc = r.loc(oref(p, o)).unwrap();
            (loc, r.tag_at(loc))
        })
        .collect();
    locs.sort();
    assert_eq!(locs.iter().map(|l| l.1).collect::<Vec<_>>(), vec![20, 21, 30, 32]);
    assert!(locs.iter().all(|l| r.core.frame_of(l.0) == x));
    assert_eq!(locs[0].0 as usize, r.core.frame_base(x), "packed from the frame's start");
    // The cold object left and, unreferenced, lost its entry; so did the uninstalled one.
    assert_eq!(r.core.entries[b as usize].flags & F_LIVE, 0);
    assert_eq!(r.loc(oref(3, 3)), None);
    assert_eq!(r.hac.stats.objects_kept - before.objects_kept, 2);
    assert_eq!(r.hac.stats.objects_dropped - before.objects_dropped, 2);
    // The payloads moved intact.
    let loc = r.loc(oref(3, 2)).unwrap();
    let size = r.core.object_size(loc);
    assert_eq!(r.core.arena.bytes(loc as usize, size), &obj(32, 16, None)[..]);
    r.check();
}

#[test]
fn a_target_that_overflows_gives_way_to_the_victim() {
    let mut r = Rig::new(8, HacParams::default());
    // The first target: one big hot object, leaving 200 bytes.
    let big = PAGE - 200 - 16;
    let x = r.install(2, &[obj(1, big, None)]);
    r.with_usage(oref(2, 0), 9);
    r.only_candidate(x, false);
    assert!(!r.hac.compact(&mut r.core, x, 0));
    assert_eq!(r.core.frames[x as usize].used as usize, PAGE - 200);
    // The victim: three hot objects of 152 bytes (the first fits in the target), three cold.
    let objs: Vec<Vec<u8>> = (10..16).map(|t| obj(t, 134, None)).collect();
    let v = r.install(3, &objs);
    for k in 0..6 {
        r.with_usage(oref(3, k), if k < 3 { 8 } else { 0 });
    }
    assert_eq!(r.core.object_size(r.loc(oref(3, 0)).unwrap()), 152);
    let u = r.only_candidate(v, false);
    assert_eq!(u, FrameUsage { threshold: 0, hot: 3, objects: 6 });
    let filled = r.hac.stats.targets_filled;
    r.hac.candidates = CandidateSet::new(20);
    assert!(!r.hac.compact(&mut r.core, v, u.threshold), "the victim is the new target");
    assert_eq!(r.hac.target(), Some(v));
    assert_eq!(r.hac.stats.targets_filled, filled + 1);
    // The full target joined the candidate set.
    assert_eq!(r.hac.candidates.peek().map(|c| c.frame), Some(x));
    // 10 went to the old target; 11 and 12 were compacted inside the victim, in order, from
    // its start.
    assert_eq!(r.core.frame_of(r.loc(oref(3, 0)).unwrap()), x);
    let (l11, l12) = (r.loc(oref(3, 1)).unwrap(), r.loc(oref(3, 2)).unwrap());
    assert_eq!(l11 as usize, r.core.frame_base(v));
    assert_eq!(l12, l11 + 152);
    assert_eq!((r.tag_at(l11), r.tag_at(l12)), (11, 12));
    let fm = r.core.frames[v as usize];
    assert_eq!((fm.kind, fm.objects, fm.installed, fm.used), (FrameKind::Compacted, 2, 2, 304));
    assert_eq!(r.loc(oref(3, 3)), None);
    assert_eq!(r.core.page_frame(PageId::new(3).unwrap()), None);
    r.check();
    // Freeing a frame now picks the old target and empties it into the new one.
    let (i20, i30) =
        (r.core.lookup(oref(2, 0).raw()).unwrap(), r.core.lookup(oref(3, 0).raw()).unwrap());
    r.core.set_usage(i20, 0);
    r.core.set_usage(i30, 15);
    r.hac.candidates = CandidateSet::new(20);
    r.hac.primary = x as usize;
    r.hac.free_frame(&mut r.core, &mut ReplacementTimer::default()).unwrap();
    assert!(r.core.free.contains(&x));
    assert_eq!(r.core.frame_of(r.loc(oref(3, 0)).unwrap()), v);
    assert_eq!(r.loc(oref(2, 0)), None);
    r.check();
}

#[test]
fn duplicate_copies_the_installed_copy_wins_and_goes_home() {
    let mut r = Rig::new(8, HacParams::default());
    let objs = [obj(40, 24, None), obj(41, 24, None), obj(42, 24, None)];
    // Page 5's object 0 is kept by a compaction of its frame: it lives in a compacted frame.
    let g1 = r.install(5, &objs);
    let o = r.with_usage(oref(5, 0), 15);
    r.only_candidate(g1, false);
    assert!(!r.hac.compact(&mut r.core, g1, 0));
    let c = g1;
    let kept_loc = r.loc(oref(5, 0)).unwrap();
    assert_eq!(r.core.frame_of(kept_loc), c);
    // The application changes the kept copy.
    r.core.arena.write_u32(kept_loc as usize + TAG_AT, 99);
    // Page 5 is fetched again (for object 1). Nothing happens to object 0 at the fetch: its
    // entry still names the kept copy, so the page's copy is never installed.
    let g2 = r.install(5, &objs);
    r.access(oref(5, 1));
    assert_eq!(r.loc(oref(5, 0)), Some(kept_loc));
    assert_eq!(r.core.frames[g2 as usize].installed, 1);
    // The compacted frame stops being the target and is compacted: object 0 is kept and goes
    // back into its slot in page 5 rather than to a target.
    r.hac.target = NIL;
    r.core.set_usage(o, 15);
    r.only_candidate(c, false);
    assert!(r.hac.compact(&mut r.core, c, 0), "nothing left in place");
    let home = r.loc(oref(5, 0)).unwrap();
    assert_eq!(r.core.frame_of(home), g2);
    assert_eq!(r.tag_at(home), 99, "the installed copy, not the page's");
    assert_eq!(r.core.frames[g2 as usize].installed, 2);
    assert_eq!(r.hac.stats.objects_moved_home, 1);
    assert_eq!(r.hac.target(), None, "no target was needed");
    r.check();
}

#[test]
fn duplicate_copies_compacting_the_page_drops_the_uninstalled_copy() {
    let mut r = Rig::new(8, HacParams::default());
    let objs = [obj(50, 24, None), obj(51, 24, None)];
    let g1 = r.install(6, &objs);
    r.with_usage(oref(6, 0), 15);
    r.only_candidate(g1, false);
    assert!(!r.hac.compact(&mut r.core, g1, 0));
    let kept = r.loc(oref(6, 0)).unwrap();
    let g2 = r.install(6, &objs);
    let b = r.with_usage(oref(6, 1), 1);
    // Page 6's frame is the victim: its uninstalled copy of object 0 and cold object 1 go;
    // the kept copy stays where it is.
    let u = r.only_candidate(g2, false);
    assert_eq!(u, FrameUsage { threshold: 0, hot: 1, objects: 2 });
    let dropped = r.hac.stats.objects_dropped;
    r.core.set_usage(b, 0);
    assert!(r.hac.compact(&mut r.core, g2, u.threshold));
    assert_eq!(r.hac.stats.objects_dropped - dropped, 2);
    assert_eq!(r.loc(oref(6, 0)), Some(kept));
    assert_eq!(r.core.page_frame(PageId::new(6).unwrap()), None);
    r.check();
}

#[test]
fn pinned_frames_are_never_chosen_and_pinned_objects_never_move() {
    let mut r = Rig::new(6, params(0, 1));
    let mut frames = Vec::new();
    let mut page = 2;
    while !r.core.free.is_empty() {
        frames.push(r.install(page, &[obj(page, 8, None), obj(page + 100, 8, None)]));
        page += 1;
    }
    // The least valuable frame holds a viewed object.
    let (fa, fb) = (frames[0], frames[1]);
    let pa = r.core.frames[fa as usize].page;
    r.with_usage(oref(pa, 0), 1);
    let pinned_loc = r.loc(oref(pa, 0)).unwrap();
    r.core.pin(pinned_loc);
    for &f in &frames[1..] {
        let p = r.core.frames[f as usize].page;
        r.with_usage(oref(p, 0), 15);
        r.with_usage(oref(p, 1), 15);
    }
    r.hac.candidates = CandidateSet::new(20);
    for &f in &frames {
        let u = r.hac.frame_usage(&mut r.core, f, false);
        r.hac.add_candidate(f, u);
    }
    assert_eq!(r.hac.candidates.peek().map(|c| c.frame), Some(fa));
    r.hac.primary = fb as usize;
    r.hac.free_frame(&mut r.core, &mut ReplacementTimer::default()).unwrap();
    assert!(!r.core.free.contains(&fa));
    assert_eq!(r.loc(oref(pa, 0)), Some(pinned_loc), "the pinned object did not move");
    // The pinned frame is still a candidate, passed over, not dropped.
    let mut found = false;
    while let Some((_, c)) = r.hac.candidates.pop() {
        found |= c.frame == fa && c.stamp == r.hac.stamps[fa as usize];
    }
    assert!(found);
    r.check();
    // With every frame pinned nothing can be freed.
    for &f in &frames {
        if r.core.frames[f as usize].kind != FrameKind::Free && f != fa {
            r.core.frames[f as usize].pins += 1;
        }
    }
    let t = r.hac.target;
    if t != NIL {
        r.core.frames[t as usize].pins += 1;
    }
    r.core.free.clear();
    assert!(matches!(
        r.hac.free_frame(&mut r.core, &mut ReplacementTimer::default()),
        Err(CacheError::Full { .. })
    ));
}

#[test]
fn no_steal_modified_objects_are_kept_and_frames_of_them_passed_over() {
    let mut r = Rig::new(8, HacParams::default());
    let v = r.install(2, &[obj(1, 8, None), obj(2, 8, None), obj(3, 8, None)]);
    let m = r.with_usage(oref(2, 1), 0);
    r.core.mark_modified(m);
    r.core.arena.write_u32(r.loc(oref(2, 1)).unwrap() as usize + TAG_AT, 77);
    r.with_usage(oref(2, 0), 0);
    // The modified object counts as hot at every threshold: T = 0, H = 1/3.
    let u = r.only_candidate(v, false);
    assert_eq!(u, FrameUsage { threshold: 0, hot: 1, objects: 3 });
    assert!(!r.hac.compact(&mut r.core, v, u.threshold));
    let loc = r.loc(oref(2, 1)).expect("the modified object stays");
    assert_eq!(r.tag_at(loc), 77);
    assert_eq!(r.loc(oref(2, 0)), None, "the cold unmodified one went");
    assert_eq!(r.core.frames[v as usize].modified, 1, "the mark moved with it");
    r.check();
    // A frame made only of modified objects is passed over: compacting it frees nothing.
    r.hac.target = NIL;
    r.only_candidate(v, false);
    r.core.free.clear();
    assert!(r.hac.choose_victim(&r.core).is_none());
    assert_eq!(r.hac.candidates.len(), 1, "still a candidate for after the commit");
    r.core.clear_modified(m);
    assert_eq!(r.hac.choose_victim(&r.core).map(|c| c.frame), Some(v));
}

#[test]
fn discarding_an_object_releases_its_references() {
    let mut r = Rig::new(8, HacParams::default());
    let v = r.install(2, &[obj(1, 8, Some(oref(9, 3))), obj(2, 8, Some(oref(9, 3)))]);
    let a = r.with_usage(oref(2, 0), 0);
    let b = r.with_usage(oref(2, 1), 15);
    let la = r.core.entries[a as usize].loc;
    let lb = r.core.entries[b as usize].loc;
    let (t, _) = r.core.follow(la, REF_AT).unwrap().unwrap();
    r.core.follow(lb, REF_AT).unwrap();
    assert_eq!(r.core.entries[t as usize].refs, 2);
    let u = r.only_candidate(v, false);
    assert!(!r.hac.compact(&mut r.core, v, u.threshold));
    // a left: one reference fewer. b was kept with its swizzled word.
    assert_eq!(r.core.entries[t as usize].refs, 1);
    r.check();
    // b goes too: the target entry (not resident, unreferenced) is reclaimed.
    r.core.set_usage(b, 0);
    r.hac.target = NIL;
    r.only_candidate(v, false);
    assert!(r.hac.compact(&mut r.core, v, 0));
    assert_eq!(r.core.entries[t as usize].flags & F_LIVE, 0);
    assert_eq!(r.core.live_entries(), 0);
    r.check();
}

#[test]
fn invalid_objects_get_usage_zero_and_leave() {
    let mut r = Rig::new(8, HacParams::default());
    let f = r.install(2, &[obj(1, 8, None), obj(2, 8, None)]);
    let a = r.with_usage(oref(2, 0), 15);
    let b = r.with_usage(oref(2, 1), 15);
    r.core.mark_modified(b);
    assert!(r.core.invalidate(oref(2, 0)));
    assert_eq!(r.loc(oref(2, 0)), None);
    assert_eq!(r.core.usage(a), 0);
    assert_eq!(r.core.page_frame(PageId::new(2).unwrap()), None, "the page is stale");
    assert_eq!(r.core.frames[f as usize].installed, 1);
    // A modified object stays until the transaction ends, with usage 0.
    assert!(!r.core.invalidate(oref(2, 1)));
    assert_eq!(r.core.usage(b), 0);
    assert!(r.loc(oref(2, 1)).is_some());
    r.check();
    r.core.clear_modified(b);
    r.core.retry_invalidations();
    assert_eq!(r.loc(oref(2, 1)), None);
    // Both count as usage-0 objects of the frame now.
    assert_eq!(
        r.hac.frame_usage(&mut r.core, f, false),
        FrameUsage { threshold: 0, hot: 0, objects: 2 }
    );
    r.check();
}

#[test]
fn candidates_expire_and_stale_ones_are_skipped() {
    let mut r = Rig::new(8, HacParams { epochs: 2, ..HacParams::default() });
    let f = r.install(2, &[obj(1, 8, None)]);
    r.only_candidate(f, false);
    r.hac.candidates.start_epoch();
    assert_eq!(r.hac.candidates.len(), 1);
    r.hac.candidates.start_epoch();
    assert!(r.hac.candidates.is_empty(), "gone after E = 2 epochs");
    // A candidate whose frame was refilled since is stale.
    r.only_candidate(f, false);
    r.hac.restamp(f);
    assert!(r.hac.choose_victim(&r.core).is_none());
    assert!(r.hac.candidates.is_empty(), "stale candidates leave the set");
}

#[test]
fn the_paper_parameters_are_the_defaults_and_parse() {
    let p = HacParams::default();
    assert_eq!(
        (p.retention, p.epochs, p.secondary_pointers, p.scan_frames),
        (Fraction::TWO_THIRDS, 20, 2, 3)
    );
    assert_eq!("hac".parse::<PolicyConfig>().unwrap(), PolicyConfig::Hac(p));
    assert_eq!("HAC".parse::<PolicyConfig>().unwrap(), PolicyConfig::HAC);
    assert_eq!("fpc".parse::<PolicyConfig>().unwrap(), PolicyConfig::Fpc);
    let q: PolicyConfig = "hac:r=0.75,e=50,n=0,s=5".parse().unwrap();
    assert_eq!(
        q,
        PolicyConfig::Hac(HacParams {
            retention: Fraction { num: 75, den: 100 },
            epochs: 50,
            secondary_pointers: 0,
            scan_frames: 5
        })
    );
    for c in [PolicyConfig::Fpc, PolicyConfig::HAC, q] {
        assert_eq!(c.to_string().parse::<PolicyConfig>().unwrap(), c, "{c}");
    }
    assert_eq!(PolicyConfig::HAC.to_string(), "hac");
    for bad in
        ["lru", "hac:r=3/2", "hac:e=0", "hac:s=0", "hac:x=1", "hac:r", "fpc:r=1/2", "hac:n=65"]
    {
        assert!(bad.parse::<PolicyConfig>().is_err(), "{bad}");
    }
    assert_eq!("2/3".parse::<Fraction>().unwrap(), Fraction::TWO_THIRDS);
    assert_eq!("1".parse::<Fraction>().unwrap(), Fraction { num: 1, den: 1 });
}

// ----- through ClientCache -----

pub(crate) fn cache(frames: usize, policy: PolicyConfig, background: bool) -> ClientCache {
    let mut c = ClientCache::new(CacheConfig {
        budget_bytes: frames * PAGE,
        page_size: PAGE,
        policy,
        background_replacement: background,
    })
    .unwrap();
    let (cl, desc) = class();
    c.register_class(cl.raw(), Arc::new(desc)).unwrap();
    c
}

/// Fetches page `p` as the client does: send, replace while waiting, install.
pub(crate) fn fetch(c: &mut ClientCache, p: u32, objs: &[Vec<u8>]) {
    c.while_fetching().unwrap();
    c.install_page(PageId::new(p).unwrap(), &page_of(p, objs)).unwrap();
}

pub(crate) fn get(c: &mut ClientCache, o: Oref) -> u32 {
    let i = c.core.entry_for(o).unwrap();
    match c.resolve(i).unwrap() {
        Need::Resident(loc) => loc,
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_frame_is_always_free_and_the_next_is_freed_while_fetching() {
    let objs: Vec<Vec<u8>> = (0..10).map(|k| obj(k, 100, None)).collect();
    let mut c = cache(24, PolicyConfig::HAC, true);
    for p in 2..200 {
        fetch(&mut c, p, &objs);
        assert!(!c.core.free.is_empty(), "a free frame waits for the next fetch");
        get(&mut c, oref(p, (p % 10) as u16));
    }
    let st = c.stats();
    assert!(st.replacement.frames_compacted > 0 && st.replacement.objects_kept > 0, "{st:?}");
    assert_eq!(st.fetches(), 198);
    c.core.check_invariants().unwrap();

    // HAC-FG: nothing is freed while fetching; the frame is freed when the page arrives.
    let mut c = cache(24, PolicyConfig::HAC, false);
    for p in 2..200 {
        let free = c.core.free.len();
        c.while_fetching().unwrap();
        assert_eq!(c.core.free.len(), free);
        c.install_page(PageId::new(p).unwrap(), &page_of(p, &objs)).unwrap();
        get(&mut c, oref(p, (p % 10) as u16));
    }
    assert!(c.core.free.is_empty(), "in the foreground no frame is kept free");
    c.core.check_invariants().unwrap();
}

#[test]
fn created_objects_are_kept_after_commit_as_a_compacted_frame() {
    let mut c = cache(16, PolicyConfig::HAC, true);
    let mut made = Vec::new();
    for k in 0..20u32 {
        made.push(c.create(&obj(k, 40, None)).unwrap().entry);
    }
    let f = c.core.frame_of(c.core.entries[made[0] as usize].loc);
    assert_eq!(c.core.frames[f as usize].kind, FrameKind::New);
    let orefs: Vec<Oref> = (0..made.len()).map(|k| oref(30, k as u16)).collect();
    c.commit_done(&orefs).unwrap();
    assert_eq!(c.core.frames[f as usize].kind, FrameKind::Compacted);
    for (&i, &o) in made.iter().zip(&orefs) {
        assert_eq!(c.core.lookup(o.raw()), Some(i));
        assert_ne!(c.core.entries[i as usize].loc, NOT_RESIDENT, "kept");
    }
    assert!(c.stats().replacement.candidates_added > 0);
    c.check_invariants().unwrap();

    // FPC drops them (they are fetched again in their pages when used).
    let mut c = cache(16, PolicyConfig::Fpc, true);
    c.create(&obj(1, 40, None)).unwrap();
    c.commit_done(&[oref(30, 0)]).unwrap();
    assert_eq!(c.core.lookup(oref(30, 0).raw()).map(|i| c.core.entries[i as usize].loc), None);
}

/// A step of the random cache workload.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Fetch page `p` if it is not resident, then access object `o` of it.
    Access(u32, u16),
    /// Access and modify (rewrite the tag of) object `o` of page `p`.
    Modify(u32, u16, u32),
    /// Pin the object (a view), or unpin the oldest pin.
    Pin(u32, u16),
    Unpin,
    /// Follow the reference of an object (swizzle).
    Follow(u32, u16),
    /// End the transaction.
    Commit,
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    let page = 2u32..30;
    let oid = 0u16..12;
    prop_oneof![
        8 => (page.clone(), oid.clone()).prop_map(|(p, o)| Op::Access(p, o)),
        2 => (page.clone(), oid.clone(), any::<u32>()).prop_map(|(p, o, t)| Op::Modify(p, o, t)),
        1 => (page.clone(), oid.clone()).prop_map(|(p, o)| Op::Pin(p, o)),
        1 => Just(Op::Unpin),
        2 => (page, oid).prop_map(|(p, o)| Op::Follow(p, o)),
        1 => Just(Op::Commit),
    ]
}

/// The tag object `o` has before anyone changes it.
pub(crate) fn initial_tag(o: Oref) -> u32 {
    o.page().unwrap().get() * 1000 + u32::from(o.oid().get())
}

/// Page `p` as the "server" has it: 12 objects of sizes depending on `p`, each referencing the
/// same oid on the next page, with their committed tags.
pub(crate) fn server_page(p: u32, committed: &std::collections::HashMap<Oref, u32>) -> Vec<u8> {
    let objs: Vec<Vec<u8>> = (0..12u16)
        .map(|o| {
            let size = 20 + ((p as usize * 37 + o as usize * 53) % 220);
            let tag = committed.get(&oref(p, o)).copied().unwrap_or(initial_tag(oref(p, o)));
            obj(tag, size, Some(oref(p + 1, o)))
        })
        .collect();
    page_of(p, &objs)
}

/// Accesses `o` as the client does, fetching its page from `committed` on a miss.
pub(crate) fn access_fetching(
    c: &mut ClientCache,
    o: Oref,
    committed: &std::collections::HashMap<Oref, u32>,
) -> Result<(u32, u32), CacheError> {
    let i = c.core.entry_for(o)?;
    loop {
        match c.resolve(i)? {
            Need::Resident(loc) => return Ok((i, loc)),
            Need::Page(p) | Need::Stale(p) => {
                c.while_fetching()?;
                c.install_page(p, &server_page(p.get(), committed))?;
            }
            Need::Class(_) => unreachable!("the class is registered"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random accesses, modifications, pins and commits: the cache's invariants hold after
    /// every step, every object reads back the tag last written, modified objects stay
    /// resident until commit, and pinned objects do not move.
    #[test]
    fn hac_keeps_its_invariants_under_random_workloads(
        ops in proptest::collection::vec(op(), 1..300),
        frames in 8usize..20,
        n in 0u32..3,
        s in 1u32..4,
        background in any::<bool>(),
    ) {
        let params = HacParams { secondary_pointers: n, scan_frames: s, ..HacParams::default() };
        random_workload(PolicyConfig::Hac(params), ops, frames, background)?;
    }
}

/// Runs `ops` on a cache of `frames` frames under `policy`: the cache's invariants hold after
/// every step (the budget among them), every object reads back the tag last written (committed
/// or by the current transaction), modified objects stay resident until the transaction ends
/// (no-steal), and pinned objects do not move. Shared by every manager's model test.
pub(crate) fn random_workload(
    policy: PolicyConfig,
    ops: Vec<Op>,
    frames: usize,
    background: bool,
) -> Result<(), TestCaseError> {
    let mut c = cache(frames, policy, background);
    // Tags as the transaction sees them, and as committed (the "server").
    let mut tags: std::collections::HashMap<Oref, u32> = Default::default();
    let mut committed = tags.clone();
    let mut modified: Vec<(u32, Oref)> = Vec::new();
    let mut pins: std::collections::VecDeque<(Oref, u32)> = Default::default();
    for op in ops {
        match op {
            Op::Access(p, o) | Op::Follow(p, o) | Op::Modify(p, o, _) | Op::Pin(p, o) => {
                let o = oref(p, o);
                let (i, loc) = match access_fetching(&mut c, o, &committed) {
                    Ok(x) => x,
                    // Too much is pinned or modified for this small cache: end the
                    // transaction and let go of the pins, as an application would.
                    Err(CacheError::Full { .. }) => {
                        modified.clear();
                        c.commit_done(&[]).unwrap();
                        committed = tags.clone();
                        for (_, l) in pins.drain(..) {
                            c.core.unpin(l);
                        }
                        continue;
                    }
                    Err(e) => panic!("{e}"),
                };
                let want = tags.get(&o).copied().unwrap_or(initial_tag(o));
                prop_assert_eq!(c.core.arena.read_u32(loc as usize + TAG_AT), want);
                match op {
                    Op::Modify(_, _, t) => {
                        if c.core.entries[i as usize].flags & F_MODIFIED == 0 {
                            modified.push((i, o));
                        }
                        c.before_write(i).unwrap();
                        c.core.arena.write_u32(loc as usize + TAG_AT, t);
                        tags.insert(o, t);
                    }
                    Op::Pin(..) => {
                        c.core.pin(loc);
                        pins.push_back((o, loc));
                    }
                    Op::Follow(..) => {
                        c.core.follow(loc, REF_AT).unwrap();
                    }
                    _ => {}
                }
            }
            Op::Unpin => {
                if let Some((_, l)) = pins.pop_front() {
                    c.core.unpin(l);
                }
            }
            Op::Commit => {
                modified.clear();
                c.commit_done(&[]).unwrap();
                committed = tags.clone();
            }
        }
        c.check_invariants().map_err(TestCaseError::fail)?;
        for &(i, o) in &modified {
            prop_assert_eq!(c.core.lookup(o.raw()), Some(i));
            prop_assert!(
                c.core.entries[i as usize].loc != NOT_RESIDENT,
                "modified {:?} evicted",
                o
            );
        }
        for &(o, l) in &pins {
            let i = c.core.lookup(o.raw()).unwrap();
            prop_assert_eq!(c.core.entries[i as usize].loc, l, "pinned {:?} moved", o);
        }
    }
    Ok(())
}

/// The case HAC is for (the paper's T6-like traversals): pages holding one hot object among
/// many cold ones. A cyclic scan of the hot objects of 60 pages in a cache of fewer frames makes
/// a page cache miss on every access, while HAC keeps the hot objects, compacted, and stops
/// missing.
#[test]
fn hac_keeps_the_hot_objects_of_poorly_clustered_pages() {
    let committed = std::collections::HashMap::new();
    let mut fetches = Vec::new();
    for policy in [PolicyConfig::Fpc, PolicyConfig::HAC] {
        let mut c = cache(24, policy, true);
        let mut late = 0;
        for round in 0..10 {
            for p in 2..62u32 {
                let before = c.stats().fetches();
                access_fetching(&mut c, oref(p, 0), &committed).unwrap();
                if round >= 5 {
                    late += c.stats().fetches() - before;
                }
            }
        }
        c.core.check_invariants().unwrap();
        fetches.push(late);
    }
    let (fpc, hac) = (fetches[0], fetches[1]);
    assert_eq!(fpc, 5 * 60, "LRU over too few frames misses every time");
    assert!(hac * 10 < fpc, "HAC {hac} fetches, FPC {fpc}");
}

/// A clock for the replacement timer that advances by one at every read: the time of an
/// interval is the number of reads between its ends, so the split's arithmetic is exact (and
/// timing is never asserted).
fn counting_clock() -> u64 {
    static READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    READS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// HAC and FPC time usage computation and compaction inside the replacement they are timed as
/// a whole in: both parts move when frames are freed and never add up to more than the whole;
/// without a clock nothing is timed.
#[test]
fn replacement_is_split_into_usage_and_compaction_within_the_whole() {
    let committed = std::collections::HashMap::new();
    for policy in [PolicyConfig::HAC, PolicyConfig::Fpc] {
        for clock in [true, false] {
            let mut c = cache(16, policy, false);
            if clock {
                c.set_clock(counting_clock);
            }
            for round in 0..3 {
                for p in 2..40u32 {
                    access_fetching(&mut c, oref(p, round), &committed).unwrap();
                }
            }
            let s = c.stats();
            assert!(s.core.frames_freed > 0, "{policy}: the cache was too small to replace");
            if !clock {
                assert_eq!(
                    (s.replacement_time, s.usage_time, s.compaction_time),
                    (Duration::ZERO, Duration::ZERO, Duration::ZERO),
                    "{policy}: timed without a clock"
                );
                continue;
            }
            assert!(s.usage_time > Duration::ZERO, "{policy}: {s:?}");
            assert!(s.compaction_time > Duration::ZERO, "{policy}: {s:?}");
            assert!(
                s.usage_time + s.compaction_time <= s.replacement_time,
                "{policy}: parts {:?} + {:?} exceed the whole {:?}",
                s.usage_time,
                s.compaction_time,
                s.replacement_time
            );
        }
    }
}
