//! The arena: one preallocated block of page-sized frames.
//!
//! The client cache never allocates memory for objects after it starts: every fetched page, every
//! compacted object and every object the application creates lives in a frame of this arena.
//! Frame `f` occupies bytes `f * page_size .. (f + 1) * page_size`; an object is named by its byte
//! offset in the arena (its *location*), from which its frame is `loc / page_size`.
//!
//! # Why raw memory
//!
//! Applications read objects through views that hold a pointer into the arena for as long as the
//! view lives, while the cache goes on swizzling references and installing other pages in other
//! frames. Rust references to the arena would forbid that (a `&mut [u8]` over the arena may not
//! coexist with pointers into it), so the arena is a raw allocation accessed through raw pointers
//! derived from one base pointer, and the cache hands out no long-lived references into it.
//! Safety then rests on two invariants kept by the cache:
//!
//! - *Bounds:* every access checks `offset + len <= len()` (the `read_*`/`write_*` methods), or
//!   is to an object whose extent was checked against the arena when it was installed.
//! - *Pinning:* a frame holding an object that a view points to is never reused while pinned.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// Alignment of the arena: frames start on cache-line boundaries, so objects (4-aligned within
/// their pages) are 4-aligned in memory and a frame never shares a line with another.
const ALIGN: usize = 64;
/// The alignment the arena is allocated with. The system allocator hands zeroed memory out
/// without writing it (fresh pages from the kernel) only for alignments up to 16; a larger one
/// makes it write every byte (64 MiB of memset per session). So the arena is allocated with
/// this alignment and `ALIGN - ALLOC_ALIGN` spare bytes, and its base rounded up.
const ALLOC_ALIGN: usize = 16;

/// See the module documentation.
pub struct Arena {
    /// Start of the frames (`ALIGN`-aligned, inside the allocation).
    base: NonNull<u8>,
    /// Start of the allocation, for freeing it.
    alloc: NonNull<u8>,
    /// Bytes allocated: `frames * page_size`.
    len: usize,
    /// Bytes per frame.
    page_size: usize,
}

// SAFETY: the arena owns its allocation exclusively; it is as thread-safe as a `Box<[u8]>`.
// Moving it to another thread is sound; sharing needs `&`/`&mut` discipline like any owner.
unsafe impl Send for Arena {}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("frames", &self.frames())
            .field("page_size", &self.page_size)
            .finish()
    }
}

