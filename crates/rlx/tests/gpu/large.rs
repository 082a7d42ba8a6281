//! Reductions and row ops over large extents on the GPU, against f64 oracles computed
//! here: 1-D, row ([rows, n] over axis 1), column ([n, cols] over axis 0) and
//! non-contiguous multi-axis reductions at 1e5, 1e6 and 2e7 elements, softmax /
//! log-softmax / layer and RMS norm / cross-entropy / argmax over 30,000- and
//! 100,000-wide rows, many short rows, and odd sizes. Mesa's lavapipe ends every loop of
//! a shader invocation after 65535 iterations in total, so a serial kernel summed only
//! the first 21,845 elements (the sum of 2e7 ones was 21845) and filled only 5,533 of a
//! 30,000-wide softmax row; each test here failed that way before the kernels were split
//! over workgroups and passes.
//!
//! Tolerances. A float sum in any fixed order whose addition tree has depth D is within
//! D * u * sum|x| of the exact sum (first order in u = 2^-24; Higham, Accuracy and
//! Stability, eq. 4.4). The GPU's blocked tree has depth 40 per 8192-fold pass (32
//! serial additions per thread, then 8 tree levels: 80 at 2e7); the CPU's blocked
//! pairwise order is about log2 n deep. `depth(n) = 3 ceil(log2 n) + 64` bounds both
//! (115 at 1e5, 139 at 2e7). Max, min and argmax are exact; integer reductions wrap and
//! are exact.

use crate::gpu_or_skip;
use rlx::prelude::*;

const U: f64 = f32::EPSILON as f64 / 2.0;

fn depth(n: usize) -> f64 {
    3.0 * (n.max(2) as f64).log2().ceil() + 64.0
}

