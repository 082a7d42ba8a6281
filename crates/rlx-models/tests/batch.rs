//! Batched decoding (`Llama::decode_batch`, what `rlx serve` steps its requests with)
//! against one sequence at a time (`Llama::decode`): every row's logits must be bit for
//! bit those of its sequence decoded alone, whatever else is in the batch, in whatever
//! order the rows come, as sequences join and leave.
//!
//! The oracle is the single-sequence path, itself checked against llama.cpp
//! (tests/generate.rs, tests/gemma3.rs). Models come from `tools/fetch_model.sh`; without
//! them these tests say how to get them and pass, unless `RLX_REQUIRE_MODEL=1`.

mod common;

use rlx_models::{BatchRow, DEFAULT_MODEL, GEMMA3_MODEL, Llama, LlamaOptions, SlotPiece, TokenId};

/// Greedy continuation of `prompt` for `steps` tokens on slot 0 alone: the token fed at
/// each step and the logits that followed it.
fn solo(llama: &mut Llama, prompt: &[TokenId], steps: usize) -> Vec<(TokenId, Vec<f32>)> {
    llama.reset();
    let mut logits = llama.prefill(prompt).unwrap();
    let mut out = Vec::new();
    for _ in 0..steps {
        let token = argmax(&logits);
        logits = llama.decode(token).unwrap();
        out.push((token, logits.clone()));
    }
    out
}

fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as TokenId
}

/// Three sequences in slots 3, 1 and 2 joining at steps 0, 2 and 3 (their prompts
/// prefilled between steps), the first leaving after 5; rows handed over out of slot
/// order but every fourth step. Each row's logits equal its solo run's, from
/// `decode_batch`, `decode_batch_into` and `decode_batch_with`.
fn check(model: &std::path::Path, options: LlamaOptions) {
    let mut llama = Llama::load(model, &options).unwrap();
    let prompts: Vec<Vec<TokenId>> =
        ["The capital of France is", "1, 2, 3, 4,", "Once upon a time, in a small village by the sea, there"]
            .iter()
            .map(|p| llama.tokenizer.encode_prompt(p, false).unwrap())
            .collect();
    let steps = 7;
    let want: Vec<_> = prompts.iter().map(|p| solo(&mut llama, p, steps)).collect();
    llama.set_slots(4).unwrap();
    let slots = [3, 1, 2];
    let joins = [0, 2, 3];
    let leaves = [5, steps + 3, steps + 3];
    // Per sequence: steps done.
    let mut done = [0usize; 3];
    let mut reused = vec![f32::NAN; 5];
    for t in 0..steps + 3 {
        for s in 0..3 {
            if joins[s] == t {
                llama.prefill_slot(slots[s], 0, &prompts[s]).unwrap();
            }
        }
        // Newest first: not the slots' order, but in it every fourth step.
        let mut live: Vec<usize> =
            (0..3).rev().filter(|&s| joins[s] <= t && t < leaves[s] && done[s] < steps).collect();
        if live.is_empty() {
            continue;
        }
        if t % 4 == 2 {
            live.sort_unstable_by_key(|&s| slots[s]);
        }
        let rows: Vec<BatchRow> = live
            .iter()
            .map(|&s| BatchRow { slot: slots[s], pos: prompts[s].len() + done[s], token: want[s][done[s]].0 })
            .collect();
        // In turn: a fresh vector, the buffer an earlier step left (its size another
        // batch's), and the logits lent where the step left them (in slot order, then not).
        let logits = match t % 4 {
            0 => llama.decode_batch(&rows).unwrap(),
            1 => {
                llama.decode_batch_into(&rows, &mut reused).unwrap();
                reused.clone()
            }
            _ => llama.decode_batch_with(&rows, <[f32]>::to_vec).unwrap(),
        };
        let vocab = logits.len() / rows.len();
        for (row, &s) in live.iter().enumerate() {
            let got = &logits[row * vocab..][..vocab];
            let expected = &want[s][done[s]].1;
            let same = got.iter().zip(expected).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "sequence {s} step {}: batched logits (rows {live:?}) differ from its solo run", done[s]);
            done[s] += 1;
        }
    }
    assert_eq!(done, [5, steps, steps]);
}

#[test]
fn batched_rows_equal_solo_decoding_smollm2() {
    let Some(path) = common::cached(DEFAULT_MODEL, "tools/fetch_model.sh") else { return };
    // Two workers whatever the host: a step's attention calls then run side by side.
    check(&path, LlamaOptions { context: 128, threads: Some(2), ..LlamaOptions::default() });
}

