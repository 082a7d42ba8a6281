//! The parts that need no model file: the GPT-2 pre-tokenizer against its regex's
//! behaviour (cases worked out by hand from the pattern), the chat template, the sampler
//! and the streaming UTF-8 joiner.

use rlx_models::tokenizer::pre_tokenize;
use rlx_models::{ChatTemplate, Message, Sampler, SamplerConfig, TextStream, TokenId};

#[test]
fn pre_tokenizer_follows_the_gpt2_pattern() {
    let cases: &[(&str, &[&str])] = &[
        ("Hello world", &["Hello", " world"]),
        ("Hello, world!", &["Hello", ",", " world", "!"]),
        // `\s+(?!\S)`: the last space of a run goes with the next word.
        ("a  b", &["a", " ", " b"]),
        ("a   b", &["a", "  ", " b"]),
        ("end  ", &["end", "  "]),
        // A newline never prefixes a word; runs before a word leave their last char.
        ("\n\nfoo", &["\n", "\n", "foo"]),
        ("x \n y", &["x", " \n", " y"]),
        ("don't I'll we've", &["don", "'t", " I", "'ll", " we", "'ve"]),
        // Contractions are case-sensitive in GPT-2's pattern.
        ("DON'T", &["DON", "'", "T"]),
        (" 'quoted'", &[" '", "quoted", "'"]),
        ("x=1.5e3", &["x", "=", "1", ".", "5", "e", "3"]),
        ("naïve café", &["naïve", " café"]),
        ("日本語のテキスト", &["日本語のテキスト"]),
        ("emoji 🙂🙂!", &["emoji", " 🙂🙂!"]),
        ("tab\there", &["tab", "\t", "here"]),
        // Only U+0020 prefixes a word; CR LF and other spaces stand alone.
        ("line1\r\nline2", &["line", "1", "\r", "\n", "line", "2"]),
        ("x\u{a0}word \u{3000}w", &["x", "\u{a0}", "word", " ", "\u{3000}", "w"]),
        ("", &[]),
    ];
    for (text, want) in cases {
        assert_eq!(pre_tokenize(text, false), *want, "{text:?}");
    }
    // Without digit splitting numbers stay whole and take a leading space.
    assert_eq!(pre_tokenize("abc 123", false), ["abc", " 123"]);
    assert_eq!(pre_tokenize("x=15", false), ["x", "=", "15"]);
}

#[test]
fn smollm_pre_tokenizer_isolates_digits() {
    let cases: &[(&str, &[&str])] = &[
        ("abc 123", &["abc", " ", "1", "2", "3"]),
        ("In 2024,", &["In", " ", "2", "0", "2", "4", ","]),
        ("a  7", &["a", "  ", "7"]),
        ("v2x", &["v", "2", "x"]),
        ("½ ⅔", &["½", " ", "⅔"]),
    ];
    for (text, want) in cases {
        assert_eq!(pre_tokenize(text, true), *want, "{text:?}");
    }
}

#[test]
fn pieces_always_cover_the_text() {
    // Concatenating the pieces gives back the input, for awkward inputs too.
    let texts = ["", " ", "   ", "\n", "a\u{301}", "'", "''s", " 's", "\u{200b}x", "\r\n\r\n", "1 2  3   4", "🙂 🙂"];
    for digits in [false, true] {
        for t in texts {
            assert_eq!(pre_tokenize(t, digits).concat(), t, "{t:?}");
            assert!(pre_tokenize(t, digits).iter().all(|p| !p.is_empty()), "{t:?}");
        }
    }
}

