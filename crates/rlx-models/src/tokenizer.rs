//! Tokenizers built from a GGUF file's `tokenizer.ggml.*` metadata, chosen by
//! `tokenizer.ggml.model`: GPT-2-style byte-level BPE (`gpt2`: SmolLM2, Llama 3, Qwen)
//! and SentencePiece BPE (`llama`: Gemma, Llama 2; `spm.rs`).
//!
//! Encoding first splits special tokens out of the text as llama.cpp does: each
//! candidate, longest first, is cut out of the text runs left so far. User-defined tokens
//! (GGUF token type 4: Gemma's `\n`, runs of spaces, HTML tags) always are; control
//! tokens (type 3, e.g. `<|im_start|>`, `<start_of_turn>`) and the unknown token only
//! when asked (templates). Each text run is then encoded by the model:
//! - BPE: split by the pre-tokenizer the file names (`tokenizer.ggml.pre`), each piece's
//!   UTF-8 bytes mapped to GPT-2's printable byte alphabet, merges applied lowest rank
//!   first. Decoding maps the alphabet back to bytes, so any UTF-8 text round-trips.
//! - SentencePiece: spaces replaced by `▁` (after a leading space when
//!   `tokenizer.ggml.add_space_prefix` says so and the run starts the text or follows a
//!   special token), then score-driven merges with byte fallback.
//!
//! The pre-tokenizer is GPT-2's regex, written out as a scanner:
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//! "smollm" (SmolLM2) first isolates every `\p{N}` character, as llama.cpp and the
//! HuggingFace tokenizer (`Digits(individual_digits)`) do. Checked against HuggingFace
//! `tokenizers` on the fixtures made by tools/llm/reference.py.

mod spm;

use rlx_gguf::{Gguf, Value};
use rlx_ir::{Error, Result};
use std::collections::HashMap;
use unicode_general_category::{GeneralCategory as G, get_general_category};

/// A token id.
pub type TokenId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pre {
    /// GPT-2's regex.
    Gpt2,
    /// Every numeric character alone, then GPT-2's regex (SmolLM2's "smollm").
    Gpt2Digits,
}

/// How a run of plain text becomes tokens.
enum Model {
    Bpe {
        /// (left, right) -> (rank, merged).
        merges: HashMap<(TokenId, TokenId), (u32, TokenId)>,
        byte_char: Box<[char; 256]>,
        char_byte: HashMap<char, u8>,
        pre: Pre,
    },
    Spm {
        scores: Vec<f32>,
        byte_tokens: Box<[Option<TokenId>; 256]>,
        add_space_prefix: bool,
    },
}

/// A token matched whole in text before the model runs.
struct Special {
    text: String,
    id: TokenId,
    /// Control (or unknown) tokens are matched only when asked; user-defined always.
    control: bool,
}

pub struct Tokenizer {
    /// Token text as stored (BPE: in the byte alphabet), by id.
    tokens: Vec<String>,
    ids: HashMap<String, TokenId>,
    model: Model,
    /// Longest first.
    specials: Vec<Special>,
    /// GGUF token types (llama.cpp's: 1 normal, 2 unknown, 3 control, 4 user defined,
    /// 5 unused, 6 byte).
    types: Vec<u8>,
    /// Token the model expects first, if the file asks for one.
    pub bos: Option<TokenId>,
    /// End of sequence (stops generation).
    pub eos: Option<TokenId>,
    pub add_bos: bool,
}

/// GPT-2's map from bytes to printable characters: printable Latin-1 bytes map to
/// themselves, the rest to U+0100 upwards in byte order.
fn byte_alphabet() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        map[b as usize] = if printable {
            char::from_u32(b).expect("Latin-1")
        } else {
            next += 1;
            char::from_u32(next - 1).expect("below U+0200")
        };
    }
    map
}

fn strings(v: &Value, key: &str) -> Result<Vec<String>> {
    v.as_array()
        .ok_or_else(|| Error::parse(format!("gguf: '{key}' is not an array")))?
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str().map(str::to_string).ok_or_else(|| Error::parse(format!("gguf: '{key}'[{i}] is not a string")))
        })
        .collect()
}

/// Token texts that end a generation, as llama.cpp lists them (its end-of-generation
/// set): such a token is a control token whatever type the file gives it (Gemma's
/// `</s>` is "user defined" there), so typed text never produces it.
pub const END_OF_GENERATION: [&str; 21] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<\u{ff5c}end\u{2581}of\u{2581}sentence\u{ff5c}>",
];

