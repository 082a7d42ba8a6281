//! The SmolLM2 GGUF model on the GPU against the CPU: a prompt then decode steps (f32
//! activations, so both devices compute the same quantities), the same greedy tokens and
//! logits within the tolerance of the model's accumulation depth.

use crate::gpu_or_skip;
use rlx::models::{Llama, LlamaOptions, default_model_path};
use rlx::prelude::*;

#[test]
fn smollm2_decodes_on_the_gpu_as_on_the_cpu() {
    if !gpu_or_skip("smollm2_decodes_on_the_gpu_as_on_the_cpu") {
        return;
    }
    let path = default_model_path();
    if !path.exists() {
        assert!(!std::env::var("RLX_REQUIRE_MODEL").is_ok_and(|v| v == "1"), "{} is missing", path.display());
        eprintln!("skipped: {} is missing (tools/fetch_model.sh)", path.display());
        return;
    }
    let options = |device| LlamaOptions {
        context: 64,
        threads: None,
        q8_decode: false,
        device,
        cache_type: Some(rlx::prelude::DType::F32),
    };
    let mut cpu = Llama::load(&path, &options(Device::Cpu)).unwrap();
    let mut gpu = Llama::load(&path, &options(Device::Gpu)).unwrap();
    let prompt = cpu.tokenizer.encode_prompt("The capital of France is", true).unwrap();
    let (mut a, mut b) = (cpu.prefill(&prompt).unwrap(), gpu.prefill(&prompt).unwrap());
    let c = &cpu.config;
    // Longest accumulation: every layer's projections, FFN and attention over the context.
    let depth = (c.n_layer * (c.d_model + c.d_ff + 64)) as f64;
    for step in 0..4 {
        let m = a.iter().fold(1f32, |m, v| m.max(v.abs())) as f64;
        let tol = 2.0 * rlx_corpus::tolerance(f32::EPSILON as f64 / 2.0, depth as usize, m);
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs() as f64).fold(0.0, f64::max);
        eprintln!("step {step}: logits differ by {worst:e} (tolerance {tol:e})");
        assert!(worst <= tol, "step {step}: logits differ by {worst:e} (tolerance {tol:e})");
        let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap() as u32;
        let token = argmax(&a);
        assert_eq!(token, argmax(&b), "step {step}: greedy tokens differ");
        (a, b) = (cpu.decode(token).unwrap(), gpu.decode(token).unwrap());
    }
}