#[test]
fn batched_rows_equal_solo_decoding_gemma3() {
    let Some(path) = common::cached(GEMMA3_MODEL, "tools/fetch_model.sh gemma3") else { return };
    check(&path, LlamaOptions { context: 128, ..LlamaOptions::default() });
}

#[test]
fn batched_f32_decoding_equals_solo() {
    let Some(path) = common::cached(DEFAULT_MODEL, "tools/fetch_model.sh") else { return };
    check(&path, LlamaOptions { context: 128, q8_decode: false, ..LlamaOptions::default() });
}

/// A prompt prefilled in two pieces split at a multiple of the attention's row block
/// (what `rlx serve` does past 256 tokens, and when it reuses the rows a slot's earlier
/// prompt left: prompt caching) gives the bits of the prompt prefilled whole: the logits
/// after it and of two greedy decode steps after that (what it left in the cache).
/// Splits after 64 and 128 of ~170 tokens, and after all but the last token rounded down
/// to 64 (a whole cached prompt: its last token is run again for its logits).
fn check_prompt_in_pieces(model: &std::path::Path, options: LlamaOptions) {
    let mut llama = Llama::load(model, &options).unwrap();
    let text = "Once upon a time, in a small village by the sea, there lived an old fisherman who \
                told stories to the children every evening about dragons, storms and lost ships. ";
    let prompt = llama.tokenizer.encode_prompt(&text.repeat(5), false).unwrap();
    let block = rlx_runtime::cpu::ATTENTION_ROW_BLOCK;
    let run = |llama: &mut Llama, split: usize| {
        let mut logits = llama.prefill_slot(0, 0, &prompt[..split]).unwrap();
        if split < prompt.len() {
            logits = llama.prefill_slot(0, split, &prompt[split..]).unwrap();
        }
        let mut out = vec![logits];
        for step in 0..2 {
            let token = argmax(out.last().unwrap());
            let pos = prompt.len() + step;
            out.push(llama.decode_batch(&[BatchRow { slot: 0, pos, token }]).unwrap());
        }
        out.iter().map(|l| l.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()).collect::<Vec<_>>()
    };
    let whole = run(&mut llama, prompt.len());
    assert!(prompt.len() > 2 * block + 1, "{} tokens", prompt.len());
    for split in [block, 2 * block, (prompt.len() - 1) / block * block] {
        // Another prompt first, so that the rows past the split hold something else.
        llama.prefill_slot(0, 0, &prompt[3..]).unwrap();
        assert!(run(&mut llama, split) == whole, "split after {split} of {} tokens", prompt.len());
    }
}

#[test]
fn a_prompt_in_aligned_pieces_equals_it_whole_smollm2() {
    let Some(path) = common::cached(DEFAULT_MODEL, "tools/fetch_model.sh") else { return };
    check_prompt_in_pieces(&path, LlamaOptions { context: 256, threads: Some(2), ..LlamaOptions::default() });
}

#[test]
fn a_prompt_in_aligned_pieces_equals_it_whole_gemma3() {
    let Some(path) = common::cached(GEMMA3_MODEL, "tools/fetch_model.sh gemma3") else { return };
    check_prompt_in_pieces(&path, LlamaOptions { context: 256, ..LlamaOptions::default() });
}