/// Runs `g` on the GPU (no step may fall back to the host) with f32 / i32 inputs.
fn run_gpu(g: &Graph, inputs: &[(&str, HostTensor)]) -> Vec<HostTensor> {
    let options = CompileOptions::default();
    let fallbacks = rlx::runtime::gpu::host_fallbacks(g, &options).unwrap();
    assert!(fallbacks.is_empty(), "{}: steps without a GPU kernel: {fallbacks:?}", g.name());
    let mut c = Session::new(Device::Gpu).unwrap().compile_with(g, &options).unwrap();
    let feed: Vec<(&str, &HostTensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    c.run_typed(&feed).unwrap_or_else(|e| panic!("{}: {e}", g.name()))
}

fn random(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f32> {
    let mut rng = rlx_oracle::Rng::new(seed);
    (0..n).map(|_| rng.uniform(lo, hi) as f32).collect()
}

/// f32 max / min as the reference defines them: NaN propagates.
fn fold_nan(v: impl Iterator<Item = f32>, max: bool) -> f32 {
    v.fold(if max { f32::NEG_INFINITY } else { f32::INFINITY }, |a, b| {
        if a.is_nan() || b.is_nan() {
            f32::NAN
        } else if max {
            a.max(b)
        } else {
            a.min(b)
        }
    })
}

fn same_f32(a: f32, b: f32) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// Sum, mean, max and min of `x` (shape `dims`) over `axes` on the GPU against the f64 /
/// exact oracles, reducing element groups given by `groups(out)` -> the flat indices.
fn check_reductions(name: &str, x: &[f32], dims: &[usize], axes: &[usize]) {
    let mut g = Graph::new(name);
    let xi = g.input("x", DType::F32, dims).unwrap();
    let outs: Vec<NodeId> = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min]
        .iter()
        .map(|&op| g.reduce(op, xi, axes, false).unwrap())
        .collect();
    g.set_outputs(&outs).unwrap();
    let got = run_gpu(&g, &[("x", HostTensor::from_f32(dims, x).unwrap())]);
    let got: Vec<Vec<f32>> = got.iter().map(HostTensor::to_f32_vec).collect();
    // Each output's elements by flat index: kept coordinates in order, reduced ones vary.
    let strides = {
        let mut s = vec![1usize; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * dims[d + 1];
        }
        s
    };
    let kept: Vec<usize> = (0..dims.len()).filter(|d| !axes.contains(d)).collect();
    let n_out: usize = kept.iter().map(|&d| dims[d]).product();
    let n_red = x.len() / n_out.max(1);
    let mut members: Vec<Vec<usize>> = vec![Vec::with_capacity(n_red); n_out];
    for (flat, m) in (0..x.len()).map(|f| {
        let mut o = 0;
        for &d in &kept {
            o = o * dims[d] + (f / strides[d]) % dims[d];
        }
        (f, o)
    }) {
        members[m].push(flat);
    }
    let d = depth(n_red);
    for (o, idx) in members.iter().enumerate() {
        let exact: f64 = idx.iter().map(|&i| x[i] as f64).sum();
        let abs: f64 = idx.iter().map(|&i| (x[i] as f64).abs()).sum();
        let tol = d * U * abs;
        let (sum, mean) = (got[0][o] as f64, got[1][o] as f64);
        let nan = exact.is_nan() && sum.is_nan() && mean.is_nan();
        assert!(nan || (sum - exact).abs() <= tol, "{name} out {o}: sum {sum} vs exact {exact} (tolerance {tol:e})");
        let m = exact / n_red as f64;
        let mtol = tol / n_red as f64 + 2.0 * U * m.abs();
        assert!(nan || (mean - m).abs() <= mtol, "{name} out {o}: mean {mean} vs exact {m} (tolerance {mtol:e})");
        let (mx, mn) = (fold_nan(idx.iter().map(|&i| x[i]), true), fold_nan(idx.iter().map(|&i| x[i]), false));
        assert!(same_f32(got[2][o], mx), "{name} out {o}: max {} vs {mx}", got[2][o]);
        assert!(same_f32(got[3][o], mn), "{name} out {o}: min {} vs {mn}", got[3][o]);
    }
}

#[test]
fn reductions_at_every_size_and_layout() {
    if !gpu_or_skip("reductions_at_every_size_and_layout") {
        return;
    }
    for n in [1, 3, 17, 1000, 65_537, 100_000, 1_000_000, 20_000_000] {
        let x = random(n, n as u64, -1.0, 2.0);
        check_reductions(&format!("1-D {n}"), &x, &[n], &[0]);
        if n >= 1000 {
            let (rows, cols) = (4, 3);
            check_reductions(&format!("rows [{rows}, {}]", n / rows), &x[..n / rows * rows], &[rows, n / rows], &[1]);
            check_reductions(&format!("cols [{}, {cols}]", n / cols), &x[..n / cols * cols], &[n / cols, cols], &[0]);
        }
    }
}

#[test]
fn multi_axis_and_short_reductions() {
    if !gpu_or_skip("multi_axis_and_short_reductions") {
        return;
    }
    // Non-contiguous reduced axes: one pass (1500 per output) and two (20000 per output).
    for dims in [[30, 7, 50, 11], [200, 3, 100, 5]] {
        let x = random(dims.iter().product(), 7, -1.0, 2.0);
        check_reductions(&format!("{dims:?} over 0, 2"), &x, &dims, &[0, 2]);
        check_reductions(&format!("{dims:?} over 1, 3"), &x, &dims, &[1, 3]);
    }
    // Many outputs of a few elements each (one thread per output).
    let x = random(300_000, 8, -1.0, 2.0);
    check_reductions("[100000, 3] over 1", &x, &[100_000, 3], &[1]);
    // NaN propagates through the tree and the passes.
    let mut x = random(1_000_000, 9, -1.0, 2.0);
    x[999_990] = f32::NAN;
    check_reductions("1-D with a NaN", &x, &[1_000_000], &[0]);
}

#[test]
fn sum_of_twenty_million_ones_is_exact() {
    if !gpu_or_skip("sum_of_twenty_million_ones_is_exact") {
        return;
    }
    let n = 20_000_000;
    let mut g = Graph::new("ones");
    let x = g.input("x", DType::F32, &[n]).unwrap();
    let s = g.reduce(ReduceOp::Sum, x, &[0], false).unwrap();
    let m = g.reduce(ReduceOp::Mean, x, &[0], false).unwrap();
    g.set_outputs(&[s, m]).unwrap();
    let got = run_gpu(&g, &[("x", HostTensor::from_f32(&[n], &vec![1.0; n]).unwrap())]);
    // Every partial of the blocked tree is an integer below 2^24, and 2e7 is even: exact.
    assert_eq!(got[0].to_f32_vec(), vec![2e7]);
    assert_eq!(got[1].to_f32_vec(), vec![1.0]);
}

#[test]
fn integer_reductions_wrap_exactly() {
    if !gpu_or_skip("integer_reductions_wrap_exactly") {
        return;
    }
    let n = 100_003;
    let mut rng = rlx_oracle::Rng::new(5);
    let x: Vec<i32> = (0..n).map(|_| rng.int(-2_000_000_000, 2_000_000_000) as i32).collect();
    let p: Vec<i32> = (0..n).map(|_| [1, -1, 3][rng.int(0, 2) as usize]).collect();
    let mut g = Graph::new("ints");
    let xi = g.input("x", DType::I32, &[n]).unwrap();
    let pi = g.input("p", DType::I32, &[n]).unwrap();
    let outs = [
        g.reduce(ReduceOp::Sum, xi, &[0], false).unwrap(),
        g.reduce(ReduceOp::Max, xi, &[0], false).unwrap(),
        g.reduce(ReduceOp::Min, xi, &[0], false).unwrap(),
        g.reduce(ReduceOp::Prod, pi, &[0], false).unwrap(),
    ];
    g.set_outputs(&outs).unwrap();
    let t = |v: &[i32]| HostTensor::from_f64_as(DType::I32, &[n], &v.iter().map(|&a| a as f64).collect::<Vec<_>>());
    let got = run_gpu(&g, &[("x", t(&x).unwrap()), ("p", t(&p).unwrap())]);
    let got: Vec<i64> = got.iter().map(|t| t.to_i64_vec()[0]).collect();
    let want = [
        x.iter().fold(0i32, |a, &b| a.wrapping_add(b)),
        *x.iter().max().unwrap(),
        *x.iter().min().unwrap(),
        p.iter().fold(1i32, |a, &b| a.wrapping_mul(b)),
    ];
    assert_eq!(got, want.map(i64::from).to_vec());
}

/// Element `j` of row `r` of `[outer, len, inner]` viewed around the axis.
fn row([_, len, inner]: [usize; 3], r: usize) -> Vec<usize> {
    let base = (r / inner) * len * inner + r % inner;
    (0..len).map(|j| base + j * inner).collect()
}

/// Softmax, log-softmax and argmax along `axis` of `dims`, against f64 oracles.
fn check_softmax(x: &[f32], dims: &[usize], axis: usize) {
    let mut g = Graph::new("softmax");
    let xi = g.input("x", DType::F32, dims).unwrap();
    let s = g.softmax(xi, axis).unwrap();
    let l = g.log_softmax(xi, axis).unwrap();
    let a = g.argmax(xi, axis, false).unwrap();
    g.set_outputs(&[s, l, a]).unwrap();
    let got = run_gpu(&g, &[("x", HostTensor::from_f32(dims, x).unwrap())]);
    let (sm, ls, am) = (got[0].to_f32_vec(), got[1].to_f32_vec(), got[2].to_i64_vec());
    let shape = [dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product()];
    // exp and log are within a few ulp; the sum of exponentials (each at most 1) within
    // depth * u * len of exact, relatively at most depth * u.
    let tol = (depth(shape[1]) + 8.0) * U;
    assert_eq!(am.len(), shape[0] * shape[2]);
    for (r, &arg) in am.iter().enumerate() {
        let idx = row(shape, r);
        let mx = idx.iter().map(|&i| x[i] as f64).fold(f64::NEG_INFINITY, f64::max);
        let lse = mx + idx.iter().map(|&i| (x[i] as f64 - mx).exp()).sum::<f64>().ln();
        for &i in &idx {
            let want = x[i] as f64 - lse;
            let (s, l) = (sm[i] as f64, ls[i] as f64);
            assert!((l - want).abs() <= tol * (1.0 + want.abs()), "{dims:?} row {r} at {i}: log_softmax {l} vs {want}");
            assert!(
                (s - want.exp()).abs() <= tol * want.exp(),
                "{dims:?} row {r} at {i}: softmax {s} vs {}",
                want.exp()
            );
        }
        let first = (0..idx.len()).find(|&j| x[idx[j]] as f64 == mx).unwrap() as i64;
        assert_eq!(arg, first, "{dims:?} row {r}: argmax");
    }
}

#[test]
fn softmax_and_argmax_over_wide_and_many_rows() {
    if !gpu_or_skip("softmax_and_argmax_over_wide_and_many_rows") {
        return;
    }
    for (dims, axis) in [
        (vec![3, 30_000], 1),
        (vec![2, 100_000], 1),
        (vec![30_000, 3], 0),
        (vec![100_000, 3], 1),
        (vec![2, 1], 1),
        (vec![2, 3], 1),
        (vec![2, 17], 1),
        (vec![2, 1000], 1),
        (vec![2, 65_537], 1),
    ] {
        let n: usize = dims.iter().product();
        let mut x = random(n, n as u64 + 1, -4.0, 4.0);
        // A repeated maximum: argmax is the first.
        if dims[1] > 10 {
            x[5] = 9.0;
            x[dims[1] - 3] = 9.0;
        }
        check_softmax(&x, &dims, axis);
    }
}

#[test]
fn argmax_takes_the_first_nan_of_a_wide_row() {
    if !gpu_or_skip("argmax_takes_the_first_nan_of_a_wide_row") {
        return;
    }
    let n = 70_000;
    let mut x = random(2 * n, 3, -1.0, 1.0);
    (x[66_001], x[7_777], x[n + 65_600]) = (f32::NAN, 5.0, f32::NAN);
    x[n + 69_999] = f32::NAN;
    let mut g = Graph::new("argmax_nan");
    let xi = g.input("x", DType::F32, &[2, n]).unwrap();
    let a = g.argmax(xi, 1, false).unwrap();
    g.set_outputs(&[a]).unwrap();
    let got = run_gpu(&g, &[("x", HostTensor::from_f32(&[2, n], &x).unwrap())]);
    assert_eq!(got[0].to_i64_vec(), vec![66_001, 65_600]);
}

#[test]
fn norms_over_wide_and_many_rows() {
    if !gpu_or_skip("norms_over_wide_and_many_rows") {
        return;
    }
    for (rows, h) in [(3, 30_000), (2, 100_000), (100_000, 3), (2, 1), (2, 17), (2, 1000), (2, 65_537)] {
        let x = random(rows * h, h as u64, -1.0, 2.0);
        let gamma = random(h, 11, 0.5, 1.5);
        let beta = random(h, 12, -0.5, 0.5);
        let eps = 1e-5f32;
        let mut g = Graph::new("norms");
        let xi = g.input("x", DType::F32, &[rows, h]).unwrap();
        let gi = g.input("gamma", DType::F32, &[h]).unwrap();
        let bi = g.input("beta", DType::F32, &[h]).unwrap();
        let ln = g.layer_norm(xi, Some(gi), Some(bi), eps).unwrap();
        let rms = g.rms_norm(xi, Some(gi), eps).unwrap();
        g.set_outputs(&[ln, rms]).unwrap();
        let got = run_gpu(
            &g,
            &[
                ("x", HostTensor::from_f32(&[rows, h], &x).unwrap()),
                ("gamma", HostTensor::from_f32(&[h], &gamma).unwrap()),
                ("beta", HostTensor::from_f32(&[h], &beta).unwrap()),
            ],
        );
        let (lg, rg) = (got[0].to_f32_vec(), got[1].to_f32_vec());
        // The mean and the mean square are sums of magnitude at most 2 h (x in [-1, 2)):
        // relatively within depth * u; normalized values are O(1) (|x - mean| / sd <= 3
        // for this spread), the output scaled by gamma <= 1.5 plus beta.
        let tol = 8.0 * (depth(h) + 8.0) * U;
        for r in 0..rows {
            let xs: Vec<f64> = x[r * h..(r + 1) * h].iter().map(|&v| v as f64).collect();
            let mean = xs.iter().sum::<f64>() / h as f64;
            let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / h as f64;
            let ms = xs.iter().map(|v| v * v).sum::<f64>() / h as f64;
            let (inv, rinv) = (1.0 / (var + eps as f64).sqrt(), 1.0 / (ms + eps as f64).sqrt());
            for j in 0..h {
                let want = (xs[j] - mean) * inv * gamma[j] as f64 + beta[j] as f64;
                let got = lg[r * h + j] as f64;
                assert!(
                    (got - want).abs() <= tol * (1.0 + want.abs()),
                    "layer_norm [{rows}, {h}] ({r}, {j}): {got} vs {want}"
                );
                let want = xs[j] * rinv * gamma[j] as f64;
                let got = rg[r * h + j] as f64;
                assert!(
                    (got - want).abs() <= tol * (1.0 + want.abs()),
                    "rms_norm [{rows}, {h}] ({r}, {j}): {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn cross_entropy_over_wide_and_many_rows() {
    if !gpu_or_skip("cross_entropy_over_wide_and_many_rows") {
        return;
    }
    for (n, c) in [(3, 30_000), (2, 100_000), (5, 49_152), (100_000, 3), (1, 1), (3, 17), (2, 1000), (2, 65_537)] {
        let x = random(n * c, c as u64 + 2, -4.0, 4.0);
        let mut rng = rlx_oracle::Rng::new(n as u64);
        let labels: Vec<f64> = (0..n).map(|_| rng.int(0, c as i64 - 1) as f64).collect();
        let mut g = Graph::new("ce");
        let xi = g.input("logits", DType::F32, &[n, c]).unwrap();
        let li = g.input("labels", DType::I32, &[n]).unwrap();
        let loss = g.cross_entropy(xi, li).unwrap();
        g.set_outputs(&[loss]).unwrap();
        let got = run_gpu(
            &g,
            &[
                ("logits", HostTensor::from_f32(&[n, c], &x).unwrap()),
                ("labels", HostTensor::from_f64_as(DType::I32, &[n], &labels).unwrap()),
            ],
        );
        let mut total = 0.0;
        let mut abs = 0.0;
        for (r, &label) in labels.iter().enumerate() {
            let row = &x[r * c..(r + 1) * c];
            let mx = row.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
            let lse = mx + row.iter().map(|&v| (v as f64 - mx).exp()).sum::<f64>().ln();
            let l = lse - row[label as usize] as f64;
            total += l;
            abs += l.abs() + lse.abs();
        }
        let want = total / n as f64;
        // Each row's loss within (depth(c) + 8) u (|lse| + |loss|); their mean a sum of n.
        let tol = (depth(c) + depth(n) + 8.0) * U * abs / n as f64;
        let got = got[0].to_f32_vec()[0] as f64;
        assert!((got - want).abs() <= tol, "cross_entropy [{n}, {c}]: {got} vs {want} (tolerance {tol:e})");
    }
}

/// Kernels whose loops grow with one extent, past what a serial loop may run on
/// lavapipe: a matmul over k = 20,000 and attention over 20,000 keys stay on the GPU; a
/// matmul over k = 200,000 (lavapipe got it wrong from k = 61,000), attention over
/// 40,000 keys of 64 dims (wrong from 32,768) and a scatter-add of 70,000 indices fall
/// back to the host; every result matches the CPU.
#[test]
fn long_inner_loops_match_the_cpu() {
    if !gpu_or_skip("long_inner_loops_match_the_cpu") {
        return;
    }
    let mut cases = Vec::new();
    for k in [20_000usize, 200_000] {
        let mut g = Graph::new("long_k");
        let a = g.input("a", DType::F32, &[1, k]).unwrap();
        let b = g.input("b", DType::F32, &[k, 2]).unwrap();
        let y = g.matmul(a, b).unwrap();
        g.set_outputs(&[y]).unwrap();
        cases.push((rlx_corpus::Case::new(&format!("matmul k={k}"), g, k, 3, -1.0, 1.0, 1).unwrap(), k > 38_400));
    }
    for keys in [20_000, 40_000] {
        let mut g = Graph::new("long_attention");
        let q = g.input("q", DType::F32, &[1, 1, 2, 64]).unwrap();
        let k = g.input("k", DType::F32, &[1, 1, keys, 64]).unwrap();
        let v = g.input("v", DType::F32, &[1, 1, keys, 8]).unwrap();
        let y = g.attention(q, k, v, AttentionMask::None, None).unwrap();
        g.set_outputs(&[y]).unwrap();
        let case = rlx_corpus::Case::new(&format!("attention {keys} keys"), g, keys + 64, 4, -1.0, 1.0, 1).unwrap();
        cases.push((case, keys > 30_000));
    }
    // 1x1 convs: 10,000 channels take 50,001 trips (a channel, a row and a column each,
    // and each inner loop's exit), on the GPU; 20,000 came out wrong on lavapipe while
    // the first bound (channels x taps x 3 = 60,000) kept them there; now on the host.
    for channels in [10_000usize, 20_000] {
        let mut g = Graph::new("wide_conv");
        let x = g.input("x", DType::F32, &[1, channels, 1, 1]).unwrap();
        let w = g.input("w", DType::F32, &[2, channels, 1, 1]).unwrap();
        let y = g.conv2d(x, w, None, Conv2dParams::default()).unwrap();
        g.set_outputs(&[y]).unwrap();
        let case =
            rlx_corpus::Case::new(&format!("conv 1x1 {channels} channels"), g, channels, 7, -1.0, 1.0, 1).unwrap();
        cases.push((case, channels >= 20_000));
    }
    // A row wider than a workgroup's bounded passes reach (about 5.1e6) runs on the host.
    let mut g = Graph::new("widest_softmax");
    let x = g.input("x", DType::F32, &[1, 6_000_000]).unwrap();
    let y = g.softmax(x, 1).unwrap();
    g.set_outputs(&[y]).unwrap();
    cases.push((rlx_corpus::Case::new("softmax 6e6 wide", g, 6_000_000, 6, -1.0, 1.0, 1).unwrap(), true));
    let mut g = Graph::new("long_scatter");
    let ids = g.input("ids", DType::I32, &[70_000]).unwrap();
    let upd = g.input("upd", DType::F32, &[70_000, 2]).unwrap();
    let y = g.scatter_add(ids, upd, 5).unwrap();
    g.set_outputs(&[y]).unwrap();
    let mut case = rlx_corpus::Case::new("scatter_add 70000", g, 70_000, 5, -1.0, 1.0, 1).unwrap();
    let ids: Vec<f64> = (0..70_000).map(|i| (i * 7 % 5) as f64).collect();
    case.inputs[0].1 = HostTensor::from_f64_as(DType::I32, &[70_000], &ids).unwrap();
    cases.push((case, true));
    let options = CompileOptions::default();
    for (case, host) in &cases {
        let fallbacks = rlx::runtime::gpu::host_fallbacks(&case.graph, &options).unwrap();
        assert_eq!(!fallbacks.is_empty(), *host, "{}: host fallbacks {fallbacks:?}", case.name);
        let cpu = crate::run_on(Device::Cpu, case, &options).unwrap();
        let gpu = crate::run_on(Device::Gpu, case, &options).unwrap();
        crate::compare(case, &cpu, &gpu, (U, crate::magnitude(case))).unwrap();
    }
}

/// A label out of range in a wide cross-entropy (a workgroup per row) is the CPU's error.
#[test]
fn wide_cross_entropy_reports_a_bad_label() {
    if !gpu_or_skip("wide_cross_entropy_reports_a_bad_label") {
        return;
    }
    let (n, c) = (3, 30_000);
    let mut g = Graph::new("ce_bad_label");
    let xi = g.input("logits", DType::F32, &[n, c]).unwrap();
    let li = g.input("labels", DType::I32, &[n]).unwrap();
    let loss = g.cross_entropy(xi, li).unwrap();
    g.set_outputs(&[loss]).unwrap();
    let mut c_ = Session::new(Device::Gpu).unwrap().compile(&g).unwrap();
    let logits = HostTensor::from_f32(&[n, c], &random(n * c, 1, -1.0, 1.0)).unwrap();
    let labels = HostTensor::from_f64_as(DType::I32, &[n], &[5.0, 30_000.0, 7.0]).unwrap();
    let e = c_.run_typed(&[("logits", &logits), ("labels", &labels)]).unwrap_err();
    assert!(e.message().contains("index 30000 at position 1 is out of range 0..30000"), "{e}");
}
