//! The one arena a program runs in, and the typed views kernels get of it (and of the
//! param buffers, which live outside the arena: `param`).
//!
//! A [`TSlot`] names a buffer by index in a table of base addresses (0: the arena,
//! `p + 1`: param `p`'s buffer). Soundness rests on the memory plan:
//! `rlx_compile::check_plan` proved at compile time that a step's outputs and temps never
//! overlap the inputs it reads, except for the in-place pairs the planner chose, and
//! kernels that run in place access the aliased pair only through raw pointers
//! (`Args::ptr`, `Out::ptr`). Debug builds re-check every slice handed out against the
//! step's outputs.

use crate::buffer::{Class, Elem};
use rlx_ir::shape::fmt_type;
use rlx_ir::{DType, Error, HostTensor, Result, TensorRef, encode_le};
use std::marker::PhantomData;

/// Arenas of at least this many bytes (an x86-64 huge page) are mapped on their own, on
/// a boundary of it, on Linux.
pub const HUGE_PAGE: usize = 2 << 20;

impl Drop for Arena {
    fn drop(&mut self) {
        match self.allocation {
            // SAFETY: allocated in `new` with exactly this layout.
            Allocation::Heap(layout) => unsafe { std::alloc::dealloc(self.raw, layout) },
            #[cfg(target_os = "linux")]
            // SAFETY: mapped in `new` with exactly this length, unmapped only here.
            Allocation::Mapped(bytes) => unsafe {
                libc::munmap(self.raw.cast(), bytes);
            },
        }
    }
}

/// Zeroed bytes, 64-byte aligned, handed out by the OS lazily (zero pages on first touch):
/// a 340 MiB arena (24 SmolLM2 blocks) costs nothing until touched, where filling it
/// eagerly took ~450 ms. Small arenas come from calloc (alignment 16, aligned up by hand:
/// Rust's allocator memsets any zeroed allocation aligned above 16).
///
/// On Linux an arena of at least [`HUGE_PAGE`] bytes is a mapping of its own that starts on
/// a 2 MiB boundary and asks for transparent huge pages (`MADV_HUGEPAGE`; the kernel's
/// default `madvise` mode gives them only to memory that asks). A weight streamed by the
/// packed f32 GEMM then misses the TLB once per 2 MiB instead of once per 4 KiB, a
/// two-level page walk each time in a VM. It bypasses malloc, whose thresholds the CLI
/// raises to 16 MiB (freed heap blocks are already-touched small pages). Intel Xeon (model
/// 207, no AMX), one thread, alternating runs: 32 x 768 x 3072 and 32 x 3072 x 768 against
/// packed weights 144-150 -> 160-163 GFLOP/s.
pub struct Arena {
    /// The 64-byte-aligned start.
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// The allocation as made, and how to give it back.
    raw: *mut u8,
    allocation: Allocation,
}

#[derive(Clone, Copy)]
enum Allocation {
    /// From the global allocator, with this layout.
    Heap(std::alloc::Layout),
    /// An anonymous mapping of this many bytes.
    #[cfg(target_os = "linux")]
    Mapped(usize),
}

