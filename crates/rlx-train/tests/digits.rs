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

#[test]
fn a_char_transformer_learns_its_text() {
    // A text whose next character is predictable from the previous few: a model that
    // learns it drives the cross-entropy from ln(vocab) towards 0.
    let text = "the cat sat on the mat. a dog ran to the log. ".repeat(8);
    let mut vocab: Vec<char> = text.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    let ids: Vec<i64> = text.chars().map(|c| vocab.binary_search(&c).unwrap() as i64).collect();
    let cfg = TransformerConfig { vocab: vocab.len(), seq: 16, dim: 32, heads: 2, layers: 1 };
    let batch = 8;
    let options = Default::default();
    let mut trainer =
        Trainer::new(char_transformer(cfg), batch, Rule::adam(), Schedule::Constant(3e-3), 1, &options).unwrap();
    let mut rng = Rng::new(1);
    let mut losses = Vec::new();
    for _ in 0..120 {
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
    let (first, last) = (losses[0], mean(&losses[losses.len() - 10..]));
    eprintln!("char transformer: loss {first:.3} -> {last:.3} in {} steps", losses.len());
    // An untrained model does no better than chance, ln(vocab).
    assert!(first >= (vocab.len() as f32).ln(), "first loss {first}");
    assert!(last < 0.25 * first, "loss {first} -> {last}");
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
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (720, 440));
    // The curve's color is drawn, and so is black text.
    let px: Vec<&[u8]> = buf.chunks_exact(3).collect();
    assert!(px.iter().filter(|p| **p == [30, 90, 200]).count() > 100);
    assert!(px.iter().filter(|p| **p == [0, 0, 0]).count() > 500);
    assert!(line_chart(&path, "empty", "x", "y", &[]).is_err());
}
