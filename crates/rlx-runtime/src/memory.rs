//! How much host memory a compiled graph may take: what the machine can give now.

/// The smallest of the machine's available memory (`MemAvailable`), the cgroup's room
/// (`memory.max - memory.current`, v2) and the room under the address-space limit
/// (`ulimit -v` less the process's mapped size); `None`
/// where none can be read (not Linux). A compile whose plan exceeds it is refused
/// instead of aborting in the allocator or swapping.
pub fn available_bytes() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let mem_available = read("/proc/meminfo").and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    });
    let cgroup = (|| {
        let max: u64 = read("/sys/fs/cgroup/memory.max")?.trim().parse().ok()?; // "max" is no limit
        let current: u64 = read("/sys/fs/cgroup/memory.current")?.trim().parse().ok()?;
        Some(max.saturating_sub(current))
    })();
    // "Max address space  unlimited  unlimited  bytes", or a number of bytes, less what
    // the process already maps (VmSize, in KiB).
    let address_space = read("/proc/self/limits").and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("Max address space"))?;
        let limit: u64 = line["Max address space".len()..].split_whitespace().next()?.parse().ok()?;
        let status = read("/proc/self/status")?;
        let mapped: u64 = status.lines().find(|l| l.starts_with("VmSize:"))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(limit.saturating_sub(mapped.saturating_mul(1024)))
    });
    [mem_available, cgroup, address_space].into_iter().flatten().min()
}
