//! Param buffers: every param of a CPU program lives in a buffer of its own, outside the
//! arena, so that
//! - a weight can be the bytes of a memory-mapped file, with no copy (a GGUF model's
//!   92 MiB of Q4_1 blocks are read in place);
//! - two programs can hold the same buffer: a prefill and a decode graph share one KV
//!   cache, which each `kv_append`s into in place (the planner's param state, see
//!   `rlx_compile::memory`).
//!
//! A buffer is either owned (zeroed on creation, writable) or borrowed bytes (read-only).
//! A program holds the lock of every owned buffer it uses for the whole run, exclusively
//! where it writes the buffer, shared where it only reads it (host writes take it
//! exclusively, host reads shared): two programs that write one cache cannot run at once
//! (the second gets an `Err`, not a race), while programs that only read a buffer can.

use crate::arena::{Arena, BufPtr, read_host, write_host};
use crate::buffer::Class;
use crate::kernels::half_gemm::{Operand, Tiles};
use crate::kernels::packed_gemm::Panels;
use crate::kernels::q8_packed::Packed;
use rlx_ir::quant::QuantScheme;
use rlx_ir::shape::{fmt_type, numel};
use rlx_ir::{DType, Error, HostTensor, Result};
use std::ops::Range;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

/// Bytes a param buffer can borrow (a memory map, a `Vec<u8>`, ...).
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// What keeps the bytes alive (they are reached through `Inner::start`).
enum Storage {
    Owned { _memory: Arena },
    Borrowed { _bytes: SharedBytes },
}

struct Inner {
    dtype: DType,
    dims: Vec<usize>,
    class: Class,
    /// First byte (stable: the arena or the borrowed bytes never move).
    start: BufPtr,
    bytes: usize,
    storage: Storage,
    /// Held while a program runs on an owned buffer, or the host reads or writes it:
    /// exclusively by writers, shared by readers.
    lock: RwLock<()>,
    /// The f32 weight packed for `packed_gemm`, per (dims, strides) it is read with;
    /// dropped whenever the bytes change.
    packed: Mutex<Vec<(PackKey, Arc<Panels>)>>,
    /// The quantized weight repacked for `q8_packed` (per scheme and shape read as);
    /// dropped whenever the bytes change.
    q8_packed: Mutex<Vec<Arc<Packed>>>,
    /// The bf16 weight packed for the half GEMM's tiled arms, as `packed`.
    tiles: Mutex<Vec<(PackKey, Arc<Tiles>)>>,
    /// Drops the resident pages of borrowed, file-mapped bytes once a repacked copy
    /// serves every reader (see [`ParamBuffer::with_page_release`]).
    page_release: Option<PageRelease>,
}

/// Drops the resident pages under a slice of file-mapped bytes (`rlx_gguf`'s).
pub type PageRelease = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// A held [`ParamBuffer`] lock (released on drop).
pub(crate) enum ParamGuard<'a> {
    Read { _guard: RwLockReadGuard<'a, ()> },
    Write { _guard: RwLockWriteGuard<'a, ()> },
}

/// How a product reads a weight: `[k, n]` with (row, column) element strides.
type PackKey = ((usize, usize), (usize, usize));

/// A param's storage, shareable between programs (cloning shares it).
#[derive(Clone)]
pub struct ParamBuffer(Arc<Inner>);

impl std::fmt::Debug for ParamBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_borrowed() { "borrowed" } else { "owned" };
        write!(f, "ParamBuffer({}, {kind})", fmt_type(self.0.dtype, &self.0.dims))
    }
}

impl ParamBuffer {
    /// A zeroed, writable buffer for a `dtype` tensor of `dims`, each element in its
    /// declared width (f16/bf16 packed).
    pub fn zeroed(dtype: DType, dims: &[usize]) -> Result<ParamBuffer> {
        ParamBuffer::zeroed_in(Class::for_storage(dtype, dtype.size_bytes())?, dtype, dims)
    }

