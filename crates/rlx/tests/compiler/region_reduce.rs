//! Region + reduce fusion: an elementwise chain feeding a reduction over trailing axes is
//! folded as it is computed, and every output is bit for bit the unfused pair's (same
//! pairwise order for sums, the same in-order fold for max / min / prod), at every size
//! around the sum's 512-element leaves, with NaN, inf and denormals, on 1 and 2 threads.

use rlx::compile::{Kernel, Target, compile};
use rlx::prelude::*;

/// Values that exercise every fold: ordinary, negative, tiny (denormal results of
/// products and exps), and, with `specials`, inf and NaN at fixed places.
fn values(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 40) as f32 / (1u64 << 24) as f32;
            match i % 97 {
                5 if specials => f32::INFINITY,
                11 if specials => f32::NAN,
                23 => 1e-41, // denormal
                _ => u * 8.0 - 4.0,
            }
        })
        .collect()
}

/// A graph reducing `chain(x, y)` (x of `dims`, y broadcast from `y_dims`).
fn graph(
    dims: &[usize],
    y_dims: &[usize],
    dtype: DType,
    chain: fn(&mut Graph, NodeId, NodeId) -> NodeId,
    op: ReduceOp,
    axes: &[usize],
    keepdims: bool,
) -> Graph {
    let mut g = Graph::new("region_reduce");
    let x = g.input("x", dtype, dims).unwrap();
    let y = g.input("y", dtype, y_dims).unwrap();
    let v = chain(&mut g, x, y);
    let r = g.reduce(op, v, axes, keepdims).unwrap();
    g.set_outputs(&[r]).unwrap();
    g
}

fn run(g: &Graph, fusion: bool, threads: usize, feed: &[(&str, &HostTensor)]) -> HostTensor {
    let options = CompileOptions::default().with_fusion(fusion).with_threads(threads);
    let mut c = Session::new(Device::Cpu).unwrap().compile_with(g, &options).unwrap();
    c.run_typed(feed).unwrap().remove(0)
}

fn fused_kernels(g: &Graph) -> Vec<Kernel> {
    let c = compile(g, &Target::CPU, &CompileOptions::default()).unwrap();
    c.schedule.steps.iter().map(|s| s.kernel.clone()).collect()
}

