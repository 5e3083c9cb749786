# Builds one `thor` per step of the hit-time breakdown, removing one piece of the client's hit
# path at a time (cumulatively), from a checkout of the commit named in README.md.
# Usage: python3 variants.py WORKTREE   (binaries go to /tmp/oo7-hitpath-bin)
import subprocess, shutil, os, sys
W = sys.argv[1] if len(sys.argv) > 1 else '/tmp/oo7-hitpath'
OUT = '/tmp/oo7-hitpath-bin'
env = dict(os.environ, CARGO_TARGET_DIR='/tmp/oo7-hitpath-target')

def patch(path, old, new):
    p = os.path.join(W, path)
    s = open(p).read()
    assert old in s, (path, old)
    open(p, 'w').write(s.replace(old, new, 1))

def build(name):
    subprocess.run(['cargo', 'build', '--release', '-q', '-p', 'thor-cli'], cwd=W, env=env, check=True)
    os.makedirs(OUT, exist_ok=True)
    shutil.copy('/tmp/oo7-hitpath-target/release/thor', os.path.join(OUT, name))

build('v0-baseline')
# Usage statistics: HAC's touch sets the top usage bit of the entry.
patch('crates/thor-cache/src/hac/mod.rs', '        entry.usage |= USAGE_TOP;\n', '        let _ = entry;\n')
build('v1-no-usage')
# The read set: a flag test on every access, a bitmap insert on the first.
patch('crates/thor-cache/src/manager.rs', '''        if e.flags & F_READ == 0 {
            e.flags |= F_READ;
            self.core.reads.insert(oref);
        }
        Some(loc)''', '''        let _ = F_READ;
        Some(loc)''')
build('v2-no-readset')
# The class check: the object's class word against C's.
patch('crates/thor-client/src/session.rs', '''        if !C::ANY {
            let want = inner.class_word::<C>()?;''', '''        if false && !C::ANY {
            let want = inner.class_word::<C>()?;''')
build('v3-no-classcheck')
# The live-view list (what replaced per-frame pins): a push in get, a pop when the view drops.
patch('crates/thor-client/src/session.rs', '        let slot = inner.push_view(loc);\n        let ptr = inner.cache.core.arena.base().wrapping_add(loc as usize);\n        Ok(View { s: self, idx, oref, loc, ptr, slot, _c: PhantomData })\n    }\n\n    /// Creates',
      '        let slot = 0;\n        let ptr = inner.cache.core.arena.base().wrapping_add(loc as usize);\n        Ok(View { s: self, idx, oref, loc, ptr, slot, _c: PhantomData })\n    }\n\n    /// Creates')
patch('crates/thor-client/src/session.rs', '        self.s.inner().drop_view(self.slot);\n', '        let _ = self.slot;\n')
build('v4-no-views')
print('built')