    /// A zeroed, writable buffer storing `dtype` in `class` (a program's slot: f16/bf16
    /// packed, or widened to f32 where a reader needs that).
    pub(crate) fn zeroed_in(class: Class, dtype: DType, dims: &[usize]) -> Result<ParamBuffer> {
        // Dims come from users (a model's `--ctx`, a GGUF's head counts): checked.
        let bytes = rlx_ir::shape::checked_numel(dims)
            .and_then(|n| n.checked_mul(class.size_bytes()))
            .ok_or_else(|| Error::input(format!("a buffer of {} overflows usize", fmt_type(dtype, dims))))?;
        let mut arena = Arena::new(bytes)?;
        let start = arena.base();
        Ok(ParamBuffer(Arc::new(Inner {
            dtype,
            dims: dims.to_vec(),
            class,
            start,
            bytes,
            storage: Storage::Owned { _memory: arena },
            lock: RwLock::new(()),
            packed: Mutex::default(),
            q8_packed: Mutex::default(),
            tiles: Mutex::default(),
            page_release: None,
        })))
    }

    /// A borrowed buffer whose bytes are mapped from a file: once a kernel reads a
    /// repacked copy instead (the 8-bit decode's `q8_packed`, which the 16-bit prompt GEMM
    /// reads too), `release` drops the file's pages under the bytes, so the weight is not
    /// resident twice. Other buffers are returned as they are.
    pub fn with_page_release(mut self, release: PageRelease) -> ParamBuffer {
        let borrowed = self.is_borrowed();
        if let (Some(inner), true) = (Arc::get_mut(&mut self.0), borrowed) {
            inner.page_release = Some(release);
        }
        self
    }

    /// A buffer holding the little-endian tensor in `bytes[range]`. Borrowed without a
    /// copy when the range is aligned to its element (f16/bf16 stay packed); otherwise an
    /// owned copy.
    pub fn from_bytes(dtype: DType, dims: &[usize], bytes: SharedBytes, range: Range<usize>) -> Result<ParamBuffer> {
        let want = numel(dims) * dtype.size_bytes();
        let all = (*bytes).as_ref();
        let src = all.get(range.clone()).ok_or_else(|| {
            Error::input(format!("bytes {}..{} lie outside the {} bytes given", range.start, range.end, all.len()))
        })?;
        if src.len() != want {
            return Err(Error::input(format!(
                "{} needs {want} bytes, got {} (bytes {}..{})",
                fmt_type(dtype, dims),
                src.len(),
                range.start,
                range.end
            )));
        }
        let class = Class::for_storage(dtype, dtype.size_bytes())?;
        if !(src.as_ptr() as usize).is_multiple_of(class.size_bytes()) {
            let buffer = ParamBuffer::zeroed(dtype, dims)?;
            buffer.write(&HostTensor::from_bytes(dtype, dims, src.to_vec())?)?;
            return Ok(buffer);
        }
        let start = BufPtr(src.as_ptr().cast_mut());
        Ok(ParamBuffer(Arc::new(Inner {
            dtype,
            dims: dims.to_vec(),
            class,
            start,
            bytes: want,
            storage: Storage::Borrowed { _bytes: bytes },
            lock: RwLock::new(()),
            packed: Mutex::default(),
            q8_packed: Mutex::default(),
            tiles: Mutex::default(),
            page_release: None,
        })))
    }

    pub fn dtype(&self) -> DType {
        self.0.dtype
    }

    pub fn dims(&self) -> &[usize] {
        &self.0.dims
    }

    pub(crate) fn class(&self) -> Class {
        self.0.class
    }

    pub(crate) fn start(&self) -> BufPtr {
        self.0.start
    }

    /// Whether the buffer borrows outside bytes (read-only) rather than owning them.
    pub fn is_borrowed(&self) -> bool {
        matches!(self.0.storage, Storage::Borrowed { .. })
    }

    /// Whether this buffer can be bound as param `name` of `dtype` and `dims`, which a
    /// program writes in place when `written` (a cache cannot borrow read-only bytes).
    pub fn check_binds(&self, name: &str, dtype: DType, dims: &[usize], written: bool) -> Result<()> {
        if self.0.dtype != dtype || self.0.dims != dims {
            return Err(Error::input(format!(
                "param '{name}' expects {}, the buffer holds {}",
                fmt_type(dtype, dims),
                fmt_type(self.0.dtype, &self.0.dims)
            )));
        }
        if written && self.is_borrowed() {
            return Err(Error::input(format!(
                "param '{name}' is a cache this program writes in place; it cannot borrow read-only bytes"
            )));
        }
        Ok(())
    }

