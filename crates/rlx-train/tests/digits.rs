//! The digits MLP and CNN reach their held-out accuracy targets from a fixed seed; the
//! loss curve plots; a character transformer learns its text. Accuracy is asserted,
//! time only reported.

use rlx_ir::HostTensor;
use rlx_optim::{Rule, Schedule};
use rlx_train::models::mean;
use rlx_train::plot::{Series, line_chart};
use rlx_train::*;

fn run(network: Network, cfg: &RunConfig) -> Vec<Epoch> {
    let name = network.name.clone();
    let (_, epochs) = train_digits(network, cfg, &Default::default(), |_, _, _| {}, |_| {}).unwrap();
    let last = epochs.last().unwrap();
    eprintln!(
        "{name}: {} epochs, held-out accuracy {:.2}% in {:.1} s",
        epochs.len(),
        100.0 * last.held_out_accuracy,
        last.seconds
    );
    epochs
}

#[test]
fn digits_mlp_reaches_97_percent() {
    let epochs = run(mlp(512), &RunConfig::mlp());
    assert!(epochs.last().unwrap().held_out_accuracy >= 0.97);
    // Learning happened: the training loss fell by far.
    assert!(epochs.last().unwrap().train_loss() < 0.2 * epochs[0].train_loss());
}

#[test]
fn digits_cnn_reaches_98_percent() {
    let epochs = run(cnn(32, 64), &RunConfig::cnn());
    assert!(epochs.last().unwrap().held_out_accuracy >= 0.98);
}

/// A text whose next character is predictable from the previous few: a model that
/// learns it drives the cross-entropy from ln(vocab) towards 0. Returns the vocabulary
/// size and each of `steps` losses.
fn train_char_transformer(
    options: &rlx_runtime::CompileOptions,
    steps: usize,
    schedule: Schedule,
) -> (usize, Vec<f32>) {
    let text = "the cat sat on the mat. a dog ran to the log. ".repeat(8);
    let mut vocab: Vec<char> = text.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    let ids: Vec<i64> = text.chars().map(|c| vocab.binary_search(&c).unwrap() as i64).collect();
    let cfg = TransformerConfig { vocab: vocab.len(), seq: 16, dim: 32, heads: 2, layers: 1 };
    let batch = 8;
    let mut trainer = Trainer::new(char_transformer(cfg), batch, Rule::adam(), schedule, 1, options).unwrap();
    let mut rng = Rng::new(1);
    let mut losses = Vec::new();
    for _ in 0..steps {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..batch {
            let at = (rng.next_u64() % (ids.len() - cfg.seq - 1) as u64) as usize;
            x.extend_from_slice(&ids[at..at + cfg.seq]);
            y.extend_from_slice(&ids[at + 1..at + cfg.seq + 1]);
        }
        let x = HostTensor::from_i64(&[batch, cfg.seq], &x).unwrap();
        let y = HostTensor::from_i64(&[batch, cfg.seq], &y).unwrap();
        losses.push(trainer.step(&x, &y).unwrap());
    }
    (vocab.len(), losses)
}

#[test]
fn a_char_transformer_learns_its_text() {
    let (vocab, losses) = train_char_transformer(&Default::default(), 120, Schedule::Constant(3e-3));
    let (first, last) = (losses[0], mean(&losses[losses.len() - 10..]));
    eprintln!("char transformer: loss {first:.3} -> {last:.3} in {} steps", losses.len());
    // An untrained model does no better than chance, ln(vocab).
    assert!(first >= (vocab as f32).ln(), "first loss {first}");
    assert!(last < 0.25 * first, "loss {first} -> {last}");
}

