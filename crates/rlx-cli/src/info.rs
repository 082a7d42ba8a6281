//! `rlx info`.

use rlx::prelude::*;

pub fn info() -> Result<()> {
    println!("rlx {} ({}-{})", env!("CARGO_PKG_VERSION"), std::env::consts::ARCH, std::env::consts::OS);
    println!();
    let features = rlx::runtime::cpu::features();
    let found: Vec<&str> = features.list().into_iter().filter(|(_, on)| *on).map(|(name, _)| name).collect();
    let missing: Vec<&str> = features.list().into_iter().filter(|(_, on)| !*on).map(|(name, _)| name).collect();
    println!(
        "cpu features found:   {}",
        if found.is_empty() { "(baseline only)".to_string() } else { found.join(" ") }
    );
    println!("cpu features missing: {}", if missing.is_empty() { "(none)".to_string() } else { missing.join(" ") });
    if let Ok(limit) = std::env::var("RLX_ISA") {
        println!("(capped by RLX_ISA={limit})");
    }
    println!();
    println!("kernel arms:");
    for (family, arm) in rlx::runtime::cpu::kernel_arms() {
        println!("  {family:<48} {arm}");
    }
    println!();
    for device in Device::ALL {
        match rlx::runtime::availability(device) {
            Ok(()) => println!("device {device}: available"),
            Err(why) => println!("device {device}: not available ({why})"),
        }
    }
    if let Ok(adapter) = rlx::runtime::gpu::describe() {
        println!("gpu adapter: {adapter}");
    }
    println!("fastest device: {}", fastest_device());
    Ok(())
}