// SAFETY: the arena owns its allocation; shared access is read-only and mutation goes
// through `&mut self` (or the unsafe views whose contract the plan upholds).
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl Arena {
    pub fn new(bytes: usize) -> Result<Arena> {
        let len = bytes.next_multiple_of(64);
        let too_big = || Error::runtime(format!("an arena of {bytes} bytes exceeds the address space"));
        let cannot = || Error::runtime(format!("cannot allocate an arena of {bytes} bytes"));
        #[cfg(target_os = "linux")]
        if len >= HUGE_PAGE {
            let mapped = len.checked_add(HUGE_PAGE).ok_or_else(too_big)?;
            // SAFETY: a fresh private anonymous mapping (zero-filled), owned by the arena.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    mapped,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return Err(cannot());
            }
            let raw = raw.cast::<u8>();
            // SAFETY: less than HUGE_PAGE bytes past `raw`, inside the mapping.
            let aligned = unsafe { raw.add(raw.align_offset(HUGE_PAGE)) };
            // Advice only: a kernel without transparent huge pages refuses it, and the
            // arena stays in small pages.
            // SAFETY: madvise touches no memory; the range lies inside the mapping.
            unsafe { libc::madvise(aligned.cast(), len - len % HUGE_PAGE, libc::MADV_HUGEPAGE) };
            let ptr = std::ptr::NonNull::new(aligned).ok_or_else(|| Error::internal("arena pointer"))?;
            return Ok(Arena { ptr, len, raw, allocation: Allocation::Mapped(mapped) });
        }
        let layout =
            std::alloc::Layout::from_size_align(len.checked_add(64).ok_or_else(too_big)?, 16).map_err(|_| too_big())?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        if raw.is_null() {
            return Err(cannot());
        }
        // SAFETY: at most 63 bytes past `raw`, inside the allocation.
        let aligned = unsafe { raw.add(raw.align_offset(64)) };
        let ptr = std::ptr::NonNull::new(aligned).ok_or_else(|| Error::internal("arena pointer"))?;
        Ok(Arena { ptr, len, raw, allocation: Allocation::Heap(layout) })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` initialized (zeroed) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub fn base(&mut self) -> BufPtr {
        BufPtr(self.ptr.as_ptr())
    }

    /// The arena's bytes, for writing constants and inputs into their slots.
    pub fn slot_bytes_mut(&mut self, slot: TSlot) -> Result<&mut [u8]> {
        let (a, b) = slot.range();
        self.bytes_mut().get_mut(a..b).ok_or_else(|| Error::internal("slot outside the arena"))
    }

    /// The bytes of `slot`.
    pub fn slot_bytes(&self, slot: TSlot) -> Result<&[u8]> {
        let (a, b) = slot.range();
        self.bytes().get(a..b).ok_or_else(|| Error::internal("slot outside the arena"))
    }
}

/// Writes `t` into `dst`, a buffer of storage `class`: f16/bf16 widened by value into f32
/// storage, or copied bit for bit into their own packed class.
pub fn write_host(dst: &mut [u8], class: Class, t: TensorRef<'_>) -> Result<()> {
    match (class, t.dtype()) {
        (Class::F32, DType::F16) => {
            for (d, s) in dst.chunks_exact_mut(4).zip(t.bytes().chunks_exact(2)) {
                d.copy_from_slice(&half::f16::from_le_bytes([s[0], s[1]]).to_f32().to_le_bytes());
            }
        }
        (Class::F32, DType::BF16) => {
            for (d, s) in dst.chunks_exact_mut(4).zip(t.bytes().chunks_exact(2)) {
                d.copy_from_slice(&half::bf16::from_le_bytes([s[0], s[1]]).to_f32().to_le_bytes());
            }
        }
        (c, d) if c == Class::for_storage(d, d.size_bytes())? && t.bytes().len() == dst.len() => {
            dst.copy_from_slice(t.bytes())
        }
        (c, d) => return Err(Error::internal(format!("write_host: {d} tensor into {c:?} storage"))),
    }
    Ok(())
}

/// The tensor held in `src` (storage `class`), as `dtype` with `dims`.
pub fn read_host(src: &[u8], class: Class, dtype: DType, dims: &[usize]) -> Result<HostTensor> {
    let bytes = match (class, dtype) {
        (Class::F32, DType::F16 | DType::BF16) => {
            let values: Vec<f32> = src.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let mut halves = vec![0u16; values.len()];
            crate::kernels::elementwise::narrow_to_half(dtype, &values, &mut halves);
            encode_le(&halves, u16::to_le_bytes)
        }
        (c, d) if c == Class::for_storage(d, d.size_bytes())? => {
            // Output sizes are the user's: a failed allocation is an error, not an abort.
            let mut bytes = Vec::new();
            bytes.try_reserve_exact(src.len()).map_err(|_| {
                Error::runtime(format!("cannot allocate {} bytes for an output {}", src.len(), fmt_type(d, dims)))
            })?;
            bytes.extend_from_slice(src);
            bytes
        }
        (c, d) => return Err(Error::internal(format!("read_host: {d} tensor from {c:?} storage"))),
    };
    HostTensor::from_bytes(dtype, dims, bytes)
}

/// A tensor's place: buffer (0 = the arena, `p + 1` = param `p`'s buffer), byte offset,
/// element count, storage class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TSlot {
    pub base: usize,
    pub offset: usize,
    pub len: usize,
    pub class: Class,
}

impl TSlot {
    fn range(&self) -> (usize, usize) {
        (self.offset, self.offset + self.len * self.class.size_bytes())
    }

    pub fn bytes(&self) -> usize {
        self.len * self.class.size_bytes()
    }

    fn overlaps(&self, other: &TSlot) -> bool {
        let (a, b) = (self.range(), other.range());
        self.base == other.base && a.0 < b.1 && b.0 < a.1
    }
}

/// A step's inputs.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    bases: &'a [BufPtr],
    slots: &'a [TSlot],
    outs: &'a [TSlot],
    _arena: PhantomData<&'a Arena>,
}

// SAFETY: Args only hands out shared views of input slots, which no thread writes while
// the step runs (the plan keeps outputs disjoint from inputs).
unsafe impl Send for Args<'_> {}
unsafe impl Sync for Args<'_> {}

impl<'a> Args<'a> {
    /// # Safety
    /// `bases[slot.base]` is the address of a live buffer each slot lies inside, no other
    /// thread writes those bytes during the step, and the slots satisfy the plan's
    /// guarantee: no input overlaps an output unless the step runs in place.
    pub unsafe fn new(bases: &'a [BufPtr], slots: &'a [TSlot], outs: &'a [TSlot]) -> Args<'a> {
        Args { bases, slots, outs, _arena: PhantomData }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn slot(&self, i: usize) -> Result<TSlot> {
        self.slots
            .get(i)
            .copied()
            .ok_or_else(|| Error::internal(format!("operand {i} of {} is missing", self.slots.len())))
    }

    /// Operand `i` as a typed slice. Not for an operand a step overwrites in place.
    pub fn get<T: Elem>(&self, i: usize) -> Result<&'a [T]> {
        let s = self.slot(i)?;
        if s.class != T::CLASS {
            return Err(Error::internal(format!("operand {i} is {:?} storage, not {:?}", s.class, T::CLASS)));
        }
        debug_assert!(!self.outs.iter().any(|o| o.overlaps(&s)), "operand {i} aliases an output");
        // SAFETY: the slot lies in its buffer, is aligned for its class (offsets are
        // multiples of 64 or of the element size; param buffers are aligned to their
        // element) and no output overlaps it during this step.
        Ok(unsafe { std::slice::from_raw_parts(at(self.bases, s).cast::<T>(), s.len) })
    }

    /// Operand `i`'s bytes (its storage class's layout).
    pub fn bytes(&self, i: usize) -> Result<&'a [u8]> {
        let s = self.slot(i)?;
        debug_assert!(!self.outs.iter().any(|o| o.overlaps(&s)), "operand {i} aliases an output");
        // SAFETY: as for `get`: in its buffer and not written during this step.
        Ok(unsafe { std::slice::from_raw_parts(at(self.bases, s), s.bytes()) })
    }

    /// Operand `i`'s first element, for kernels that run in place.
    pub fn ptr<T: Elem>(&self, i: usize) -> Result<*const T> {
        let s = self.slot(i)?;
        if s.class != T::CLASS {
            return Err(Error::internal(format!("operand {i} is {:?} storage, not {:?}", s.class, T::CLASS)));
        }
        Ok(at(self.bases, s).cast::<T>())
    }

    /// Element `pos` of integer operand `i` as i64 (indices of gather, rope, kv_append).
    pub fn index(&self, i: usize, pos: usize) -> Result<i64> {
        let s = self.slot(i)?;
        let at = |v: Option<i64>| v.ok_or_else(|| Error::internal(format!("index {pos} outside operand {i}")));
        match s.class {
            Class::I8 => at(self.get::<i8>(i)?.get(pos).map(|&x| x as i64)),
            Class::I32 => at(self.get::<i32>(i)?.get(pos).map(|&x| x as i64)),
            Class::I64 => at(self.get::<i64>(i)?.get(pos).copied()),
            Class::U8 => at(self.get::<u8>(i)?.get(pos).map(|&x| x as i64)),
            c => Err(Error::internal(format!("operand {i} is {c:?} storage, not integers"))),
        }
    }
}

/// The first byte of `slot`.
fn at(bases: &[BufPtr], slot: TSlot) -> *mut u8 {
    bases[slot.base].0.wrapping_add(slot.offset)
}

/// The start of a buffer a program's slots point into (the arena or a param buffer).
#[derive(Clone, Copy, Debug)]
pub struct BufPtr(pub *mut u8);

// SAFETY: a plain address; every access through it goes through `Args` / `Out`, whose
// constructors carry the aliasing contract.
unsafe impl Send for BufPtr {}
unsafe impl Sync for BufPtr {}

/// A step's outputs (and temps, after the outputs).
pub struct Out<'a> {
    bases: &'a [BufPtr],
    slots: &'a [TSlot],
    _arena: PhantomData<&'a mut Arena>,
}

impl<'a> Out<'a> {
    /// # Safety
    /// As for [`Args::new`]; the output slots are pairwise disjoint.
    pub unsafe fn new(bases: &'a [BufPtr], slots: &'a [TSlot]) -> Out<'a> {
        Out { bases, slots, _arena: PhantomData }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn slot(&self, i: usize) -> Result<TSlot> {
        self.slots
            .get(i)
            .copied()
            .ok_or_else(|| Error::internal(format!("output {i} of {} is missing", self.slots.len())))
    }

    /// Output `i` as a typed mutable slice, borrowed from `self`.
    pub fn get<T: Elem>(&mut self, i: usize) -> Result<&mut [T]> {
        let p = self.ptr::<T>(i)?;
        // SAFETY: in its buffer, aligned, disjoint from the step's inputs (module docs); the
        // borrow of `self` keeps it the only live view of any output.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, self.slots[i].len) })
    }

    /// Output `i`'s bytes (its storage class's layout).
    pub fn bytes_mut(&mut self, i: usize) -> Result<&mut [u8]> {
        let s = self.slot(i)?;
        // SAFETY: as for `get`.
        Ok(unsafe { std::slice::from_raw_parts_mut(at(self.bases, s), s.bytes()) })
    }

    /// Outputs `i` and `j` (distinct) as typed mutable slices at once.
    pub fn pair<T: Elem>(&mut self, i: usize, j: usize) -> Result<(&mut [T], &mut [T])> {
        if i == j {
            return Err(Error::internal("Out::pair of one output"));
        }
        let (pi, pj) = (self.ptr::<T>(i)?, self.ptr::<T>(j)?);
        // SAFETY: as `get`; the planner gives distinct outputs of a step disjoint bytes.
        Ok(unsafe {
            (
                std::slice::from_raw_parts_mut(pi, self.slots[i].len),
                std::slice::from_raw_parts_mut(pj, self.slots[j].len),
            )
        })
    }

    /// Output `i`'s first element, for kernels that run in place.
    pub fn ptr<T: Elem>(&self, i: usize) -> Result<*mut T> {
        let s = self.slot(i)?;
        if s.class != T::CLASS {
            return Err(Error::internal(format!("output {i} is {:?} storage, not {:?}", s.class, T::CLASS)));
        }
        Ok(at(self.bases, s).cast::<T>())
    }
}

/// Output 0 as a typed slice.
pub fn out_mut<'o, T: Elem>(out: &'o mut Out<'_>) -> Result<&'o mut [T]> {
    out.get(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes around the huge-page threshold: zeroed, aligned, writable to the last byte.
    #[test]
    fn arenas_are_zeroed_aligned_and_writable_on_both_sides_of_the_huge_page_threshold() {
        for bytes in [1, 63, 4097, HUGE_PAGE - 64, HUGE_PAGE, HUGE_PAGE + 1, 3 * HUGE_PAGE + 17] {
            let mut arena = Arena::new(bytes).unwrap();
            assert!(arena.len() >= bytes && arena.len().is_multiple_of(64), "{bytes}: len {}", arena.len());
            let base = arena.base().0 as usize;
            let align = if cfg!(target_os = "linux") && arena.len() >= HUGE_PAGE { HUGE_PAGE } else { 64 };
            assert!(base.is_multiple_of(align), "{bytes}: base {base:#x} not {align}-aligned");
            // One byte a page, and the last: all zero.
            let len = arena.len();
            let pages = (0..len).step_by(4096).chain([len - 1]);
            assert!(pages.clone().all(|i| arena.bytes()[i] == 0), "{bytes}: not zeroed");
            let all = arena.bytes_mut();
            all[0] = 1;
            all[len - 1] = 2;
            assert_eq!((arena.bytes()[0], arena.bytes()[len - 1]), (1, 2));
        }
    }

    /// A large arena's mapping carries the huge-page advice (`hg` in its VmFlags), where
    /// the kernel has transparent huge pages at all.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_arenas_ask_for_huge_pages() {
        // A kernel without transparent huge pages refuses the advice; qemu-user (`cargo
        // xtask qemu-test`) accepts it without passing it on.
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists()
            || std::env::var_os("RLX_EMULATED").is_some()
        {
            return;
        }
        let mut arena = Arena::new(3 * HUGE_PAGE).unwrap();
        let base = arena.base().0 as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut flags = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&base);
            } else if inside && let Some(f) = line.strip_prefix("VmFlags:") {
                flags = Some(f.split_whitespace().map(str::to_string).collect::<Vec<_>>());
            }
        }
        let flags = flags.expect("the arena's mapping in /proc/self/smaps");
        assert!(flags.iter().any(|f| f == "hg"), "VmFlags of the arena's mapping: {flags:?}");
        drop(arena);
    }
}
