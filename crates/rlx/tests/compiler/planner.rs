//! Planner property test: random DAGs; the plan never overlaps live buffers (the compiler's
//! `check_plan` runs on every compile) and results equal the no-reuse plan bit for bit.

use crate::run;
use rlx::compile::{Target, compile};
use rlx::prelude::*;
use rlx_corpus::Case;
use rlx_oracle::Rng;

/// A random DAG over [4, 6] f32 values: elementwise ops, views (reshape, contiguous
/// narrow + concat), matmul, softmax, a broadcast reduction, a bf16 round trip.
fn random_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new(&format!("random_{seed}"));
    let mut pool = vec![
        g.input("a", DType::F32, &[4, 6]).unwrap(),
        g.input("b", DType::F32, &[4, 6]).unwrap(),
        g.input("c", DType::F32, &[4, 6]).unwrap(),
    ];
    let w = g.param("w", DType::F32, &[6, 6]).unwrap();
    let steps = 6 + (rng.next_u64() % 30) as usize;
    for _ in 0..steps {
        let pick = |rng: &mut Rng, pool: &[NodeId]| pool[(rng.next_u64() % pool.len() as u64) as usize];
        let x = pick(&mut rng, &pool);
        let y = pick(&mut rng, &pool);
        let node = match rng.next_u64() % 9 {
            0 => g.add(x, y),
            1 => g.mul(x, y),
            2 => g.unary([Unary::Tanh, Unary::Sigmoid, Unary::Relu, Unary::Silu][(rng.next_u64() % 4) as usize], x),
            3 => g.reshape(x, &[24]).and_then(|r| g.reshape(r, &[4, 6])),
            4 => {
                let top = g.narrow(x, 0, 0, 1).unwrap();
                let rest = g.narrow(y, 0, 1, 3).unwrap();
                g.concat(&[top, rest], 0)
            }
            5 => g.matmul(x, w),
            6 => g.softmax(x, 1),
            7 => g.reduce(ReduceOp::Sum, x, &[1], true).and_then(|s| g.sub(y, s)),
            _ => g.cast(x, DType::BF16).and_then(|h| g.cast(h, DType::F32)),
        }
        .unwrap();
        pool.push(node);
    }
    let mut outputs = vec![*pool.last().unwrap()];
    for _ in 0..(rng.next_u64() % 3) {
        outputs.push(pool[3 + (rng.next_u64() % (pool.len() as u64 - 3)) as usize]);
    }
    g.set_outputs(&outputs).unwrap();
    Case::new("random", g, 8, seed, -1.0, 1.0, 1).unwrap()
}

#[test]
fn random_dags_plan_safely_and_match_the_no_reuse_plan() {
    for seed in 0..60 {
        let case = random_case(seed);
        for fusion in [false, true] {
            let base = CompileOptions::default().with_fusion(fusion);
            // compile() runs check_plan: a plan with two live buffers overlapping is an Err.
            let planned = compile(&case.graph, &Target::CPU, &base.clone().with_memory_reuse(true)).unwrap();
            let unshared = compile(&case.graph, &Target::CPU, &base.clone().with_memory_reuse(false)).unwrap();
            assert!(planned.plan.arena_bytes <= unshared.plan.arena_bytes);
            let with = run(&case, &base.clone().with_memory_reuse(true));
            let without = run(&case, &base.clone().with_memory_reuse(false));
            for (a, b) in with.iter().zip(&without) {
                assert_eq!(a.bytes(), b.bytes(), "seed {seed} fusion {fusion}: reuse changed a result");
            }
        }
    }
}

#[test]
fn the_plan_checker_rejects_an_overlap() {
    let case = random_case(7);
    let mut c = compile(&case.graph, &Target::CPU, &CompileOptions::default()).unwrap();
    // Move every intermediate onto offset 0: live ones now collide.
    for (v, slot) in c.plan.slots.iter_mut().enumerate() {
        if let Some(s) = slot
            && matches!(c.schedule.values[v].kind, rlx::compile::ValueKind::Intermediate)
        {
            s.offset = 0;
        }
    }
    let e = rlx::compile::check_plan(&c.schedule, &c.plan).unwrap_err();
    assert!(e.message().contains("overlap"), "{e}");
}
