//! Text out of a generation, as `rlx generate`, the Python `Llama` and a server show it:
//! tokens decoded into whole UTF-8 characters, the end-of-sequence (or end-of-turn) token
//! dropped, and stop strings with OpenAI's semantics (generation ends at the first
//! occurrence of any of them, which is not part of the text). Streamed pieces concatenate to exactly the
//! text a non-streaming call returns: a piece never ends inside a possible stop string.

use crate::chat::Message;
use crate::llama::{Generation, Llama};
use crate::sampler::Sampler;
use crate::tokenizer::{TextStream, TokenId, Tokenizer};
use rlx_ir::{Error, Result};

/// Text held back while it could still be the start of a stop string.
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    pending: String,
    stopped: bool,
}

impl StopStrings {
    /// An empty stop string is an error (it would match before any text).
    pub fn new(stops: &[String]) -> Result<StopStrings> {
        if let Some(i) = stops.iter().position(String::is_empty) {
            return Err(Error::input(format!("stop string {i} is empty")));
        }
        Ok(StopStrings { stops: stops.to_vec(), ..Default::default() })
    }

    /// Whether a stop string has matched (nothing more is released after it).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds generated `text`; returns the text that can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.pending.push_str(text);
        let first = self.stops.iter().filter_map(|s| self.pending.find(s.as_str())).min();
        if let Some(at) = first {
            self.stopped = true;
            self.pending.truncate(at);
            return std::mem::take(&mut self.pending);
        }
        // Keep the longest tail that a stop string starts with.
        let held = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.pending[i..])))
            .unwrap_or(self.pending.len());
        let tail = self.pending.split_off(held);
        std::mem::replace(&mut self.pending, tail)
    }

    /// The end of the text: whatever was held back.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Why a completion ended, with OpenAI's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// The end-of-sequence token or a stop string.
    Stop,
    /// The token limit or a full context.
    Length,
}

impl FinishReason {
    pub fn name(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

impl Llama {
    /// A request's prompt tokens: `prompt` as plain text (with BOS when the model asks),
    /// or with `chat` the model's chat template around an optional system message and
    /// `prompt` as the user's turn. `special` parses control-token strings in the text.
    pub fn encode_request(
        &self,
        prompt: &str,
        chat: bool,
        system: Option<&str>,
        special: bool,
    ) -> Result<Vec<TokenId>> {
        let tokens = if chat {
            let template = self.chat_template()?;
            let mut messages = Vec::new();
            if let Some(system) = system {
                messages.push(Message::new("system", system));
            }
            messages.push(Message::new("user", prompt));
            template.encode(&self.tokenizer, &messages, true, special)?
        } else {
            if system.is_some() {
                return Err(Error::input("a system message needs chat mode (the chat template places it)"));
            }
            self.tokenizer.encode_prompt(prompt, special)?
        };
        if tokens.is_empty() {
            return Err(Error::input("the prompt is empty"));
        }
        Ok(tokens)
    }
}

/// Generated tokens as text: whole UTF-8 characters, end-of-generation tokens dropped,
/// stop strings applied (what [`Completion`] and a server's requests show).
pub struct TextOut {
    stream: TextStream,
    stops: StopStrings,
    finish: Option<FinishReason>,
}

impl TextOut {
    /// An empty stop string is an error.
    pub fn new(stops: &[String]) -> Result<TextOut> {
        Ok(TextOut { stream: TextStream::default(), stops: StopStrings::new(stops)?, finish: None })
    }

    /// The text token `id` releases (often empty: part of a character, or held back as
    /// the possible start of a stop string). After a stop string matches, the finish
    /// reason is `Stop` and nothing more is released.
    pub fn token(&mut self, tokenizer: &Tokenizer, id: TokenId) -> Result<String> {
        if self.finish.is_some() || tokenizer.ends_generation(id) {
            return Ok(String::new());
        }
        let piece = self.stream.push(&tokenizer.decode_bytes(&[id])?);
        let text = self.stops.push(&piece);
        if self.stops.stopped() {
            self.finish = Some(FinishReason::Stop);
        }
        Ok(text)
    }

    /// Ends the text because generation ended for `reason` (unless a stop string ended it
    /// first); returns what was held back.
    pub fn end(&mut self, reason: FinishReason) -> String {
        if self.finish.is_some() {
            return String::new();
        }
        self.finish = Some(reason);
        let tail = self.stream.finish();
        let mut text = self.stops.push(&tail);
        text.push_str(&self.stops.finish());
        text
    }

    /// Why the text ended (`None` while it goes on).
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }
}

/// A generation read as text, one piece at a time.
pub struct Completion {
    pub generation: Generation,
    sampler: Sampler,
    out: TextOut,
}

impl Completion {
    /// Prefills `prompt` (after what `llama`'s cache holds) and prepares to generate up
    /// to `max_new` tokens, ending at the end-of-sequence token or a stop string.
    pub fn begin(
        llama: &mut Llama,
        prompt: &[TokenId],
        max_new: usize,
        sampler: Sampler,
        stops: &[String],
    ) -> Result<Completion> {
        let out = TextOut::new(stops)?;
        let generation = llama.begin(prompt, max_new, true)?;
        Ok(Completion { generation, sampler, out })
    }