/// A piece of text being encoded.
enum Fragment<'t> {
    Token(TokenId),
    Text(&'t str),
}

/// The byte-level BPE model: pre-tokenizer and merges.
fn bpe_model(gguf: &Gguf, ids: &HashMap<String, TokenId>) -> Result<Model> {
    let pre = match gguf.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default") {
        "smollm" => Pre::Gpt2Digits,
        "gpt2" | "default" => Pre::Gpt2,
        other => {
            return Err(Error::unsupported(format!(
                "tokenizer.ggml.pre '{}': implemented pre-tokenizers are 'gpt2', 'default' and 'smollm'",
                other.escape_debug()
            )));
        }
    };
    // A BPE vocabulary without merges would silently encode byte by byte: text the
    // model never saw in training, so fluent-looking nonsense comes out.
    let list = gguf
        .get("tokenizer.ggml.merges")
        .ok_or_else(|| {
            Error::parse("gguf: missing metadata key 'tokenizer.ggml.merges' (a BPE tokenizer needs its merges)")
        })?
        .as_array()
        .ok_or_else(|| Error::parse("gguf: 'tokenizer.ggml.merges' is not an array"))?;
    if list.is_empty() {
        return Err(Error::parse("gguf: 'tokenizer.ggml.merges' is empty (a BPE tokenizer needs its merges)"));
    }
    let mut merges = HashMap::new();
    merges.try_reserve(list.len()).map_err(|_| Error::parse("gguf: 'tokenizer.ggml.merges' is too large"))?;
    for (rank, m) in list.iter().enumerate() {
        let m =
            m.as_str().ok_or_else(|| Error::parse(format!("gguf: 'tokenizer.ggml.merges'[{rank}] is not a string")))?;
        let Some((a, b)) = m.split_once(' ') else {
            return Err(Error::parse(format!("gguf: 'tokenizer.ggml.merges'[{rank}] {m:?} is not two tokens")));
        };
        match (ids.get(a), ids.get(b), ids.get(&format!("{a}{b}"))) {
            (Some(&l), Some(&r), Some(&out)) => {
                merges.entry((l, r)).or_insert((rank as u32, out));
            }
            _ => {
                return Err(Error::parse(format!(
                    "gguf: 'tokenizer.ggml.merges'[{rank}] {m:?} joins tokens not in 'tokenizer.ggml.tokens'"
                )));
            }
        }
    }
    let byte_char = byte_alphabet();
    Ok(Model::Bpe {
        merges,
        char_byte: byte_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect(),
        byte_char: Box::new(byte_char),
        pre,
    })
}

