//! The worker pools' keep-awake loops: they linger after a run (`threads::LINGER`), then
//! stop, also after a run that panicked; a pool left idle burns no CPU.

use rlx_cpu::threads;
use std::time::{Duration, Instant};

/// CPU seconds this process has used (user + system), from /proc/self/stat.
#[cfg(target_os = "linux")]
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a command name") + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / clock_ticks_per_second()
}

/// `sysconf(_SC_CLK_TCK)`: the unit of /proc's CPU times.
#[cfg(target_os = "linux")]
fn clock_ticks_per_second() -> f64 {
    unsafe extern "C" {
        fn sysconf(name: i32) -> i64;
    }
    const SC_CLK_TCK: i32 = 2;
    // SAFETY: sysconf has no preconditions; it reads a constant of the system.
    (unsafe { sysconf(SC_CLK_TCK) }) as f64
}

/// Runs `f` through the 3-worker pool as a program would: on a worker, the others kept awake.
fn run_on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    threads::pool(3).unwrap().install(|| threads::with_workers_awake(f))
}

#[cfg(target_os = "linux")]
#[test]
fn an_idle_pool_stops_polling_after_its_linger() {
    use rayon::prelude::*;
    // Runs with parallel work, one that panics (its keep-awake loops must still end), and
    // a nested one.
    for _ in 0..50 {
        let sum: u64 = run_on_pool(|| (0..100_000u64).into_par_iter().sum());
        assert_eq!(sum, 100_000 * 99_999 / 2);
    }
    let panicked = std::panic::catch_unwind(|| run_on_pool(|| panic!("a kernel failed")));
    assert!(panicked.is_err());
    assert_eq!(run_on_pool(|| threads::with_workers_awake(|| 7)), 7);
    // Well past the linger, a quiet stretch: polling workers would use ~2 CPU-seconds a
    // second (the two that did not run the last job).
    std::thread::sleep(threads::LINGER * 20);
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    std::thread::sleep(Duration::from_millis(300));
    let used = cpu_seconds() - cpu;
    let elapsed = wall.elapsed().as_secs_f64();
    assert!(used < 0.25 * elapsed, "an idle pool used {used:.3} CPU-seconds in {elapsed:.3} s");
}
