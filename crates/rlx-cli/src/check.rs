//! `rlx check`: verify a graph and price it on a backend before anything runs.
//! The `--json` schema is documented in docs/check-schema.md.

use rlx::compile::{Target, check_plan, compile};
use rlx::prelude::*;
use serde_json::json;
use std::path::Path;

/// `shapes` (`NAME=1x128`) bind an ONNX model's symbolic input dims.
pub fn check(path: &Path, backend: &str, as_json: bool, shapes: &[String]) -> Result<()> {
    let target = Target::by_name(backend)
        .ok_or_else(|| Error::input(format!("unknown backend '{backend}' (available: cpu, gpu)")))?;
    // Errors (shape, dtype, structure, plan safety) end the command with a non-zero code;
    // with --json they are also reported in the document.
    let options = CompileOptions::from_env()?;
    let load = || {
        if crate::onnx::is_onnx(path) {
            crate::onnx::graph_for(path, shapes)
        } else if let Some(s) = shapes.first() {
            Err(Error::input(format!("--shape {s}: only ONNX models have symbolic dims")))
        } else {
            crate::load_graph(path)
        }
    };
    let verified = load().and_then(|g| {
        let compiled = compile(&g, &target, &options)?;
        check_plan(&compiled.schedule, &compiled.plan)?;
        Ok((g, compiled))
    });
    let (g, compiled) = match verified {
        Ok(v) => v,
        Err(e) => {
            if as_json {
                let doc = json!({"schema": "rlx-check", "version": 1, "backend": target.name, "ok": false, "errors": [e.to_string()]});
                println!("{doc}");
            }
            return Err(e);
        }
    };
    let b = compiled.budget();
    // Which steps run on the host is the device's answer (its kernels and features).
    let fallbacks = match target.name {
        "gpu" => Some(rlx::runtime::gpu::host_fallbacks(&g, &options).map_err(|e| e.to_string())),
        _ => None,
    };
    let missed: Vec<&String> =
        compiled.log.notes.iter().filter(|l| l.contains("declined") || l.contains("stopped at")).collect();
    let fused: Vec<&String> =
        compiled.log.notes.iter().filter(|l| l.contains(": fused") || l.contains(": folded")).collect();
    let casts = compiled
        .schedule
        .steps
        .iter()
        .filter(|s| matches!(s.kernel, rlx::compile::Kernel::Op(Op::Cast { .. })))
        .count();
    if as_json {
        let doc = json!({
            "schema": "rlx-check",
            "version": 1,
            "graph": g.name(),
            "backend": target.name,
            "ok": true,
            "errors": [],
            "nodes": g.len(),
            "steps": compiled.schedule.steps.len(),
            "fusions": fused,
            "missed_fusions": missed,
            "hazards": compiled.log.hazards,
            "budget": {
                "arena_bytes": b.arena_bytes,
                "reuse_saved_bytes": b.reuse_saved_bytes,
                "width_policy": target.width_policy.name(),
                "width_overhead_bytes": b.width_overhead_bytes,
                "casts": casts,
                "precision": format!("{:?}", options.precision),
                "inserted_casts": compiled.log.inserted_casts,
                "boundary_bytes_per_run": b.boundary_bytes_per_run,
                "param_bytes": b.param_bytes,
                "dispatches": b.dispatches,
                "bytes_moved": b.bytes_moved,
            },
            "host_fallbacks": match &fallbacks {
                Some(Ok(list)) => json!(list),
                Some(Err(why)) => json!({"unknown": why}),
                None => json!([]),
            },
        });
        println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| Error::internal(e.to_string()))?);
        return Ok(());
    }
    println!("rlx check {} --backend {}: ok", path.display(), target.name);
    println!("  verified: shapes, dtypes, structure, memory plan (no two live buffers overlap)");
    println!("  {} nodes -> {} steps ({} kernel dispatches)", g.len(), compiled.schedule.steps.len(), b.dispatches);
    println!();
    println!("fusions ({}):", fused.len());
    for f in &fused {
        println!("  {f}");
    }
    println!("missed fusions ({}):", missed.len());
    for m in &missed {
        println!("  note: {m}");
    }
    println!("numerics hazards ({}):", compiled.log.hazards.len());
    for h in &compiled.log.hazards {
        println!("  note: {h}");
    }
    println!();
    println!("budget on {} (notes, not errors):", target.name);
    let kib = |bytes: usize| format!("{bytes} B ({:.1} KiB)", bytes as f64 / 1024.0);
    println!("  arena                 {}", kib(b.arena_bytes));
    println!("  saved by reuse        {}", kib(b.reuse_saved_bytes));
    println!(
        "  width policy          {} (+{} widening, {casts} casts)",
        target.width_policy.name(),
        kib(b.width_overhead_bytes)
    );
    println!(
        "  precision             {:?} ({} casts inserted, RLX_PRECISION)",
        options.precision, compiled.log.inserted_casts
    );
    println!("  host boundary / run   {}", kib(b.boundary_bytes_per_run));
    println!("  params resident       {}", kib(b.param_bytes));
    println!("  kernel dispatches     {}", b.dispatches);
    println!("  bytes moved / run     {}", kib(b.bytes_moved));
    match &fallbacks {
        Some(Ok(list)) => {
            println!("host fallbacks ({}): steps with no GPU kernel, run on the CPU", list.len());
            for f in list {
                println!("  {f}");
            }
        }
        Some(Err(why)) => println!("host fallbacks: unknown, the GPU is not usable here ({why})"),
        None => {}
    }
    Ok(())
}
