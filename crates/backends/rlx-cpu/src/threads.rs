//! The worker pools. Work is always split across independent outputs, each computed
//! exactly as in a one-thread run, so results are bit-identical whatever the thread count
//! (tests compare 1, 2 and 3 threads bit for bit).

use rayon::ThreadPool;
use rlx_ir::{Error, Result};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

thread_local! {
    /// Set while a program runs on its caller's thread ([`inline`]).
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// Set on a worker while it runs a program's steps ([`with_workers_awake`]) or keeps
    /// itself awake for one: such a thread never starts (another) keep-awake loop.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Sets a thread-local flag for the length of `f` (restored after, on unwinding too).
fn with_flag<R>(flag: &'static std::thread::LocalKey<Cell<bool>>, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static std::thread::LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.set(self.1);
        }
    }
    let _restore = Restore(flag, flag.replace(true));
    f()
}

/// Runs `f` (a program's steps, on a worker of the current pool) while the pool's other
/// workers stay awake: each polls for rayon work (`rayon::yield_now`, yielding the core
/// to the OS when there is none) instead of going to sleep between two parallel steps.
/// A decode step is ~2000 short kernels; waking a sleeping worker for each split cost
/// 10-25 us here, as much as an 8-row product of one layer takes on one thread (AMD EPYC).
///
/// The other workers keep polling for [`LINGER`] after the pool's last run ends, so the
/// next run (a decode step after its tokens are sampled, a caller's loop) starts on an
/// awake worker instead of waking one: 64K-element exp on 2 threads, called after a
/// 200 us gap, 65-191 -> 42-49 us a run (Intel Xeon, model 207). The worker that ran `f`
/// does not linger: the calling thread (not a worker) has its core for its own work
/// between runs; with every worker polling, `rlx bench serve --clients 1` read 257-320
/// tok/s against 310-317 with one fewer.
///
/// A keep-awake loop runs only on a worker that is neither running a program nor keeping
/// itself awake already, and ends once no run of its pool is in progress and the linger
/// is over: a program's thread never waits on one, so runs sharing a pool cannot wait on
/// each other.
pub fn with_workers_awake<R>(f: impl FnOnce() -> R) -> R {
    let workers = rayon::current_num_threads();
    if workers < 2 || INLINE.get() || rayon::current_thread_index().is_none() {
        return f();
    }
    let state = Awake::of_this_pool(workers);
    state.runs.fetch_add(1, Ordering::AcqRel);
    struct Ended(&'static Awake);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.until_us.fetch_max(Awake::now_us() + LINGER.as_micros() as u64, Ordering::AcqRel);
            self.0.runs.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let ended = Ended(state);
    for _ in 1..workers {
        rayon::spawn(move || state.keep_awake());
    }
    let result = with_flag(&BUSY, f);
    drop(ended);
    result
}

/// How long a pool's workers keep polling for work after its last run ends.
/// onnxruntime's workers spin ~50 ms after a run here, OpenMP runtimes 200 ms by default;
/// 1 ms covers a caller's gap between runs (an 8-row decode step's sampling) and burns
/// little once it stops calling.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(1);

/// A pool's runs in progress and the end of its linger ([`with_workers_awake`]).
struct Awake {
    runs: AtomicUsize,
    /// Microseconds after [`Awake::now_us`]'s epoch.
    until_us: AtomicU64,
}

impl Awake {
    /// The state of the current worker's pool, of `workers` threads: that of every pool of
    /// its size (`pool` keeps one per size; a pool of the same size built elsewhere shares
    /// it, which only keeps both awake together). Looked up once per worker (a worker
    /// stays in its pool), not under a lock on every run.
    fn of_this_pool(workers: usize) -> &'static Awake {
        thread_local! {
            static MINE: Cell<Option<&'static Awake>> = const { Cell::new(None) };
        }
        if let Some(state) = MINE.get() {
            return state;
        }
        static STATES: OnceLock<Mutex<HashMap<usize, &'static Awake>>> = OnceLock::new();
        let mut states = STATES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let state = *states
            .entry(workers)
            .or_insert_with(|| Box::leak(Box::new(Awake { runs: AtomicUsize::new(0), until_us: AtomicU64::new(0) })));
        MINE.set(Some(state));
        state
    }

    fn now_us() -> u64 {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
    }

    /// Polls for rayon work on this worker until no run is in progress and the linger is
    /// over (at once when this worker runs a program or keeps awake already).
    fn keep_awake(&self) {
        if BUSY.get() {
            return;
        }
        with_flag(&BUSY, || {
            loop {
                if rayon::yield_now() == Some(rayon::Yield::Executed) {
                    continue;
                }
                if self.runs.load(Ordering::Acquire) == 0 && Self::now_us() >= self.until_us.load(Ordering::Acquire) {
                    break;
                }
                std::thread::yield_now();
            }
        })
    }
}

/// Workers the running kernel may split its work across: its pool's, or 1 while a
/// program runs inline on the caller's thread (which belongs to no pool: rayon would
/// otherwise send the split to the global pool, ignoring the thread count asked for).
/// Kernels ask this, never `rayon::current_num_threads`.
pub fn current() -> usize {
    if INLINE.get() { 1 } else { rayon::current_num_threads() }
}

/// Runs `f` on this thread with [`current`] = 1 (restored after, on unwinding too).
pub fn inline<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&INLINE, f)
}

