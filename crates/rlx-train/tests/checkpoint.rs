//! Checkpoints: a run cut in pieces by save + resume equals the run in one piece bit for
//! bit (params, optimizer state and every step's loss); the params file is safetensors;
//! checkpoints of another model, of other settings, or cut off mid-save are refused; bad
//! data and batch sizes are one clear error each.

use rlx_ir::{DType, HostTensor};
use rlx_optim::Rule;
use rlx_train::*;
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rlx-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn cfg(rule: Rule) -> RunConfig {
    RunConfig { epochs: 4, batch: 32, rule, ..RunConfig::mlp() }
}

/// Every step's loss of a run (in order) and the trainer.
fn run(cfg: &RunConfig, control: &RunControl<'_>) -> (Trainer, Vec<f32>) {
    let net = mlp(24);
    let data = Digits::load().unwrap().arrays(&net.example).unwrap();
    let mut losses = Vec::new();
    let (t, _) = train(net, &data, cfg, &Default::default(), control, |p| {
        if let Progress::Step(s) = p {
            losses.push(s.loss)
        }
        Ok(())
    })
    .unwrap();
    (t, losses)
}

#[test]
fn two_halves_equal_the_whole_run_bit_for_bit() {
    // One rule per moment count: none (plain SGD), one (Lion), two (AdamW).
    for rule in [Rule::sgd(0.0, false), Rule::lion(0.05), Rule::adamw(0.05)] {
        let cfg = cfg(rule.clone());
        let (whole, whole_losses) = run(&cfg, &RunControl::default());
        let dir = scratch(&format!("halves-{}", rule.moments()));
        let save = RunControl { save: Some(dir.clone()), stop_after_epochs: Some(2), ..Default::default() };
        let (first, mut losses) = run(&cfg, &save);
        assert_eq!(first.core.optimizer.state.step as usize, whole_losses.len() / 2);
        let resume = RunControl { resume: Some(dir.clone()), save: Some(dir.clone()), ..Default::default() };
        let (second, rest) = run(&cfg, &resume);
        losses.extend(rest);
        assert_eq!(
            losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
            whole_losses.iter().map(|l| l.to_bits()).collect::<Vec<_>>(),
            "{rule:?}"
        );
        assert_eq!(second.core.params_sha256(), whole.core.params_sha256(), "{rule:?}");
        assert_eq!(second.core.optimizer, whole.core.optimizer, "{rule:?}");
        // The saved params are a safetensors file of the final f32 params.
        let file = rlx_io::load_safetensors(dir.join("params.safetensors")).unwrap();
        for (name, values) in whole.core.names().iter().zip(&whole.core.params) {
            let t = file.get(name).unwrap();
            assert_eq!(t.dtype(), DType::F32);
            assert_eq!(&t.to_f32_vec(), values, "{name}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn refuses_checkpoints_that_do_not_fit() {
    let cfg = RunConfig { epochs: 1, ..cfg(Rule::adamw(0.05)) };
    let dir = scratch("refuse");
    run(&cfg, &RunControl { save: Some(dir.clone()), ..Default::default() });
    let net = mlp(16);
    let data = Digits::load().unwrap().arrays(&net.example).unwrap();
    let resume = RunControl { resume: Some(dir.clone()), ..Default::default() };
    let e = train(net, &data, &cfg, &Default::default(), &resume, |_| Ok(())).map(|_| ()).unwrap_err();
    assert!(
        e.message().contains("checkpoint of another model")
            && e.message().contains("'fc1.w' is [64,24] there, [64,16] here"),
        "{e}"
    );
    // Other settings than the saved ones.
    let other = RunConfig { batch: 16, ..cfg.clone() };
    let net = mlp(24);
    let e = train(net, &data, &other, &Default::default(), &resume, |_| Ok(())).map(|_| ()).unwrap_err();
    assert!(e.message().contains("trained with batch 32, this run asks for 16"), "{e}");
    assert_eq!(RunConfig::saved_in(&dir, rlx_runtime::Device::Cpu).unwrap().batch, 32);
    // A save cut off after params.safetensors was replaced: two steps mixed.
    let meta = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, text.replace("\"step\": 44", "\"step\": 43")).unwrap();
    let e = train(mlp(24), &data, &cfg, &Default::default(), &resume, |_| Ok(())).map(|_| ()).unwrap_err();
    assert!(e.message().contains("written at step 44, meta.json at step 43"), "{e}");
    std::fs::write(&meta, "{").unwrap();
    let e = train(mlp(24), &data, &cfg, &Default::default(), &resume, |_| Ok(())).map(|_| ()).unwrap_err();
    assert!(e.message().contains("not an RLX checkpoint"), "{e}");
    let missing = RunControl { resume: Some(dir.join("nope")), ..Default::default() };
    let e = train(mlp(24), &data, &cfg, &Default::default(), &missing, |_| Ok(())).map(|_| ()).unwrap_err();
    assert!(e.message().contains("nope/meta.json"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_data_and_batches_are_one_clear_error() {
    let net = || mlp(8);
    let data = Digits::load().unwrap().arrays(&[64]).unwrap();
    let go = |data: &ArrayData, cfg: &RunConfig| {
        train(net(), data, cfg, &Default::default(), &RunControl::default(), |_| Ok(()))
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let one = RunConfig { epochs: 1, ..RunConfig::mlp() };
    assert!(go(&data, &RunConfig { batch: 0, ..one.clone() }).contains("batch size must lie in 1..=1438"));
    assert!(go(&data, &RunConfig { batch: 5000, ..one.clone() }).contains("got 5000"));
    assert!(go(&data, &RunConfig { max_steps: Some(0), ..one.clone() }).contains("step count"));
    // Labels out of the network's 10 classes.
    let mut labels = data.labels();
    labels[7] = 12;
    let bad = ArrayData::new(data.x.clone(), HostTensor::from_i64(&[labels.len()], &labels).unwrap()).unwrap();
    assert!(go(&bad, &one).contains("target 12 of example 7 is out of range for 10 classes"));
    // Counts or shapes that do not match.
    let short = HostTensor::from_i64(&[3], &[0, 1, 2]).unwrap();
    let e = ArrayData::new(data.x.clone(), short).unwrap_err();
    assert!(e.message().contains("[1797,64] and targets [3]"), "{e}");
    let e = ArrayData::new(data.x.clone(), HostTensor::from_f32(&[1797], &[0.5; 1797]).unwrap()).unwrap_err();
    assert!(e.message().contains("integer class ids"), "{e}");
    let images = Digits::load().unwrap().arrays(&[1, 8, 8]).unwrap();
    assert!(go(&images, &one).contains("'mlp' takes examples [64] with targets [], the data has [1,8,8]"));
}

#[test]
fn char_windows_pair_each_window_with_the_next_characters() {
    let (vocab, data) = char_windows("abcabd", 3, 1).unwrap();
    assert_eq!(vocab, ['a', 'b', 'c', 'd']);
    assert_eq!(data.x.dims(), [3, 3]);
    assert_eq!(data.x.to_f64_vec(), [0., 1., 2., 1., 2., 0., 2., 0., 1.]);
    assert_eq!(data.y.to_f64_vec(), [1., 2., 0., 2., 0., 1., 0., 1., 3.]);
    let (_, strided) = char_windows("abcabd", 2, 2).unwrap();
    assert_eq!(strided.x.to_f64_vec(), [0., 1., 2., 0.]);
    assert!(char_windows("ab", 2, 1).unwrap_err().message().contains("2 characters"));
}

/// CRC-32C's check value (the CRC of "123456789", from the Castagnoli catalogue entry)
/// and RFC 3720's 32 zero bytes.
#[test]
fn crc32c_matches_its_published_check_values() {
    assert_eq!(rlx_train::metrics::crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(rlx_train::metrics::crc32c(&[0u8; 32]), 0x8A91_36AA);
    assert_eq!(rlx_train::metrics::crc32c(&[0xffu8; 32]), 0x62A8_AB43);
}

/// `GraphTrainer::save` / `resume` on any loss graph (here a tiny language-model head
/// with LLM-style param names, inputs not named x / y): a fresh trainer resumed
/// from a checkpoint continues exactly as the uninterrupted one, and the loop state given
/// to `save` comes back.
#[test]
fn any_graph_trainer_saves_and_resumes_bit_for_bit() {
    use rlx_ir::Graph;
    use rlx_optim::Schedule;
    use rlx_runtime::{CompileOptions, Device, Session};
    let (rows, dim, vocab) = (3, 17, 5);
    let mut g = Graph::new("lm_head");
    let h = g.input("hidden", DType::F32, &[rows, dim]).unwrap();
    let t = g.input("targets", DType::I64, &[rows]).unwrap();
    let w = g.param("model.embed_tokens.weight", DType::F32, &[dim, vocab]).unwrap();
    let n = g.param("model.norm.weight", DType::F32, &[dim]).unwrap();
    let scaled = g.mul(h, n).unwrap();
    let logits = g.matmul(scaled, w).unwrap();
    let loss = g.cross_entropy(logits, t).unwrap();
    g.set_outputs(&[loss]).unwrap();
    let session = Session::new(Device::Cpu).unwrap();
    let init = || {
        let w: Vec<f32> = (0..dim * vocab).map(|i| ((i * 7 % 11) as f32 - 5.0) / 20.0).collect();
        vec![("model.embed_tokens.weight".to_string(), w), ("model.norm.weight".to_string(), vec![1.0; dim])]
    };
    let trainer = || {
        GraphTrainer::new(&session, &g, init(), Rule::adamw(0.01), Schedule::Constant(0.05), &CompileOptions::default())
            .unwrap()
    };
    let hidden: Vec<f32> = (0..rows * dim).map(|i| ((i * 5 % 13) as f32 - 6.0) / 6.0).collect();
    let hidden = HostTensor::from_f32(&[rows, dim], &hidden).unwrap();
    let targets = HostTensor::from_i64(&[rows], &[0, 3, 4]).unwrap();
    let batch = [("hidden", hidden.view()), ("targets", targets.view())];
    let mut whole = trainer();
    let losses: Vec<u32> = (0..6).map(|_| whole.step(&batch).unwrap().to_bits()).collect();
    let dir = scratch("any-graph");
    let mut first = trainer();
    let mut resumed_losses: Vec<u32> = (0..3).map(|_| first.step(&batch).unwrap().to_bits()).collect();
    first.save(&dir, &serde_json::json!({"tokens_seen": 9})).unwrap();
    let mut second = trainer();
    assert_eq!(second.resume(&dir).unwrap(), serde_json::json!({"tokens_seen": 9}));
    resumed_losses.extend((0..3).map(|_| second.step(&batch).unwrap().to_bits()));
    // Training moves: every step's loss differs from the last.
    assert!(losses.windows(2).all(|w| w[0] != w[1]), "{losses:?}");
    assert_eq!(resumed_losses, losses);
    assert_eq!(second.params_sha256(), whole.params_sha256());
    let _ = std::fs::remove_dir_all(&dir);
}