impl Arena {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len + ALIGN - ALLOC_ALIGN, ALLOC_ALIGN).expect("valid arena layout")
    }

    /// An arena of `frames` zeroed frames of `page_size` bytes. `frames` may be 0.
    pub fn new(frames: usize, page_size: usize) -> Arena {
        let len = frames.checked_mul(page_size).expect("arena size overflows");
        if len == 0 {
            return Arena { base: NonNull::dangling(), alloc: NonNull::dangling(), len, page_size };
        }
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let alloc = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        let pad = ptr.align_offset(ALIGN);
        debug_assert!(pad <= ALIGN - ALLOC_ALIGN);
        // SAFETY: `pad` is less than the spare bytes allocated, so the frames stay inside.
        let base = unsafe { alloc.add(pad) };
        advise_huge_pages(base.as_ptr(), len);
        Arena { base, alloc, len, page_size }
    }

    /// Number of frames.
    pub fn frames(&self) -> usize {
        self.len.checked_div(self.page_size).unwrap_or(0)
    }

    /// Bytes in the arena.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the arena has no frames.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes per frame.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The base pointer, for views that read objects without the cache (see the module
    /// documentation for what keeps that sound).
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    #[inline]
    fn check(&self, off: usize, n: usize) {
        assert!(
            off.checked_add(n).is_some_and(|end| end <= self.len),
            "arena access out of bounds"
        );
    }

    /// Reads the little-endian word at byte `off`.
    #[inline]
    pub fn read_u32(&self, off: usize) -> u32 {
        self.check(off, 4);
        // SAFETY: in bounds (checked); the arena is initialised (zeroed at allocation); an
        // unaligned read is used so no alignment promise is needed.
        u32::from_le(unsafe { self.base.as_ptr().add(off).cast::<u32>().read_unaligned() })
    }

    /// Writes the little-endian word at byte `off`.
    #[inline]
    pub fn write_u32(&mut self, off: usize, v: u32) {
        self.check(off, 4);
        // SAFETY: in bounds (checked); `&mut self` means no other code of the cache is using the
        // arena; views only read, through raw pointers, outside cache calls.
        unsafe { self.base.as_ptr().add(off).cast::<u32>().write_unaligned(v.to_le()) }
    }

    /// Copies `len` bytes at `off` into `out` (replacing its contents).
    pub fn copy_out(&self, off: usize, len: usize, out: &mut Vec<u8>) {
        out.clear();
        self.append_to(off, len, out);
    }

    /// Appends the `len` bytes at `off` to `out`.
    pub fn append_to(&self, off: usize, len: usize, out: &mut Vec<u8>) {
        self.check(off, len);
        out.reserve(len);
        let at = out.len();
        // SAFETY: in bounds (checked); `out` has capacity for `len` bytes and does not overlap
        // the arena (it is a separate allocation).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.as_ptr().add(off),
                out.as_mut_ptr().add(at),
                len,
            );
            out.set_len(at + len);
        }
    }

    /// Copies `src` into the arena at `off`.
    pub fn copy_in(&mut self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        // SAFETY: in bounds (checked); `src` cannot overlap the arena because no reference into
        // the arena escapes the cache.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(off), src.len())
        }
    }

    /// Moves `len` bytes from `from` to `to` within the arena (the ranges may overlap).
    pub fn move_within(&mut self, from: usize, to: usize, len: usize) {
        self.check(from, len);
        self.check(to, len);
        // SAFETY: both ranges are in bounds (checked); `copy` allows overlap.
        unsafe { std::ptr::copy(self.base.as_ptr().add(from), self.base.as_ptr().add(to), len) }
    }

    /// Zeroes `len` bytes at `off`.
    pub fn zero(&mut self, off: usize, len: usize) {
        self.check(off, len);
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(off), 0, len) }
    }

    /// A shared view of frame `f` for the duration of a cache call. The caller must not write
    /// the arena while the slice lives (the borrow of `self` enforces it).
    pub fn frame(&self, f: usize) -> &[u8] {
        let off = f * self.page_size;
        self.check(off, self.page_size);
        // SAFETY: in bounds (checked); initialised; no writes can happen while `&self` is
        // borrowed by the returned slice, and views do not write.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), self.page_size) }
    }

    /// A shared view of `len` bytes at `off`, for the duration of a cache call.
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        self.check(off, len);
        // SAFETY: as for `frame`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) }
    }

    /// A mutable view of `len` bytes at `off`.
    pub fn bytes_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        self.check(off, len);
        // SAFETY: in bounds (checked); `&mut self` excludes every other use for the lifetime of
        // the slice.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(off), len) }
    }
}

/// Asks the kernel to back the arena with transparent huge pages where it can (Linux, when
/// `transparent_hugepage` is `madvise` or `always`). A cold run touches each fresh frame once,
/// and with 4 KiB pages that was two page faults per fetched page: a fifth of a cold OO7 T1's
/// time went to faulting and zeroing the arena. A 2 MiB page takes one fault for 256 frames of
/// 8 KiB (the zeroing stays). The arena is the budget's frames, allocated whole, so backing
/// untouched frames early adds nothing the budget does not already count. Advice only: a
/// kernel that refuses it leaves the arena as it was.
fn advise_huge_pages(base: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if len < HUGE {
            return;
        }
        // madvise wants a page-aligned start; round inward to 4 KiB pages.
        let start = (base as usize).next_multiple_of(4096);
        let end = (base as usize + len) & !4095;
        if end > start {
            // SAFETY: the range lies inside the arena's allocation, which this process owns;
            // MADV_HUGEPAGE changes how it is backed, never its contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (base, len);
}

impl Drop for Arena {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this layout and not freed before.
            unsafe { dealloc(self.alloc.as_ptr(), Self::layout(self.len)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_copies() {
        let mut a = Arena::new(3, 1024);
        assert_eq!(a.frames(), 3);
        assert!(a.frame(2).iter().all(|&b| b == 0));
        a.write_u32(1024 + 8, 0xDEAD_BEEF);
        assert_eq!(a.read_u32(1024 + 8), 0xDEAD_BEEF);
        a.copy_in(2048, b"hello");
        let mut out = Vec::new();
        a.copy_out(2048, 5, &mut out);
        assert_eq!(out, b"hello");
        a.move_within(2048, 2050, 5);
        assert_eq!(a.bytes(2050, 5), b"hello");
        assert_eq!(a.base() as usize % ALIGN, 0);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_panics() {
        let a = Arena::new(1, 1024);
        a.read_u32(1022);
    }

    #[test]
    fn empty_arena() {
        let a = Arena::new(0, 1024);
        assert!(a.is_empty());
        assert_eq!(a.frames(), 0);
    }
}
