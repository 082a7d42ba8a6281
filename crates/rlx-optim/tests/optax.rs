//! Every rule against optax on the same gradients (fixtures from
//! tools/optim/make_optax_fixtures.py, float32 like optax): parameters after each update;
//! state saved mid-run and restored gives the same trajectory.

use rlx_optim::{Optimizer, Rule, Schedule};
use serde_json::Value;

fn flat(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(a) => a.iter().flat_map(flat).collect(),
        x => vec![x.as_f64().unwrap() as f32],
    }
}

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/optax.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn optimizer(spec: &Value, sizes: &[usize]) -> Optimizer {
    let f = |k: &str| spec[k].as_f64().unwrap_or(0.0) as f32;
    let rule = match spec["rule"].as_str().unwrap() {
        "sgd" => Rule::sgd(f("momentum"), spec["nesterov"].as_bool().unwrap()),
        "adam" => Rule::adamw(f("weight_decay")),
        "lion" => Rule::lion(f("weight_decay")),
        other => panic!("{other}"),
    };
    let schedule = match spec.get("schedule") {
        Some(s) => Schedule::WarmupCosine {
            init: s["init"].as_f64().unwrap() as f32,
            peak: s["peak"].as_f64().unwrap() as f32,
            warmup: s["warmup"].as_u64().unwrap(),
            decay_steps: s["decay_steps"].as_u64().unwrap(),
            end: s["end"].as_f64().unwrap() as f32,
        },
        None => Schedule::Constant(f("lr")),
    };
    let mut o = Optimizer::new(rule, schedule, sizes);
    if let Some(c) = spec.get("clip") {
        o = o.with_clip_norm(c.as_f64().unwrap() as f32);
    }
    o
}

#[test]
fn updates_match_optax() {
    let fx = fixture();
    let init: Vec<Vec<f32>> = fx["init"].as_array().unwrap().iter().map(flat).collect();
    let sizes: Vec<usize> = init.iter().map(Vec::len).collect();
    let grads: Vec<Vec<Vec<f32>>> =
        fx["grads"].as_array().unwrap().iter().map(|s| s.as_array().unwrap().iter().map(flat).collect()).collect();
    for (name, cfg) in fx["configs"].as_object().unwrap() {
        let mut opt = optimizer(&cfg["spec"], &sizes);
        let mut params = init.clone();
        for (t, (g, want)) in grads.iter().zip(cfg["params"].as_array().unwrap()).enumerate() {
            let mut g = g.clone();
            opt.step(&mut params, &mut g).unwrap();
            // Mid-run, save and restore: the trajectory must not change.
            if t == 2 {
                opt = Optimizer::from_json(&opt.to_json().unwrap()).unwrap();
            }
            let want: Vec<f32> = want.as_array().unwrap().iter().flat_map(flat).collect();
            let got: Vec<f32> = params.iter().flatten().copied().collect();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                // f32 arithmetic in both; a few ulps of the parameter (powi vs pow in the
                // bias corrections, f64 vs f32 norm accumulation).
                assert!((a - b).abs() <= 4e-7 * b.abs().max(1.0), "{name} step {t} param[{i}]: {a} vs optax {b}");
            }
        }
    }
}

#[test]
fn warmup_cosine_schedule() {
    let s = Schedule::WarmupCosine { init: 0.0, peak: 1.0, warmup: 4, decay_steps: 14, end: 0.1 };
    assert_eq!(s.rate(0), 0.0);
    assert_eq!(s.rate(2), 0.5);
    assert_eq!(s.rate(4), 1.0);
    assert!((s.rate(9) - 0.55).abs() < 1e-6);
    assert!((s.rate(14) - 0.1).abs() < 1e-7);
    assert!((s.rate(1000) - 0.1).abs() < 1e-7);
}

#[test]
fn mismatched_sizes_are_errors() {
    let mut o = Optimizer::new(Rule::adam(), Schedule::Constant(0.1), &[3]);
    let e = o.step(&mut [vec![0.0; 2]], &mut [vec![0.0; 2]]).unwrap_err();
    assert!(e.message().contains("optimizer step"), "{e}");
}