    /// An identity of the storage, equal for every clone and unique among live buffers
    /// (another backend keys its device copy of a shared buffer by it).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Whether `self` and `other` are the same storage.
    pub fn same_as(&self, other: &ParamBuffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Locks an owned buffer for a writer (`write`: alone) or a reader (beside other
    /// readers); `None` for borrowed bytes, which nobody writes. A busy buffer is an
    /// error, not a wait: a program that writes a buffer runs alone on it, and none
    /// blocks another forever.
    pub(crate) fn lock(&self, name: &str, write: bool) -> Result<Option<ParamGuard<'_>>> {
        if self.is_borrowed() {
            return Ok(None);
        }
        let busy = || {
            Error::runtime(format!(
                "param '{name}' ({}) is in use by another program running now; a program that writes a buffer runs \
                 alone on it",
                fmt_type(self.0.dtype, &self.0.dims)
            ))
        };
        // A panic while a guard was held leaves the bytes as they were: the lock stays usable.
        Ok(Some(if write {
            match self.0.lock.try_write() {
                Ok(guard) => ParamGuard::Write { _guard: guard },
                Err(TryLockError::Poisoned(p)) => ParamGuard::Write { _guard: p.into_inner() },
                Err(TryLockError::WouldBlock) => return Err(busy()),
            }
        } else {
            match self.0.lock.try_read() {
                Ok(guard) => ParamGuard::Read { _guard: guard },
                Err(TryLockError::Poisoned(p)) => ParamGuard::Read { _guard: p.into_inner() },
                Err(TryLockError::WouldBlock) => return Err(busy()),
            }
        }))
    }

    /// Writes `t` (of the buffer's type) into an owned buffer.
    pub fn write(&self, t: &HostTensor) -> Result<()> {
        if t.dtype() != self.0.dtype || t.dims() != self.0.dims.as_slice() {
            return Err(Error::input(format!(
                "buffer of {} cannot take {}",
                fmt_type(self.0.dtype, &self.0.dims),
                fmt_type(t.dtype(), t.dims())
            )));
        }
        if self.is_borrowed() {
            return Err(Error::input("a buffer borrowing outside bytes is read-only"));
        }
        let _guard = self.lock("(host write)", true)?;
        // SAFETY: an owned buffer of `bytes` bytes; every writer holds its lock (taken
        // above).
        let dst = unsafe { std::slice::from_raw_parts_mut(self.0.start.0, self.0.bytes) };
        self.forget_packed();
        write_host(dst, self.0.class, t.view())
    }

    /// The f32 weight as `packed_gemm` reads it (`[k, n]` with element strides
    /// `strides`), packed on the first call after the bytes last changed. The caller holds
    /// the buffer's lock (or it is borrowed, never written).
    pub(crate) fn f32_panels(&self, dims: (usize, usize), strides: (usize, usize)) -> Result<Arc<Panels>> {
        let mut packed = self.0.packed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, panels)) = packed.iter().find(|(key, _)| *key == (dims, strides)) {
            return Ok(panels.clone());
        }
        if self.0.class != Class::F32 {
            return Err(Error::internal(format!("packing a {:?} buffer as f32", self.0.class)));
        }
        // SAFETY: `bytes` bytes of f32 words (checked above) from the 64-byte-aligned
        // start, not written while the caller holds the lock.
        let values = unsafe { std::slice::from_raw_parts(self.0.start.0.cast::<f32>(), self.0.bytes / 4) };
        let panels = Arc::new(Panels::pack(values, dims, strides)?);
        packed.push(((dims, strides), panels.clone()));
        Ok(panels)
    }

    /// How many packed copies of the bytes the buffer holds (f32 panels, repacked quants,
    /// bf16 tiles: memory beside the bytes), made by the programs that read it.
    pub fn packed_copies(&self) -> usize {
        self.0.packed.lock().unwrap_or_else(|e| e.into_inner()).len()
            + self.0.q8_packed.lock().unwrap_or_else(|e| e.into_inner()).len()
            + self.0.tiles.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Drops the packed copies: the bytes changed (a host write, or a program that
    /// writes the buffer in place ran).
    pub(crate) fn forget_packed(&self) {
        self.0.packed.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.0.q8_packed.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.0.tiles.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The bf16 weight (`[k, n]` with element strides `strides`) as the half GEMM's tiled
    /// arms read it, packed on the first call after the bytes last changed. The caller
    /// holds the buffer's lock (or it is borrowed, never written).
    pub(crate) fn bf16_tiles(&self, dims: (usize, usize), strides: (usize, usize)) -> Result<Arc<Tiles>> {
        let mut tiles = self.0.tiles.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, t)) = tiles.iter().find(|(key, _)| *key == (dims, strides)) {
            return Ok(t.clone());
        }
        let n = self.0.bytes / self.0.class.size_bytes().max(1);
        let (k, cols) = dims;
        if self.0.dtype != DType::BF16 || (k > 0 && cols > 0 && (k - 1) * strides.0 + (cols - 1) * strides.1 >= n) {
            return Err(Error::internal(format!(
                "packing a {} buffer as a [{k}, {cols}] bf16 weight",
                fmt_type(self.0.dtype, &self.0.dims)
            )));
        }
        // SAFETY: `bytes` bytes of the class's elements from the 64-byte-aligned start,
        // not written while the caller holds the lock.
        let operand = unsafe {
            match self.0.class {
                Class::BF16 => Operand::BF16(std::slice::from_raw_parts(self.0.start.0.cast::<half::bf16>(), n)),
                Class::F32 => Operand::Wide(std::slice::from_raw_parts(self.0.start.0.cast::<f32>(), n)),
                other => return Err(Error::internal(format!("packing a {other:?} buffer as bf16 tiles"))),
            }
        };
        let packed = Arc::new(
            Tiles::pack(operand, dims, strides).ok_or_else(|| Error::internal("bf16 tiles from an f16 operand"))?,
        );
        tiles.push(((dims, strides), packed.clone()));
        Ok(packed)
    }

    /// The weight (`n` rows of `k` values in `scheme`) as `q8_packed` reads it, repacked
    /// on the first call after the bytes last changed, on `workers` (else on the calling
    /// thread alone). The caller holds the buffer's lock (or it is borrowed, never written).
    pub(crate) fn q8_packed(
        &self,
        scheme: QuantScheme,
        n: usize,
        k: usize,
        workers: Option<&rayon::ThreadPool>,
    ) -> Result<Arc<Packed>> {
        let mut packed = self.0.q8_packed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = packed.iter().find(|p| (p.scheme, p.n, p.k) == (scheme, n, k)) {
            return Ok(p.clone());
        }
        let row = scheme.row_bytes(k)?;
        if self.0.class != Class::U8 || self.0.bytes != n * row {
            return Err(Error::internal(format!(
                "repacking a {:?} buffer of {} bytes as {n} rows of {k} {scheme:?} values",
                self.0.class, self.0.bytes
            )));
        }
        // SAFETY: `bytes` bytes from `start`, not written while the caller holds the lock.
        let bytes = unsafe { std::slice::from_raw_parts(self.0.start.0, self.0.bytes) };
        let repack = || Packed::new(scheme, bytes, n, k, self.0.page_release.as_ref());
        let p = Arc::new(match workers {
            Some(pool) => pool.install(repack),
            None => crate::threads::inline(repack),
        });
        packed.push(p.clone());
        Ok(p)
    }

    /// The tensor the buffer holds.
    pub fn read(&self) -> Result<HostTensor> {
        let _guard = self.lock("(host read)", false)?;
        // SAFETY: `bytes` bytes from `start`, not written while the lock is held (borrowed
        // bytes are never written).
        let src = unsafe { std::slice::from_raw_parts(self.0.start.0, self.0.bytes) };
        read_host(src, self.0.class, self.0.dtype, &self.0.dims)
    }

    pub(crate) fn byte_len(&self) -> usize {
        self.0.bytes
    }
}