type Chain = (&'static str, fn(&mut Graph, NodeId, NodeId) -> NodeId);

const CHAINS: &[Chain] = &[
    // One vmath op: the leaf-sum kernel path.
    ("exp(x)", |g, x, _| g.unary(Unary::Exp, x).unwrap()),
    // exp(x - y), y a per-row value: softmax's denominator, a broadcast load.
    ("exp(x - y)", |g, x, y| {
        let d = g.sub(x, y).unwrap();
        g.unary(Unary::Exp, d).unwrap()
    }),
    // A last op that is not a vmath function: the evaluate-then-sum path.
    ("x * x + y", |g, x, y| {
        let sq = g.mul(x, x).unwrap();
        g.add(sq, y).unwrap()
    }),
    // A lone plain op (not a region before this pass).
    ("abs(x)", |g, x, _| g.unary(Unary::Abs, x).unwrap()),
];

#[test]
fn fused_reductions_equal_the_unfused_bits() {
    for &(name, chain) in CHAINS {
        for (rows, len) in
            [(1, 1), (1, 3), (3, 17), (2, 511), (2, 512), (2, 513), (1, 1000), (4, 1025), (1, 70_001), (5, 9000)]
        {
            for (op, specials) in ReduceOp::ALL.into_iter().flat_map(|op| [(op, false), (op, true)]) {
                let x = HostTensor::from_f32(&[rows, len], &values(rows * len, (rows * len) as u64, specials)).unwrap();
                let y = HostTensor::from_f32(&[rows, 1], &values(rows, 7, false)).unwrap();
                let g = graph(&[rows, len], &[rows, 1], DType::F32, chain, op, &[1], false);
                let kernels = fused_kernels(&g);
                let fused_here = kernels.iter().any(|k| matches!(k, Kernel::RegionReduce { .. }));
                assert!(fused_here, "{name} {op:?} [{rows}, {len}]: {kernels:?}");
                let feed = [("x", &x), ("y", &y)];
                let want = run(&g, false, 1, &feed);
                for threads in [1, 2] {
                    let got = run(&g, true, threads, &feed);
                    assert_eq!(
                        got.to_f32_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        want.to_f32_vec().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{name} {op:?} over [{rows}, {len}] (specials {specials}), {threads} threads: {:?} vs {:?}",
                        got.to_f32_vec(),
                        want.to_f32_vec()
                    );
                }
            }
        }
    }
}

#[test]
fn trailing_axis_groups_size_one_axes_and_halves_fuse_exactly() {
    // (x dims, y dims, reduced axes, keepdims, dtype)
    type Case = (&'static [usize], &'static [usize], &'static [usize], bool, DType);
    let cases: &[Case] = &[
        // Two trailing axes, keepdims.
        (&[3, 5, 7], &[3, 1, 1], &[1, 2], true, DType::F32),
        // Size-1 axes between and around: still contiguous runs.
        (&[4, 1, 7, 1], &[4, 1, 1, 1], &[2], false, DType::F32),
        (&[1, 6, 1, 33], &[1, 6, 1, 1], &[2, 3], false, DType::F32),
        // Everything reduced to one value.
        (&[2, 3, 700], &[1, 1, 1], &[0, 1, 2], false, DType::F32),
        // bf16 and f16: every instruction rounds; the sum's result too.
        (&[3, 600], &[3, 1], &[1], false, DType::BF16),
        (&[3, 600], &[3, 1], &[1], false, DType::F16),
    ];
    for &(dims, y_dims, axes, keepdims, dtype) in cases {
        for &(name, chain) in CHAINS {
            for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
                let n: usize = dims.iter().product();
                let x = HostTensor::from_f32_as(dtype, dims, &values(n, 3, false)).unwrap();
                let y = HostTensor::from_f32_as(dtype, y_dims, &values(y_dims.iter().product(), 9, false)).unwrap();
                let g = graph(dims, y_dims, dtype, chain, op, axes, keepdims);
                let kernels = fused_kernels(&g);
                assert!(kernels.iter().any(|k| matches!(k, Kernel::RegionReduce { .. })), "{name} {dims:?} {axes:?}");
                let feed = [("x", &x), ("y", &y)];
                let want = run(&g, false, 1, &feed);
                for threads in [1, 2] {
                    assert_eq!(run(&g, true, threads, &feed), want, "{name} {op:?} {dtype} {dims:?} over {axes:?}");
                }
            }
        }
    }
}

#[test]
fn non_trailing_or_shared_operands_are_not_fused() {
    // Reducing a leading axis folds strided columns: left to the reduce kernel.
    let g = graph(&[6, 5], &[6, 1], DType::F32, CHAINS[0].1, ReduceOp::Sum, &[0], false);
    assert!(!fused_kernels(&g).iter().any(|k| matches!(k, Kernel::RegionReduce { .. })));
    // The operand is also a graph output: it must be written.
    let mut g = Graph::new("shared");
    let x = g.input("x", DType::F32, &[4, 9]).unwrap();
    let e = g.unary(Unary::Exp, x).unwrap();
    let s = g.reduce(ReduceOp::Sum, e, &[1], false).unwrap();
    g.set_outputs(&[s, e]).unwrap();
    assert!(!fused_kernels(&g).iter().any(|k| matches!(k, Kernel::RegionReduce { .. })));
    let t = HostTensor::from_f32(&[4, 9], &values(36, 1, true)).unwrap();
    let c = |fusion| {
        let options = CompileOptions::default().with_fusion(fusion);
        Session::new(Device::Cpu).unwrap().compile_with(&g, &options).unwrap().run_typed(&[("x", &t)]).unwrap()
    };
    assert_eq!(c(true), c(false));
}