    /// The next piece of text (never empty), or `None` once the completion has ended.
    pub fn next_text(&mut self, llama: &mut Llama) -> Result<Option<String>> {
        while self.out.finish_reason().is_none() {
            let Some(id) = llama.next_token(&mut self.generation, &mut self.sampler)? else {
                let eos = self.generation.tokens.last().is_some_and(|&t| llama.tokenizer.ends_generation(t));
                let text = self.out.end(if eos { FinishReason::Stop } else { FinishReason::Length });
                return Ok(Some(text).filter(|t| !t.is_empty()));
            };
            let text = self.out.token(&llama.tokenizer, id)?;
            if !text.is_empty() {
                return Ok(Some(text));
            }
        }
        Ok(None)
    }

    /// The rest of the text at once.
    pub fn rest(&mut self, llama: &mut Llama) -> Result<String> {
        let mut text = String::new();
        while let Some(piece) = self.next_text(llama)? {
            text.push_str(&piece);
        }
        Ok(text)
    }

    /// Why it ended (`None` while it goes on).
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.out.finish_reason()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool) {
        let mut s = StopStrings::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        let mut out: Vec<String> = pieces.iter().map(|p| s.push(p)).collect();
        out.push(s.finish());
        (out, s.stopped())
    }

    #[test]
    fn stop_strings_split_across_pieces() {
        let (out, stopped) = run(&["END"], &["abc E", "N", "D more"]);
        assert_eq!(out, ["abc ", "", "", ""]);
        assert!(stopped);
        // A false start is released once it cannot match any more.
        let (out, stopped) = run(&["END"], &["EN", "x", "E"]);
        assert_eq!(out, ["", "ENx", "", "E"]);
        assert!(!stopped);
    }

    #[test]
    fn the_first_occurrence_of_any_stop_wins() {
        let (out, _) = run(&["cd", "b"], &["abcd"]);
        assert_eq!(out.concat(), "a");
        let (out, _) = run(&["ab", "abc"], &["xab"]);
        assert_eq!(out.concat(), "x");
        // Multi-byte characters: held back and split only on character boundaries.
        let (out, stopped) = run(&["é!"], &["café", "?"]);
        assert_eq!(out, ["caf", "é?", ""]);
        assert!(!stopped);
    }

    #[test]
    fn an_empty_stop_string_is_an_error() {
        let e = StopStrings::new(&["a".into(), String::new()]).unwrap_err();
        assert!(e.to_string().contains("stop string 1 is empty"), "{e}");
    }
}