#[test]
fn chatml_template_renders_like_its_jinja() {
    let jinja = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are helpful<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    let t = ChatTemplate::from_jinja(jinja).unwrap();
    let user = [Message::new("user", "Hi")];
    assert_eq!(
        t.render(&user, true),
        "<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let with_system = [Message::new("system", "Be brief"), Message::new("user", "Hi")];
    assert_eq!(
        t.render(&with_system, false),
        "<|im_start|>system\nBe brief<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    );
    assert_eq!(t.render(&[], false), "");
    // GGUF files store the same template with real newlines inside the literals.
    let real_newlines = jinja.replace("\\n", "\n");
    assert_eq!(ChatTemplate::from_jinja(&real_newlines).unwrap(), t);
    let e = ChatTemplate::from_jinja("{{ bos_token }}[INST] {{ m }} [/INST]").unwrap_err();
    assert!(e.message().contains("not recognized"), "{e}");
}

#[test]
fn greedy_takes_the_first_maximum_and_skips_nan() {
    let mut s = Sampler::new(SamplerConfig::default()).unwrap();
    assert_eq!(s.sample(&[0.1, 3.0, 3.0, -1.0], &[]).unwrap(), 1);
    assert_eq!(s.sample(&[f32::NAN, 0.5, 0.2], &[]).unwrap(), 1);
}

/// Greedy picks (first maximum, NaN never, suppressed ids as `-inf`) against a scalar
/// search over a masked copy, at sizes around the vectorized passes' 16 lanes, with ties,
/// NaN, infinities and subnormals drawn from a small set of values.
#[test]
fn greedy_matches_a_scalar_search_at_odd_sizes() {
    let oracle = |logits: &[f32], suppressed: &[TokenId]| {
        let mut best: Option<(f32, usize)> = None;
        for (i, &l) in logits.iter().enumerate() {
            let l = if suppressed.contains(&(i as TokenId)) { f32::NEG_INFINITY } else { l };
            if !l.is_nan() && best.is_none_or(|(b, _)| l > b) {
                best = Some((l, i));
            }
        }
        best.map(|(_, i)| i as TokenId)
    };
    let values = [0.0f32, 1.0, 2.0, -3.0, 1e-40, f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for size in [1, 2, 3, 15, 16, 17, 31, 33, 1000, 49152] {
        for trial in 0..40 {
            // Few distinct values a trial (many ties), sometimes only NaN and -inf.
            let pool: Vec<f32> = (0..1 + trial % 4).map(|_| values[next(values.len())]).collect();
            let mut logits: Vec<f32> = (0..size).map(|_| pool[next(pool.len())]).collect();
            if trial % 5 == 0 {
                logits[next(size)] = 7.5; // one clear maximum somewhere
            }
            for suppressed in [vec![], vec![next(size) as TokenId], (0..size as TokenId).step_by(3).collect()] {
                let config = SamplerConfig { suppressed: suppressed.clone(), ..SamplerConfig::default() };
                let got = Sampler::new(config).unwrap().sample(&logits, &[]).ok();
                assert_eq!(
                    got,
                    oracle(&logits, &suppressed),
                    "size {size}, trial {trial}, suppressed {suppressed:?} {logits:?}"
                );
            }
        }
    }
}

#[test]
fn repetition_penalty_demotes_seen_tokens() {
    let config = SamplerConfig { repetition_penalty: 2.0, ..SamplerConfig::default() };
    let mut s = Sampler::new(config).unwrap();
    // 2.0 / 2 = 1.0 < 1.5: the repeated token loses; a negative logit is pushed down.
    assert_eq!(s.sample(&[2.0, 1.5], &[0]).unwrap(), 1);
    assert_eq!(s.sample(&[-0.1, -0.15], &[0]).unwrap(), 1);
    // Outside the window it is not penalized.
    let config = SamplerConfig { repetition_penalty: 2.0, penalty_window: 1, ..SamplerConfig::default() };
    assert_eq!(Sampler::new(config).unwrap().sample(&[2.0, 1.5], &[0, 1]).unwrap(), 0);
}

#[test]
fn sampling_is_seeded_and_follows_the_distribution() {
    let logits = [1.0f32, 2.0, 0.0, 1.5];
    let draw = |seed: u64, n: usize| {
        let config = SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, seed, ..SamplerConfig::default() };
        let mut s = Sampler::new(config).unwrap();
        (0..n).map(|_| s.sample(&logits, &[]).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(7, 50), draw(7, 50));
    assert_ne!(draw(7, 50), draw(8, 50));
    // Frequencies of 40000 draws against softmax(logits): within 5 standard deviations.
    let n = 40000;
    let counts = draw(1, n).iter().fold([0usize; 4], |mut c, &t| {
        c[t as usize] += 1;
        c
    });
    let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
    for (i, &c) in counts.iter().enumerate() {
        let p = (logits[i] as f64).exp() / z;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!((c as f64 - n as f64 * p).abs() < 5.0 * sd, "token {i}: {c} draws, expected {:.0}", n as f64 * p);
    }
}

#[test]
fn non_finite_logits_and_bad_settings() {
    let hot = SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, ..SamplerConfig::default() };
    for seed in 0..20 {
        let config = SamplerConfig { seed, ..hot.clone() };
        // +inf is certain; NaN never chosen; all -inf picks the first.
        assert_eq!(Sampler::new(config.clone()).unwrap().sample(&[1.0, f32::INFINITY, f32::NAN], &[]).unwrap(), 1);
        assert_eq!(Sampler::new(config.clone()).unwrap().sample(&[f32::NAN, 0.5], &[]).unwrap(), 1);
        assert_eq!(Sampler::new(config).unwrap().sample(&[f32::NEG_INFINITY; 3], &[]).unwrap(), 0);
    }
    let mut greedy = Sampler::new(SamplerConfig::default()).unwrap();
    assert_eq!(greedy.sample(&[f32::NEG_INFINITY, f32::NEG_INFINITY], &[]).unwrap(), 0);
    assert!(greedy.sample(&[f32::NAN, f32::NAN], &[]).is_err());
    assert!(greedy.sample(&[], &[]).is_err());
    for bad in [
        SamplerConfig { temperature: f32::NAN, ..SamplerConfig::default() },
        SamplerConfig { top_p: 0.0, ..SamplerConfig::default() },
        SamplerConfig { top_p: 1.5, ..SamplerConfig::default() },
        SamplerConfig { repetition_penalty: 0.0, ..SamplerConfig::default() },
    ] {
        assert!(Sampler::new(bad).is_err());
    }
}

#[test]
fn suppressed_tokens_are_never_sampled() {
    let logits = [3.0f32, 9.0, 2.9, -5.0];
    let banned = SamplerConfig { suppressed: vec![1, 3], ..SamplerConfig::default() };
    assert_eq!(Sampler::new(banned.clone()).unwrap().sample(&logits, &[]).unwrap(), 0);
    // Even a +inf logit.
    assert_eq!(Sampler::new(banned.clone()).unwrap().sample(&[0.0, f32::INFINITY, 1.0], &[]).unwrap(), 2);
    for seed in 0..200 {
        let hot = SamplerConfig { temperature: 2.0, top_k: 0, top_p: 1.0, seed, ..banned.clone() };
        assert!(matches!(Sampler::new(hot).unwrap().sample(&logits, &[]).unwrap(), 0 | 2));
    }
}

#[test]
fn top_k_and_top_p_cut_the_tail() {
    let logits = [3.0f32, 2.9, -5.0, -6.0];
    for seed in 0..200 {
        let k1 = SamplerConfig { temperature: 1.0, top_k: 1, seed, ..SamplerConfig::default() };
        assert_eq!(Sampler::new(k1).unwrap().sample(&logits, &[]).unwrap(), 0);
        // p(0) + p(1) > 0.999: with top_p 0.99 the two unlikely tokens never come.
        let p = SamplerConfig { temperature: 1.0, top_k: 0, top_p: 0.99, seed, ..SamplerConfig::default() };
        assert!(Sampler::new(p).unwrap().sample(&logits, &[]).unwrap() < 2);
    }
}

#[test]
fn text_stream_joins_split_characters() {
    let mut s = TextStream::default();
    let bytes = "é🙂".as_bytes();
    assert_eq!(s.push(&bytes[..1]), "");
    assert_eq!(s.push(&bytes[1..3]), "é");
    assert_eq!(s.push(&bytes[3..5]), "");
    assert_eq!(s.push(&bytes[5..]), "🙂");
    // An invalid byte is flushed as U+FFFD instead of blocking the stream.
    assert_eq!(s.push(&[0xFF, b'a']), "\u{FFFD}a");
    assert_eq!(s.push(&[0xE2, 0x82]), "");
    assert_eq!(s.finish(), "\u{FFFD}");
}