impl Tokenizer {
    /// The tokenizer stored in `gguf`'s metadata.
    pub fn from_gguf(gguf: &Gguf) -> Result<Tokenizer> {
        let kind = gguf.require("tokenizer.ggml.model")?.as_str().unwrap_or("");
        if !matches!(kind, "gpt2" | "llama") {
            return Err(Error::unsupported(format!(
                "tokenizer.ggml.model '{}': implemented are 'gpt2' (byte-level BPE) and 'llama' (SentencePiece)",
                kind.escape_debug()
            )));
        }
        let tokens = strings(gguf.require("tokenizer.ggml.tokens")?, "tokenizer.ggml.tokens")?;
        if tokens.is_empty() {
            return Err(Error::parse("gguf: 'tokenizer.ggml.tokens' is empty"));
        }
        // Token types, scores and merges must describe the same vocabulary: a short or
        // missing list means a broken conversion, not something to paper over.
        let types: Vec<u8> = match gguf.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .as_array()
                .ok_or_else(|| Error::parse("gguf: 'tokenizer.ggml.token_type' is not an array"))?
                .iter()
                .enumerate()
                .map(|(i, v)| match v.as_u64() {
                    // llama.cpp's types: 0 undefined ... 6 byte.
                    Some(t @ 0..=6) => Ok(t as u8),
                    _ => Err(Error::parse(format!(
                        "gguf: 'tokenizer.ggml.token_type'[{i}] is {}, not a token type from 0 to 6",
                        v.summary()
                    ))),
                })
                .collect::<Result<_>>()?,
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(Error::parse(format!(
                "gguf: 'tokenizer.ggml.token_type' has {} entries for the {} of 'tokenizer.ggml.tokens'",
                types.len(),
                tokens.len()
            )));
        }
        let scores: Option<Vec<f32>> = match gguf.get("tokenizer.ggml.scores") {
            None => None,
            Some(v) => {
                let list = v.as_array().filter(|a| a.len() == tokens.len()).ok_or_else(|| {
                    Error::parse(format!(
                        "gguf: 'tokenizer.ggml.scores' has {} entries for the {} of 'tokenizer.ggml.tokens'",
                        v.as_array().map_or_else(|| "no array of".to_string(), |a| a.len().to_string()),
                        tokens.len()
                    ))
                })?;
                Some(
                    list.iter()
                        .enumerate()
                        .map(|(i, x)| {
                            x.as_f64().map(|x| x as f32).filter(|x| !x.is_nan()).ok_or_else(|| {
                                Error::parse(format!(
                                    "gguf: 'tokenizer.ggml.scores'[{i}] is {}, not a number",
                                    x.summary()
                                ))
                            })
                        })
                        .collect::<Result<_>>()?,
                )
            }
        };
        let mut types = types;
        for (t, ty) in tokens.iter().zip(types.iter_mut()) {
            if END_OF_GENERATION.contains(&t.as_str()) {
                *ty = 3;
            }
        }
        let ids: HashMap<String, TokenId> = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as TokenId)).collect();
        let model = if kind == "gpt2" {
            bpe_model(gguf, &ids)?
        } else {
            let scores = scores.ok_or_else(|| {
                Error::parse(
                    "gguf: missing metadata key 'tokenizer.ggml.scores' (a SentencePiece tokenizer needs its scores)",
                )
            })?;
            Model::Spm {
                scores,
                byte_tokens: Box::new(spm::byte_tokens(&ids)),
                add_space_prefix: gguf.get("tokenizer.ggml.add_space_prefix").and_then(Value::as_bool).unwrap_or(true),
            }
        };
        let mut specials: Vec<Special> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|&(_, (t, &ty))| matches!(ty, 2..=4) && !t.is_empty())
            .map(|(i, (t, &ty))| Special { text: t.clone(), id: i as TokenId, control: ty != 4 })
            .collect();
        specials.sort_by_key(|s| std::cmp::Reverse(s.text.len()));
        let id_key = |key: &str| -> Result<Option<TokenId>> {
            let Some(v) = gguf.get(key) else { return Ok(None) };
            match v.as_u64() {
                Some(i) if i < tokens.len() as u64 => Ok(Some(i as TokenId)),
                _ => Err(Error::parse(format!(
                    "gguf: '{key}' is {}, not a token id below the {} of 'tokenizer.ggml.tokens'",
                    v.summary(),
                    tokens.len()
                ))),
            }
        };
        Ok(Tokenizer {
            bos: id_key("tokenizer.ggml.bos_token_id")?,
            eos: id_key("tokenizer.ggml.eos_token_id")?,
            // SentencePiece models add BOS unless told not to (llama.cpp's default).
            add_bos: gguf.get("tokenizer.ggml.add_bos_token").and_then(Value::as_bool).unwrap_or(kind == "llama"),
            tokens,
            ids,
            model,
            specials,
            types,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Token `id`'s text as stored (BPE: byte alphabet; SentencePiece: `▁` for spaces),
    /// if the id exists.
    pub fn token(&self, id: TokenId) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Whether generating `id` ends a generation: the end-of-sequence token, or a token
    /// that ends a turn ([`END_OF_GENERATION`]).
    pub fn ends_generation(&self, id: TokenId) -> bool {
        Some(id) == self.eos
            || self.types.get(id as usize) == Some(&3) && END_OF_GENERATION.contains(&self.tokens[id as usize].as_str())
    }

    /// Every token that [ends a generation](Tokenizer::ends_generation).
    pub fn end_of_generation_ids(&self) -> Vec<TokenId> {
        (0..self.tokens.len() as TokenId).filter(|&id| self.ends_generation(id)).collect()
    }

    /// Whether `id` is a control / user-defined token (its text is not encoded).
    pub fn is_special(&self, id: TokenId) -> bool {
        matches!(self.types.get(id as usize), Some(3 | 4))
    }

    /// Token ids of `text`. With `special`, control-token strings in the text become
    /// their tokens (templates need this); without, they are encoded as plain text, as
    /// anything a user typed must be (`<|im_start|>` typed into a chat message must not
    /// open a turn: [`crate::ChatTemplate::encode`] parses only the template's own
    /// markers). No BOS is added here (see [`Tokenizer::encode_prompt`]).
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        let mut out = Vec::new();
        // After a special token (or at the start) a SentencePiece run may get a space.
        let mut after_special = true;
        for part in self.partition(text, special) {
            match part {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(run) => {
                    self.encode_plain(run, after_special, &mut out)?;
                    after_special = false;
                }
            }
        }
        Ok(out)
    }

    /// `encode(text, special)` with the BOS token first when the file asks for it.
    pub fn encode_prompt(&self, text: &str, special: bool) -> Result<Vec<TokenId>> {
        let mut ids = self.prompt_start();
        ids.extend(self.encode(text, special)?);
        Ok(ids)
    }

    /// What every prompt starts with: the BOS token when the file asks for it.
    pub fn prompt_start(&self) -> Vec<TokenId> {
        match (self.add_bos, self.bos) {
            (true, Some(bos)) => vec![bos],
            _ => Vec::new(),
        }
    }

    /// `text` cut into special tokens and the runs between them: each special token,
    /// longest first, is cut out of every run left (llama.cpp's order, which decides
    /// between overlapping candidates).
    fn partition<'t>(&self, text: &'t str, special: bool) -> Vec<Fragment<'t>> {
        let mut parts = vec![Fragment::Text(text)];
        for s in self.specials.iter().filter(|s| special || !s.control) {
            if !parts.iter().any(|p| matches!(p, Fragment::Text(t) if t.contains(s.text.as_str()))) {
                continue;
            }
            let mut next = Vec::with_capacity(parts.len() + 2);
            for part in parts {
                let Fragment::Text(mut run) = part else {
                    next.push(part);
                    continue;
                };
                while let Some(at) = run.find(s.text.as_str()) {
                    if at > 0 {
                        next.push(Fragment::Text(&run[..at]));
                    }
                    next.push(Fragment::Token(s.id));
                    run = &run[at + s.text.len()..];
                }
                if !run.is_empty() {
                    next.push(Fragment::Text(run));
                }
            }
            parts = next;
        }
        parts
    }

    fn encode_plain(&self, text: &str, after_special: bool, out: &mut Vec<TokenId>) -> Result<()> {
        match &self.model {
            Model::Bpe { pre, .. } => {
                for piece in pre_tokenize(text, *pre == Pre::Gpt2Digits) {
                    self.bpe(piece, out)?;
                }
                Ok(())
            }
            Model::Spm { scores, byte_tokens, add_space_prefix } => {
                let mut run = String::with_capacity(text.len() + 3);
                if *add_space_prefix && after_special {
                    run.push(spm::SPACE);
                }
                run.extend(text.chars().map(|c| if c == ' ' { spm::SPACE } else { c }));
                spm::encode(&run, &self.ids, scores, byte_tokens, out)
            }
        }
    }

    /// Byte-level BPE of one pre-token.
    fn bpe(&self, piece: &str, out: &mut Vec<TokenId>) -> Result<()> {
        let Model::Bpe { merges, byte_char, .. } = &self.model else {
            return Err(Error::internal("bpe() on a SentencePiece tokenizer"));
        };
        let mut syms: Vec<TokenId> = Vec::with_capacity(piece.len());
        for &b in piece.as_bytes() {
            let c = byte_char[b as usize];
            let id = self.ids.get(c.encode_utf8(&mut [0; 4]) as &str).copied().ok_or_else(|| {
                Error::parse(format!("tokenizer: byte 0x{b:02x} ('{c}') has no token in the vocabulary"))
            })?;
            syms.push(id);
        }
        // Merge the lowest-ranked adjacent pair (leftmost among equals) until none
        // applies: symbols in a linked list, candidate pairs in a min-heap checked when
        // popped, O(n log n) (a quadratic scan hung on 100k-character runs).
        let n = syms.len();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = std::collections::BinaryHeap::new();
        let push = |heap: &mut std::collections::BinaryHeap<_>, syms: &[TokenId], l: usize, r: usize| {
            if let Some(&(rank, merged)) = merges.get(&(syms[l], syms[r])) {
                heap.push(std::cmp::Reverse((rank, l, syms[l], syms[r], merged)));
            }
        };
        for i in 0..n.saturating_sub(1) {
            push(&mut heap, &syms, i, i + 1);
        }
        while let Some(std::cmp::Reverse((_, l, left, right, merged))) = heap.pop() {
            let r = next[l];
            // Stale: either side merged since this pair was queued.
            if !alive[l] || r >= n || syms[l] != left || syms[r] != right {
                continue;
            }
            syms[l] = merged;
            alive[r] = false;
            next[l] = next[r];
            if next[l] < n {
                prev[next[l]] = l;
                push(&mut heap, &syms, l, next[l]);
            }
            if prev[l] < n {
                push(&mut heap, &syms, prev[l], l);
            }
        }
        out.extend((0..n).filter(|&i| alive[i]).map(|i| syms[i]));
        Ok(())
    }

    /// The bytes of `ids` (special tokens as their text). Bytes, not a String: a token
    /// may end inside a UTF-8 character ([`TextStream`] joins them).
    pub fn decode_bytes(&self, ids: &[TokenId]) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        for &id in ids {
            let t = self.token(id).ok_or_else(|| {
                Error::input(format!("token id {id} is outside the vocabulary of {}", self.tokens.len()))
            })?;
            if self.is_special(id) {
                bytes.extend(t.as_bytes());
                continue;
            }
            match &self.model {
                Model::Bpe { char_byte, .. } => {
                    for c in t.chars() {
                        match char_byte.get(&c) {
                            Some(&b) => bytes.push(b),
                            // Not in the byte alphabet (a hand-added token): its UTF-8 as is.
                            None => bytes.extend(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                }
                Model::Spm { .. } => match spm::byte_of(t).filter(|_| self.types[id as usize] == 6) {
                    Some(b) => bytes.push(b),
                    None => {
                        for c in t.chars() {
                            let c = if c == spm::SPACE { ' ' } else { c };
                            bytes.extend(c.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                    }
                },
            }
        }
        Ok(bytes)
    }

    /// `ids` as text (invalid UTF-8, e.g. a cut character, becomes U+FFFD).
    pub fn decode(&self, ids: &[TokenId]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Space,
    Letter,
    Number,
    Other,
}

fn class(c: char) -> Class {
    if c.is_whitespace() {
        return Class::Space;
    }
    match get_general_category(c) {
        G::UppercaseLetter | G::LowercaseLetter | G::TitlecaseLetter | G::ModifierLetter | G::OtherLetter => {
            Class::Letter
        }
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => Class::Number,
        _ => Class::Other,
    }
}

/// Length in chars of a contraction suffix (`s t re ve m ll d`) starting `chars`.
fn contraction(chars: &[char]) -> Option<usize> {
    match chars {
        ['r', 'e', ..] | ['v', 'e', ..] | ['l', 'l', ..] => Some(2),
        ['s' | 't' | 'm' | 'd', ..] => Some(1),
        _ => None,
    }
}

/// Splits `text` into pre-tokens (see the module docs).
pub fn pre_tokenize(text: &str, digits_alone: bool) -> Vec<&str> {
    let idx: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let cls: Vec<Class> = chars.iter().map(|&c| class(c)).collect();
    // With digits isolated, a digit ends the segment before it (whitespace runs stop there).
    let boundary = |j: usize| j == n || (digits_alone && cls[j] == Class::Number);
    let run = |from: usize, k: Class| {
        (from..n).find(|&j| cls[j] != k || (digits_alone && k == Class::Number && j > from)).unwrap_or(n)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let end = if digits_alone && cls[i] == Class::Number {
            i + 1
        } else if chars[i] == '\''
            && let Some(len) = contraction(&chars[i + 1..])
        {
            i + 1 + len
        } else {
            // ` ?` before a letter, number or symbol run (not before a digit standing alone).
            let prefixed = chars[i] == ' ' && i + 1 < n && cls[i + 1] != Class::Space && !boundary(i + 1);
            let start = if prefixed { i + 1 } else { i };
            match cls[start] {
                Class::Space => {
                    let e = run(i, Class::Space);
                    // `\s+(?!\S)`: before a non-space, leave the last whitespace character
                    // to prefix what follows; at a segment's end take the whole run.
                    if boundary(e) || e - i == 1 { e } else { e - 1 }
                }
                k => run(start, k),
            }
        };
        out.push(&text[idx[i]..idx[end]]);
        i = end;
    }
    out
}

/// Joins decoded bytes into text as whole UTF-8 characters arrive (streaming output).
#[derive(Default)]
pub struct TextStream {
    pending: Vec<u8>,
}

impl TextStream {
    /// Adds `bytes`; returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An invalid sequence (not just an unfinished one) is flushed as U+FFFD.
            Err(e) if e.error_len().is_some() => self.pending.len(),
            Err(e) => e.valid_up_to(),
        };
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        text
    }

    /// Whatever is left (an unfinished character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}