/// Prompts of several slots run together (`Llama::run_slots`: what `rlx serve` does with
/// requests that arrive together, each piece on one worker beside the others) give each
/// one's bits alone: its logits or hidden states, and the cache rows it wrote (the decode
/// step after it). Among them two prompts of one length (a copy of the graph each), a
/// piece of a slot that does not exist (an error of its own; the rest run), and two
/// pieces of one slot (one after the other: the hidden states, then the prompt).
fn check_prompts_together(model: &std::path::Path, options: LlamaOptions) {
    let mut llama = Llama::load(model, &options).unwrap();
    llama.set_slots(4).unwrap();
    let texts = ["The capital of France is", "The capital of Spain is", "1, 2, 3, 4,", "Once upon a time, there"];
    let prompts: Vec<Vec<TokenId>> = texts.iter().map(|t| llama.tokenizer.encode_prompt(t, false).unwrap()).collect();
    assert_eq!(prompts[0].len(), prompts[1].len(), "two prompts of one length");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    // Alone, in slot 0: each prompt's logits and the decode step after it.
    let mut alone = Vec::new();
    for p in &prompts {
        let logits = llama.prefill_slot(0, 0, p).unwrap();
        let token = argmax(&logits);
        let step = llama.decode_batch(&[BatchRow { slot: 0, pos: p.len(), token }]).unwrap();
        alone.push((bits(&logits), token, bits(&step)));
    }
    let hidden = bits(&llama.hidden_slot(0, 0, &prompts[3]).unwrap());
    let piece = |slot: usize, p: usize, hidden: bool| SlotPiece { slot, pos: 0, tokens: &prompts[p], hidden };
    let pieces = [
        piece(0, 0, false),
        piece(1, 1, false),
        piece(9, 2, false),
        piece(2, 2, false),
        piece(3, 3, true),
        piece(3, 3, false),
    ];
    let together = llama.run_slots(&pieces);
    assert_eq!(together.len(), pieces.len());
    // Prompt k ran in slot k.
    for (k, at) in [(0, 0), (1, 1), (2, 3), (3, 5)] {
        assert!(bits(together[at].as_ref().unwrap()) == alone[k].0, "prompt {k}: logits differ");
    }
    assert!(together[2].as_ref().unwrap_err().to_string().contains("slot 9 of 4"), "{:?}", together[2]);
    assert!(bits(together[4].as_ref().unwrap()) == hidden, "hidden states differ");
    let rows: Vec<BatchRow> = (0..4).map(|s| BatchRow { slot: s, pos: prompts[s].len(), token: alone[s].1 }).collect();
    let steps = llama.decode_batch(&rows).unwrap();
    for (s, step) in steps.chunks_exact(steps.len() / 4).enumerate() {
        assert!(bits(step) == alone[s].2, "slot {s}: the step after the prompt differs");
    }
}

#[test]
fn prompts_together_equal_each_alone_smollm2() {
    let Some(path) = common::cached(DEFAULT_MODEL, "tools/fetch_model.sh") else { return };
    check_prompts_together(&path, LlamaOptions { context: 64, threads: Some(2), ..LlamaOptions::default() });
}

#[test]
fn prompts_together_equal_each_alone_gemma3() {
    let Some(path) = common::cached(GEMMA3_MODEL, "tools/fetch_model.sh gemma3") else { return };
    check_prompts_together(&path, LlamaOptions { context: 64, threads: Some(2), ..LlamaOptions::default() });
}

#[test]
fn bad_batches_are_errors() {
    let Some(path) = common::cached(DEFAULT_MODEL, "tools/fetch_model.sh") else { return };
    let mut llama = Llama::load(&path, &LlamaOptions { context: 16, ..LlamaOptions::default() }).unwrap();
    llama.set_slots(2).unwrap();
    let row = |slot, pos| BatchRow { slot, pos, token: 1 };
    let mut err = |rows: &[BatchRow]| llama.decode_batch(rows).unwrap_err().to_string();
    assert!(err(&[]).contains("no rows"));
    assert!(err(&[row(2, 0)]).contains("slot 2 of 2"));
    assert!(err(&[row(0, 0), row(0, 1)]).contains("twice"));
    assert!(err(&[row(1, 16)]).contains("context full"));
    assert!(llama.set_slots(0).unwrap_err().to_string().contains("at least 1"));
    assert!(llama.prefill_slot(5, 0, &[1]).unwrap_err().to_string().contains("slot 5"));
}

/// A prompt length run lately keeps its compiled graph: eight lengths, the first again,
/// a ninth (which drops the least recently run, the second), then the first runs without
/// compiling and the second compiles again.
#[test]
fn recent_prompt_lengths_stay_compiled() {
    let Some(path) = common::cached(DEFAULT_MODEL, "tools/fetch_model.sh") else { return };
    let mut llama = Llama::load(&path, &LlamaOptions { context: 64, ..LlamaOptions::default() }).unwrap();
    let tokens: Vec<TokenId> =
        llama.tokenizer.encode_prompt("one two three four five six seven eight nine", false).unwrap();
    let mut prefill = |n: usize| {
        let before = llama.compile_seconds();
        llama.prefill_slot(0, 0, &tokens[..n]).unwrap();
        llama.compile_seconds() > before
    };
    for n in 1..=8 {
        assert!(prefill(n), "{n} tokens: a new length compiles");
    }
    assert!(!prefill(1), "1 token: kept");
    assert!(prefill(9), "9 tokens: a new length compiles");
    assert!(!prefill(1), "1 token: run lately, kept");
    assert!(prefill(2), "2 tokens: the least recently run, dropped");
}
