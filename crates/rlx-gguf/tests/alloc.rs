//! Hostile counts cost no memory: a counting allocator records the largest single
//! request while the reader refuses files whose claimed counts the bytes cannot hold.
//! (Its own test binary: the allocator is process-wide.)

use rlx_gguf::Gguf;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// The record is process-wide: tests take turns.
static TURN: Mutex<()> = Mutex::new(());

// SAFETY: forwards to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// GGUF v3 with no tensors and one metadata key `big` holding an array of `item`s that
/// claims `count` items, followed by `rest` bytes.
fn file(item: u32, count: u64, rest: usize) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes());
    out.extend_from_slice(&3u64.to_le_bytes());
    out.extend_from_slice(b"big");
    out.extend_from_slice(&9u32.to_le_bytes());
    out.extend_from_slice(&item.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.resize(out.len() + rest, 0);
    out
}

/// GGUF v3 claiming `tensors` tensors and `keys` metadata entries, then `rest` zero bytes.
fn counts(tensors: u64, keys: u64, rest: usize) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&tensors.to_le_bytes());
    out.extend_from_slice(&keys.to_le_bytes());
    out.resize(out.len() + rest, 0);
    out
}

/// Forged tensor and key counts in a 16 MiB file: the bytes could hold ~600k tensor
/// infos, but nothing is reserved past the first 64k entries before they parse.
#[test]
fn claimed_entry_counts_reserve_little() {
    const MIB: usize = 1 << 20;
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    for (tensors, keys) in [(u64::MAX, 0), (0, u64::MAX), (1 << 40, 1 << 40)] {
        let bytes = Arc::new(counts(tensors, keys, 16 * MIB));
        LARGEST.store(0, Ordering::Relaxed);
        let e = Gguf::parse(bytes).err().expect("must fail");
        let largest = LARGEST.load(Ordering::Relaxed);
        // Zero bytes parse as empty names: the first entry or the second fails.
        assert!(e.message().contains("byte"), "{e}");
        assert!(largest <= 8 * MIB, "tensors {tensors}, keys {keys}: largest allocation {largest} bytes");
    }
}

#[test]
fn claimed_counts_allocate_nothing_large() {
    const MIB: usize = 1 << 20;
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // (item type, claimed count, bytes that follow): u64::MAX / 2 of anything; u32s,
    // strings and arrays claiming one item per byte left (4, 8 and 12 bytes each).
    let cases = [(0u32, u64::MAX / 2, 64usize), (4, MIB as u64, MIB), (8, MIB as u64, MIB), (9, MIB as u64, MIB)];
    for (item, count, rest) in cases {
        let bytes = Arc::new(file(item, count, rest));
        LARGEST.store(0, Ordering::Relaxed);
        let e = Gguf::parse(bytes).err().expect("must fail");
        let largest = LARGEST.load(Ordering::Relaxed);
        assert!(e.message().contains("'big'") && e.message().contains("byte"), "{e}");
        // The input itself is ~1 MiB; nothing the reader asks for may be larger.
        assert!(largest <= MIB, "item type {item}, count {count}: largest allocation {largest} bytes");
    }
}