/// bf16 training (bf16 params and compute, f32 master weights and optimizer) follows the
/// f32 run: the digits MLP's final loss within 2% relative and held-out accuracy within
/// 0.5 points, the char transformer's final loss within 2%; the params take half the
/// bytes (the weights packed; the biases, read by elementwise adds, widened: 2.3 KiB).
#[test]
fn bf16_training_reproduces_the_f32_curves() {
    let bf16 = rlx_runtime::CompileOptions::default().with_precision(rlx_runtime::PrecisionPolicy::AutoMixedBf16);
    let digits = |options: &rlx_runtime::CompileOptions| {
        let (trainer, epochs) = train_digits(mlp(512), &RunConfig::mlp(), options, |_, _, _| {}, |_| {}).unwrap();
        let last = epochs.last().unwrap();
        (last.train_loss(), last.held_out_loss, last.held_out_accuracy, trainer.param_bytes())
    };
    let (f32_loss, f32_held, f32_acc, f32_bytes) = digits(&Default::default());
    let (bf_loss, bf_held, bf_acc, bf_bytes) = digits(&bf16);
    eprintln!(
        "digits mlp: train loss f32 {f32_loss:.4} bf16 {bf_loss:.4}; held-out loss {f32_held:.4} / {bf_held:.4}; \
         accuracy {:.2}% / {:.2}%; param bytes {f32_bytes} / {bf_bytes}",
        100.0 * f32_acc,
        100.0 * bf_acc
    );
    assert!((bf_loss - f32_loss).abs() <= 0.02 * f32_loss, "final training loss {f32_loss} vs bf16 {bf_loss}");
    assert!(2 * bf_bytes <= f32_bytes + 4 * 1024, "param bytes {f32_bytes} vs bf16 {bf_bytes}");
    assert!((bf_acc - f32_acc).abs() <= 0.005, "accuracy {f32_acc} vs bf16 {bf_acc}");
    // Trained to convergence (cosine decay to 1% of the peak), so the final loss is the
    // text's own floor rather than a point on a still-falling curve, where a step's drift
    // reads as a 2% gap; the final loss is the last 50 steps' mean.
    let decay = Schedule::WarmupCosine { init: 0.0, peak: 3e-3, warmup: 20, decay_steps: 400, end: 3e-5 };
    let (_, f32_curve) = train_char_transformer(&Default::default(), 400, decay.clone());
    let (_, bf_curve) = train_char_transformer(&bf16, 400, decay);
    let (a, b) = (mean(&f32_curve[350..]), mean(&bf_curve[350..]));
    eprintln!("char transformer: final loss f32 {a:.4} bf16 {b:.4}");
    assert!((a - b).abs() <= 0.02 * a, "char transformer final loss {a} vs bf16 {b}");
}

fn decode(path: &std::path::Path) -> ((u32, u32), Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    ((info.width, info.height), buf)
}

fn count(px: &[u8], color: [u8; 3]) -> usize {
    px.chunks_exact(3).filter(|p| **p == color).count()
}

#[test]
fn the_loss_curve_is_a_png() {
    let points: Vec<(f64, f64)> = (0..50).map(|i| (i as f64, (-(i as f64) / 10.0).exp())).collect();
    let dir = std::env::temp_dir().join(format!("rlx-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("loss.png");
    line_chart(
        &path,
        "digits mlp",
        "step",
        "loss",
        &[Series { label: "train", points: &points, color: [30, 90, 200] }],
    )
    .unwrap();
    let (size, px) = decode(&path);
    assert_eq!(size, (plot::WIDTH as u32, plot::HEIGHT as u32));
    // The curve's color is drawn, and so is text (glyph interiors at full coverage).
    assert!(count(&px, [30, 90, 200]) > 100);
    assert!(count(&px, [20, 20, 20]) > 500);
    assert!(line_chart(&path, "empty", "x", "y", &[]).is_err());

    // Log-scale loss with accuracy on a second axis: both curves drawn; a log axis with
    // no positive value has nothing to draw.
    let accuracy: Vec<(f64, f64)> = (0..50).map(|i| (i as f64, 0.5 + i as f64 / 100.0)).collect();
    let loss = [Series { label: "loss", points: &points, color: [30, 90, 200] }];
    let acc = [Series { label: "accuracy", points: &accuracy, color: [30, 150, 70] }];
    let both = plot::Chart {
        title: "two axes",
        x_label: "step",
        left: plot::Axis { label: "loss", scale: plot::Scale::Log, series: &loss },
        right: Some(plot::Axis { label: "accuracy", scale: plot::Scale::Percent, series: &acc }),
    };
    plot::chart(&path, &both).unwrap();
    let (size, px) = decode(&path);
    assert_eq!(size, (800, 480));
    assert!(count(&px, [30, 90, 200]) > 100 && count(&px, [30, 150, 70]) > 100);
    let negative: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x, -y)).collect();
    let log_only = plot::Chart {
        left: plot::Axis {
            label: "loss",
            scale: plot::Scale::Log,
            series: &[Series { label: "l", points: &negative, color: [0; 3] }],
        },
        right: None,
        ..both
    };
    assert!(plot::chart(&path, &log_only).unwrap_err().message().contains("no finite points"));
}
