//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`: Gemma, Llama 2, Mistral), as
//! llama.cpp runs it: spaces become `▁` (U+2581), the text starts as one symbol per
//! character, and the adjacent pair whose concatenation is the highest-scored token
//! (leftmost among equal scores) merges until no pair is a token. A character with no
//! token of its own becomes its UTF-8 bytes' `<0xXX>` tokens (byte fallback).

use super::TokenId;
use rlx_ir::{Error, Result};
use std::collections::{BinaryHeap, HashMap};

/// The space marker.
pub const SPACE: char = '\u{2581}';

/// A candidate merge: higher score first, then the leftmost.
#[derive(PartialEq)]
struct Pair {
    score: f32,
    left: usize,
    right: usize,
    /// Bytes of the merged text when queued (stale once either side has changed).
    len: usize,
}

impl Eq for Pair {}

impl Ord for Pair {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A run of the text: bytes `start..start + len`, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Encodes one run of plain text (no special tokens in it), spaces already `▁`.
pub fn encode(
    text: &str,
    ids: &HashMap<String, TokenId>,
    scores: &[f32],
    byte_tokens: &[Option<TokenId>; 256],
    out: &mut Vec<TokenId>,
) -> Result<()> {
    let mut syms: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        syms.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: Some(i + 1).filter(|_| start + c.len_utf8() < text.len()),
        });
    }
    let token = |s: &Symbol| ids.get(&text[s.start..s.start + s.len]).copied();
    // Which two symbols each merged text came from, to split a text that is no token.
    let mut split: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut heap = BinaryHeap::new();
    let mut offer = |syms: &[Symbol], heap: &mut BinaryHeap<Pair>, left: Option<usize>, right: Option<usize>| {
        let (Some(l), Some(r)) = (left, right) else { return };
        let (a, b) = (syms[l], syms[r]);
        let merged = &text[a.start..b.start + b.len];
        if let Some(&id) = ids.get(merged) {
            heap.push(Pair { score: scores[id as usize], left: l, right: r, len: merged.len() });
            split.insert(merged, (l, r));
        }
    };
    for i in 1..syms.len() {
        offer(&syms, &mut heap, Some(i - 1), Some(i));
    }
    while let Some(Pair { left, right, len, .. }) = heap.pop() {
        let (l, r) = (syms[left], syms[right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != len {
            continue;
        }
        syms[left].len += r.len;
        syms[left].next = r.next;
        syms[right].len = 0;
        if let Some(n) = r.next {
            syms[n].prev = Some(left);
        }
        offer(&syms, &mut heap, l.prev, Some(left));
        offer(&syms, &mut heap, Some(left), syms[left].next);
    }
    let mut at = (!syms.is_empty()).then_some(0);
    while let Some(i) = at {
        resegment(text, &syms, i, &token, &split, byte_tokens, out)?;
        at = syms[i].next;
    }
    Ok(())
}

/// Symbol `i`'s token, else the tokens of the two symbols it was merged from, else its
/// bytes' tokens.
fn resegment(
    text: &str,
    syms: &[Symbol],
    i: usize,
    token: &impl Fn(&Symbol) -> Option<TokenId>,
    split: &HashMap<&str, (usize, usize)>,
    byte_tokens: &[Option<TokenId>; 256],
    out: &mut Vec<TokenId>,
) -> Result<()> {
    let s = syms[i];
    if let Some(id) = token(&s) {
        out.push(id);
        return Ok(());
    }
    let piece = &text[s.start..s.start + s.len];
    if let Some(&(l, r)) = split.get(piece) {
        resegment(text, syms, l, token, split, byte_tokens, out)?;
        return resegment(text, syms, r, token, split, byte_tokens, out);
    }
    for &b in piece.as_bytes() {
        let id = byte_tokens[b as usize].ok_or_else(|| {
            Error::input(format!("tokenizer: {piece:?} has no token and byte 0x{b:02X} no <0x{b:02X}> token"))
        })?;
        out.push(id);
    }
    Ok(())
}

/// The byte-fallback tokens `<0x00>` .. `<0xFF>` of a vocabulary (a missing one falls
/// back to the one-byte token, as llama.cpp's does).
pub fn byte_tokens(ids: &HashMap<String, TokenId>) -> [Option<TokenId>; 256] {
    std::array::from_fn(|b| {
        ids.get(&format!("<0x{b:02X}>"))
            .or_else(|| std::str::from_utf8(&[b as u8]).ok().and_then(|s| ids.get(s)))
            .copied()
    })
}

/// The byte a `<0xXX>` token stands for.
pub fn byte_of(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