/// Threads to use when the caller does not say: `RLX_THREADS`, else the host's cores.
pub fn default_threads() -> usize {
    std::env::var("RLX_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The shared pool of `n` workers (built on first use, then reused by every program).
pub fn pool(n: usize) -> Result<Arc<ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
    let n = n.max(1);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if n > MAX_THREADS_PER_CORE * cores {
        return Err(Error::input(format!(
            "{n} threads is more than {MAX_THREADS_PER_CORE} per core ({cores} cores here): results do not change with \
             the thread count, and oversubscribed workers only wait on each other"
        )));
    }
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&n) {
        return Ok(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("rlx-worker-{i}"))
        .build()
        .map_err(|e| Error::runtime(format!("cannot start {n} worker threads: {e}")))?;
    Ok(pools.entry(n).or_insert(Arc::new(p)).clone())
}

/// Oversubscription allowed: `--threads 1000` on 2 cores took 55 s for a 0.2 s run (every
/// barrier waits for 1000 wake-ups); 8 per core still leaves room for tests of odd counts.
pub const MAX_THREADS_PER_CORE: usize = 8;

/// Elements below which an elementwise kernel stays on one thread: splitting 32K f32
/// (128 KiB, L2-resident) costs more in wake-ups than it saves.
pub const MIN_PARALLEL_ELEMS: usize = 1 << 15;

/// Runs `f(start, x_rows, out_rows)` over groups of whole rows (`len` elements each) of
/// `x` and `out` in parallel on the current pool; each row is computed exactly as on one
/// thread. `start` is the group's first element.
pub fn par_rows(x: &[f32], out: &mut [f32], len: usize, f: impl Fn(usize, &[f32], &mut [f32]) + Sync) {
    use rayon::prelude::*;
    if len == 0 || out.len() < MIN_PARALLEL_ELEMS || current() == 1 {
        return f(0, x, out);
    }
    // Enough rows per task that each moves >= 16K elements.
    let chunk = (MIN_PARALLEL_ELEMS / 2).div_ceil(len) * len;
    out.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).enumerate().for_each(|(i, (o, x))| f(i * chunk, x, o));
}

/// Runs `f` over groups of whole rows of `out` in parallel (in-place row kernels).
pub fn par_rows_mut(out: &mut [f32], len: usize, f: impl Fn(&mut [f32]) + Sync) {
    use rayon::prelude::*;
    if len == 0 || out.len() < MIN_PARALLEL_ELEMS || current() == 1 {
        return f(out);
    }
    let chunk = (MIN_PARALLEL_ELEMS / 2).div_ceil(len) * len;
    out.par_chunks_mut(chunk).for_each(&f);
}

/// Runs `f(start, out_chunk)` over chunks of `out` in parallel (elementwise kernels).
pub fn par_chunks<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    if out.len() < MIN_PARALLEL_ELEMS || current() == 1 {
        return f(0, out);
    }
    let chunk = MIN_PARALLEL_ELEMS / 2;
    out.par_chunks_mut(chunk).enumerate().for_each(|(i, o)| f(i * chunk, o));
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with `len` elements of per-thread scratch holding stale values (callers write
/// before they read). The buffer grows to the largest request a worker has seen and is
/// then reused: steady-state runs allocate nothing. The buffer is taken out of the thread's
/// slot while `f` runs, so `f` may run parallel work during which this worker picks up
/// another job that asks for scratch too: that nested call gets a fresh buffer instead
/// of a `RefCell` borrow panic.
pub fn with_scratch<T: crate::buffer::Elem, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let mut words = SCRATCH.with(|cell| std::mem::take(&mut *cell.borrow_mut()));
    let need = (len * std::mem::size_of::<T>()).div_ceil(8);
    if words.len() < need {
        words.resize(need, 0);
    }
    // SAFETY: u64 storage is 8-aligned (enough for every Elem type), holds at least
    // len * size_of::<T>() bytes, and every bit pattern is a valid f32/f64/integer.
    let slice = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<T>(), len) };
    let result = f(slice);
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        // Keep the larger of the returned buffer and one a nested call left behind.
        if slot.len() < words.len() {
            *slot = words;
        }
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_runs_report_one_worker_and_restore() {
        let pool = pool(2).unwrap();
        pool.install(|| {
            assert_eq!(current(), 2);
            let nested = inline(|| (current(), inline(current), current()));
            assert_eq!(nested, (1, 1, 1));
            assert_eq!(current(), 2);
            // A panic inside restores the flag too.
            let caught = std::panic::catch_unwind(|| inline(|| panic!("boom")));
            assert!(caught.is_err());
            assert_eq!(current(), 2);
        });
    }

    /// Runs that keep their pool's workers awake finish when several share one pool from
    /// different threads (each run's worker may be another's keep-awake loop's host), and
    /// their parallel work gives the one-thread results.
    #[test]
    fn runs_sharing_a_pool_with_workers_awake_all_finish() {
        let want: Vec<u64> = (0..4096u64).map(|i| i * i).collect();
        for pool in [pool(2).unwrap(), pool(3).unwrap()] {
            run_concurrently(&pool, &want);
        }
        // Outside a pool (and inline) the work just runs.
        assert_eq!(with_workers_awake(|| 7), 7);
        assert_eq!(inline(|| with_workers_awake(current)), 1);
    }

    fn run_concurrently(pool: &ThreadPool, want: &[u64]) {
        use rayon::prelude::*;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let got: Vec<u64> = pool.install(|| {
                            with_workers_awake(|| {
                                // Two parallel steps, as a program's kernels make, the
                                // second inside a nested keep-awake call.
                                let first: Vec<u64> = (0..4096u64).into_par_iter().map(|i| i * i).collect();
                                with_workers_awake(|| first.par_iter().map(|&v| v).collect())
                            })
                        });
                        assert_eq!(got, want);
                    }
                });
            }
        });
    }
}
