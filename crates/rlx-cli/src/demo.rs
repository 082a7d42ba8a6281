//! `rlx demo`: a 4 -> 16 -> 3 MLP (GELU, softmax) with embedded weights, run through the
//! full pipeline and checked against a plain f64 forward pass written here; then a short
//! training run (the digits MLP, 3 epochs: gradients by rlx-autodiff, AdamW).

use rlx::prelude::*;

const IN: usize = 4;
const HIDDEN: usize = 16;
const OUT: usize = 3;
const BATCH: usize = 5;

/// Deterministic, embedded weights: a fixed smooth pattern, no RNG.
fn weights(rows: usize, cols: usize, salt: f32) -> Vec<f32> {
    (0..rows * cols).map(|i| (i as f32 * 0.7 + salt).sin() * 0.6).collect()
}

pub fn demo() -> Result<()> {
    let (w1, b1) = (weights(IN, HIDDEN, 0.3), weights(1, HIDDEN, 1.1));
    let (w2, b2) = (weights(HIDDEN, OUT, 2.0), weights(1, OUT, 0.5));
    let x: Vec<f32> = (0..BATCH * IN).map(|i| (i as f32 * 0.37).cos()).collect();

    let mut g = Graph::new("demo_mlp");
    let xi = g.input("x", DType::F32, &[BATCH, IN])?;
    let w1n = g.param("w1", DType::F32, &[IN, HIDDEN])?;
    let b1n = g.param("b1", DType::F32, &[HIDDEN])?;
    let w2n = g.param("w2", DType::F32, &[HIDDEN, OUT])?;
    let b2n = g.param("b2", DType::F32, &[OUT])?;
    let h = g.matmul(xi, w1n)?;
    let h = g.add(h, b1n)?;
    let h = g.unary(Unary::Gelu, h)?;
    let logits = g.matmul(h, w2n)?;
    let logits = g.add(logits, b2n)?;
    let probs = g.softmax(logits, 1)?;
    let class = g.argmax(probs, 1, false)?;
    g.set_outputs(&[probs, class])?;

    let device = fastest_device();
    let mut compiled = Session::new(device)?.compile(&g)?;
    for (name, v) in [("w1", &w1), ("b1", &b1), ("w2", &w2), ("b2", &b2)] {
        compiled.set_param(name, v)?;
    }
    let out = compiled.run(&[("x", &x)])?;
    let (probs, classes) = (&out[0], &out[1]);

    let reference = forward_f64(&x, &w1, &b1, &w2, &b2);
    let max_err = probs.iter().zip(&reference).map(|(&p, &r)| (p as f64 - r).abs()).fold(0.0, f64::max);

    println!("RLX demo: a {IN} -> {HIDDEN} -> {OUT} MLP (GELU, softmax) on {device}, batch {BATCH}");
    println!("graph: {} nodes; compiled once, run once", g.len());
    println!();
    println!("{:>3}  {:>8} {:>8} {:>8}  class", "row", "p0", "p1", "p2");
    for r in 0..BATCH {
        let p = &probs[r * OUT..(r + 1) * OUT];
        println!("{r:>3}  {:>8.5} {:>8.5} {:>8.5}  {}", p[0], p[1], p[2], classes[r]);
    }
    println!();
    println!("max |rlx - f64 reference| = {max_err:.2e}");
    // An f32 pipeline over depth-16 dot products sits well under 1e-6 here.
    if max_err > 1e-5 {
        return Err(Error::internal(format!("demo disagrees with its f64 reference by {max_err:e}")));
    }
    train_briefly()
}

/// Three epochs of the digits MLP: the loss falls and held-out accuracy climbs.
fn train_briefly() -> Result<()> {
    use rlx::train::{RunConfig, mlp, train_digits};
    println!();
    println!("training: digits MLP 64 -> 512 -> 10 (8x8 images), 3 epochs, AdamW");
    let cfg = RunConfig { epochs: 3, ..RunConfig::mlp() };
    let (_, epochs) = train_digits(
        mlp(512),
        &cfg,
        &CompileOptions::default(),
        |_, _, _| {},
        |e| {
            println!(
                "  epoch {}  train loss {:.4}  held-out accuracy {:.2}%  ({:.2} s)",
                e.epoch + 1,
                e.train_loss(),
                100.0 * e.held_out_accuracy,
                e.seconds
            )
        },
    )?;
    let (first, last) = (&epochs[0], &epochs[epochs.len() - 1]);
    if last.train_loss() >= first.step_losses[0] {
        return Err(Error::internal("demo training did not reduce the loss"));
    }
    println!("(`rlx train mlp` runs the full 30 epochs and plots the loss curve)");
    Ok(())
}

/// The same network in plain f64 loops, independent of RLX's kernels.
fn forward_f64(x: &[f32], w1: &[f32], b1: &[f32], w2: &[f32], b2: &[f32]) -> Vec<f64> {
    let mut probs = Vec::with_capacity(BATCH * OUT);
    for r in 0..BATCH {
        let h: Vec<f64> = (0..HIDDEN)
            .map(|j| {
                let z = b1[j] as f64 + (0..IN).map(|i| x[r * IN + i] as f64 * w1[i * HIDDEN + j] as f64).sum::<f64>();
                0.5 * z * (1.0 + erf_series(z / std::f64::consts::SQRT_2))
            })
            .collect();
        let logits: Vec<f64> =
            (0..OUT).map(|k| b2[k] as f64 + (0..HIDDEN).map(|j| h[j] * w2[j * OUT + k] as f64).sum::<f64>()).collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        probs.extend(logits.iter().map(|l| (l - m).exp() / s));
    }
    probs
}

/// erf by its Taylor series (|x| < 3 here) / asymptotic complement: accurate to ~1e-15.
fn erf_series(x: f64) -> f64 {
    if x.abs() > 5.0 {
        return x.signum();
    }
    // Series: erf x = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)).
    let mut term = x;
    let mut sum = x;
    for n in 1..200 {
        term *= -x * x / n as f64;
        let add = term / (2 * n + 1) as f64;
        sum += add;
        if add.abs() < 1e-17 * sum.abs() {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}
