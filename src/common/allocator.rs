//! The process's memory allocator, under every allocation on the request
//! path: mimalloc, reached through its plain `mi_malloc` where that is
//! enough. The binary installs it (`src/main.rs`); the rest of the gateway
//! only asks it, after work done once in a while off the request path, to
//! [give back](give_back_free_memory) what that work freed.
//!
//! A request makes forty to seventy allocations (run detail, a 100-row
//! result page). The `mimalloc` crate's allocator passes each to
//! `mi_malloc_aligned`, whatever its alignment; in mimalloc 3 that call
//! takes a slower path for any block of more than 1 KiB whose size is not
//! a power of two (an over-allocation, then an aligned pointer into it),
//! which a page's buffers, boxed futures and header tables all are. Most
//! Rust allocations ask for an alignment `malloc` always gives (at most
//! 16 bytes, and not more than their size: the rule std's own `System`
//! allocator follows for `malloc`), so those go to `mi_malloc` and the
//! rest to the aligned calls (deploy/bench/RESULTS.md has the figures).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys::{
    mi_collect, mi_free, mi_malloc, mi_malloc_aligned, mi_realloc, mi_realloc_aligned, mi_zalloc,
    mi_zalloc_aligned,
};

/// The alignment every block of at least that size from `mi_malloc` has
/// (mimalloc's `MI_MAX_ALIGN_SIZE` on 64-bit targets).
const PLAIN_ALIGN: usize = 16;

/// mimalloc as Rust's global allocator: the binary installs it, and so
/// does the bare translation the benchmarks compare with.
pub struct Allocator;

/// Whether a block of `size` bytes from the plain calls is aligned enough.
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every call hands mimalloc a size and, for the aligned calls, the
// layout's alignment (a power of two, as `Layout` guarantees); the plain
// calls are used only where their blocks have that alignment (see
// `plain`), and every block is freed by `mi_free`, which takes blocks of
// all of them.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi_malloc(layout.size()).cast()
            } else {
                mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi_zalloc(layout.size()).cast()
            } else {
                mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the trait's contract).
        unsafe { mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (the
        // trait's contract); the new block keeps its alignment.
        unsafe {
            if plain(layout.align(), new_size) {
                mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

/// Returns to the system, now, the memory the calling thread has freed,
/// and whatever freed memory mimalloc still holds for later.
///
/// mimalloc keeps freed pages for a while (a second by default) and returns
/// them only when the thread that freed them allocates or frees again. A
/// thread of tokio's blocking pool that opened or wrote the inventory's
/// redb file then sits idle with them (about 2.5 MB of an idle gateway),
/// and so does start-up's garbage (about 1 MB) once the gateway waits for
/// requests: see docs/inventory.md, "What it takes in memory". Called at
/// the end of such work, on its thread: once at start-up, once a flush.
/// Never on the request path, where freed pages are wanted again at once.
pub(crate) fn give_back_free_memory() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any
    // thread at any time; it only frees what mimalloc itself holds unused.
    #[allow(unsafe_code)]
    unsafe {
        mi_collect(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of every alignment and size the rule tells apart have their
    /// alignment, keep their contents when grown or shrunk, and are
    /// zeroed when asked.
    #[test]
    fn blocks_are_aligned_and_keep_their_contents() {
        let a = Allocator;
        for align in [1, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1, 3, 8, 15, 16, 17, 24, 100, 1025, 3000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero size; each block is freed once, by this
                // allocator, with the layout it was made with.
                #[allow(unsafe_code)]
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "{size} {align}");
                    std::ptr::write_bytes(p, 0xa5, size);
                    let q = a.realloc(p, layout, size * 2 + 1);
                    assert_eq!(q as usize % align, 0, "{size} {align}");
                    assert!((0..size).all(|i| *q.add(i) == 0xa5));
                    let grown = Layout::from_size_align(size * 2 + 1, align).unwrap();
                    let r = a.realloc(q, grown, size.div_ceil(2));
                    assert_eq!(r as usize % align, 0, "{size} {align}");
                    assert!((0..size.div_ceil(2)).all(|i| *r.add(i) == 0xa5));
                    a.dealloc(r, Layout::from_size_align(size.div_ceil(2), align).unwrap());
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "{size} {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    a.dealloc(z, layout);
                }
            }
        }
    }

    /// Resident memory of this process, from `/proc/self/statm`.
    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    /// What a thread allocated and freed (64 MB in 4 KiB blocks, as a redb
    /// flush frees its pages) leaves the process once it is given back.
    /// Other tests run beside this one, so only half is asked to go.
    #[test]
    fn freed_memory_is_given_back() {
        const BLOCKS: usize = 16 * 1024;
        const BLOCK: usize = 4096;
        std::thread::spawn(|| {
            let a = Allocator;
            let layout = Layout::from_size_align(BLOCK, 8).unwrap();
            // SAFETY: non-zero sizes; each block is written within its
            // size and freed once, by this allocator, with its layout.
            #[allow(unsafe_code)]
            let blocks: Vec<*mut u8> = (0..BLOCKS)
                .map(|_| unsafe {
                    let p = a.alloc(layout);
                    std::ptr::write_bytes(p, 1, BLOCK);
                    p
                })
                .collect();
            let held = resident_bytes();
            for p in blocks {
                #[allow(unsafe_code)]
                unsafe {
                    a.dealloc(p, layout)
                };
            }
            give_back_free_memory();
            let after = resident_bytes();
            assert!(
                after + BLOCKS * BLOCK / 2 <= held,
                "{} MB resident with the blocks, {} MB after they were freed and given back",
                held >> 20,
                after >> 20
            );
        })
        .join()
        .unwrap();
    }
}
