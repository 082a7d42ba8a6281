//! Chat templates. GGUF files carry a Jinja template (`tokenizer.chat_template`); RLX
//! does not embed a Jinja engine but recognizes the template families in use and renders
//! them as llama.cpp's built-in templates do:
//! - ChatML (`<|im_start|>role\ncontent<|im_end|>\n`: SmolLM2, Qwen), including a default
//!   system message the template inserts when the conversation does not start with one
//!   (read from the template's text);
//! - Gemma (`<start_of_turn>role\ncontent<end_of_turn>\n`, the assistant's role named
//!   `model`, contents trimmed, system messages joined into the next user turn);
//! - Llama 3 (`<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>`, contents
//!   trimmed).
//!
//! A model without a template gets its family's (Gemma 3 GGUFs often have none); any
//! other template is an error naming the families recognized.

use crate::tokenizer::{TokenId, Tokenizer};
use rlx_ir::{Error, Result};

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.to_string(), content: content.to_string() }
    }
}

/// A recognized chat template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatTemplate {
    ChatMl { default_system: Option<String> },
    Gemma,
    Llama3,
}

const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";
const START_OF_TURN: &str = "<start_of_turn>";
const END_OF_TURN: &str = "<end_of_turn>";
const START_HEADER: &str = "<|start_header_id|>";
const END_HEADER: &str = "<|end_header_id|>";
const EOT: &str = "<|eot_id|>";

impl ChatTemplate {
    /// The template for a model: its own (`tokenizer.chat_template`) when it has one,
    /// else its family's.
    pub fn for_model(jinja: Option<&str>, arch: &str) -> Result<ChatTemplate> {
        match (jinja, arch) {
            (Some(t), _) => ChatTemplate::from_jinja(t),
            (None, "gemma3") => Ok(ChatTemplate::Gemma),
            (None, _) => Err(Error::input("the model has no chat template (tokenizer.chat_template)")),
        }
    }

    /// Recognizes the family of a Jinja template text.
    pub fn from_jinja(template: &str) -> Result<ChatTemplate> {
        if template.contains(START_OF_TURN) {
            return Ok(ChatTemplate::Gemma);
        }
        if template.contains(START_HEADER) && template.contains(END_HEADER) {
            return Ok(ChatTemplate::Llama3);
        }
        if template.contains(IM_START) && template.contains(IM_END) {
            // A literal system turn in the template is its default system message. Inside
            // a Jinja string literal the newline may be a real one or the escape `\n`.
            let default_system = ["\n", "\\n"].iter().find_map(|nl| {
                let marker = format!("{IM_START}system{nl}");
                let at = template.find(&marker)?;
                let rest = &template[at + marker.len()..];
                rest.find(IM_END).map(|end| rest[..end].replace("\\n", "\n"))
            });
            return Ok(ChatTemplate::ChatMl { default_system });
        }
        Err(Error::unsupported(format!(
            "chat template not recognized (implemented: ChatML, Gemma, Llama 3); it starts {:?}",
            template.chars().take(80).collect::<String>()
        )))
    }

    /// The prompt text for `messages`, ending with the assistant's turn opened when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> String {
        self.parts(messages, add_generation_prompt).iter().map(|p| p.text()).collect()
    }

    /// The prompt's token ids, BOS first when the file asks for it: the template's
    /// markers are control tokens, and the text between them (roles, contents) is
    /// tokenized as plain text, so a message containing `<|im_start|>` cannot open a
    /// turn. `special_in_content` parses control-token strings inside messages too
    /// (`rlx generate --special`). For messages without such strings this is exactly
    /// `tokenizer.encode_prompt(&self.render(..), true)`: each run of text between two
    /// markers is one piece, as it is in the rendered text.
    pub fn encode(
        &self,
        tokenizer: &Tokenizer,
        messages: &[Message],
        add_generation_prompt: bool,
        special_in_content: bool,
    ) -> Result<Vec<TokenId>> {
        let mut ids = tokenizer.prompt_start();
        for part in self.parts(messages, add_generation_prompt) {
            match part {
                Part::Marker(m) => ids.extend(tokenizer.encode(m, true)?),
                Part::Text(t) => ids.extend(tokenizer.encode(&t, special_in_content)?),
            }
        }
        Ok(ids)
    }

    /// The rendered prompt as markers and the text runs between them (adjacent text
    /// joined, so tokenization sees the same pieces as in the rendered string).
    fn parts(&self, messages: &[Message], add_generation_prompt: bool) -> Vec<Part> {
        let mut parts = Vec::new();
        let text = |parts: &mut Vec<Part>, t: String| match parts.last_mut() {
            Some(Part::Text(last)) => last.push_str(&t),
            _ => parts.push(Part::Text(t)),
        };
        match self {
            ChatTemplate::ChatMl { default_system } => {
                let turn = |parts: &mut Vec<Part>, role: &str, content: Option<&str>| {
                    parts.push(Part::Marker(IM_START));
                    match content {
                        Some(content) => {
                            parts.push(Part::Text(format!("{role}\n{content}")));
                            parts.push(Part::Marker(IM_END));
                            parts.push(Part::Text("\n".into()));
                        }
                        None => parts.push(Part::Text(format!("{role}\n"))),
                    }
                };
                if let Some(system) = default_system
                    && messages.first().is_some_and(|m| m.role != "system")
                {
                    turn(&mut parts, "system", Some(system));
                }
                for m in messages {
                    turn(&mut parts, &m.role, Some(&m.content));
                }
                if add_generation_prompt {
                    turn(&mut parts, "assistant", None);
                }
            }
            ChatTemplate::Gemma => {
                // System text waits for the next user turn, where it opens the content.
                let mut system = String::new();
                for m in messages {
                    if m.role == "system" {
                        system.push_str(m.content.trim());
                        continue;
                    }
                    let role = if m.role == "assistant" { "model" } else { m.role.as_str() };
                    parts.push(Part::Marker(START_OF_TURN));
                    text(&mut parts, format!("{role}\n"));
                    if !system.is_empty() && role != "model" {
                        text(&mut parts, format!("{}\n\n", std::mem::take(&mut system)));
                    }
                    text(&mut parts, m.content.trim().to_string());
                    parts.push(Part::Marker(END_OF_TURN));
                    text(&mut parts, "\n".into());
                }
                if add_generation_prompt {
                    parts.push(Part::Marker(START_OF_TURN));
                    text(&mut parts, "model\n".into());
                }
            }
            ChatTemplate::Llama3 => {
                let header = |parts: &mut Vec<Part>, role: &str| {
                    parts.push(Part::Marker(START_HEADER));
                    parts.push(Part::Text(role.to_string()));
                    parts.push(Part::Marker(END_HEADER));
                    parts.push(Part::Text("\n\n".into()));
                };
                for m in messages {
                    header(&mut parts, &m.role);
                    text(&mut parts, m.content.trim().to_string());
                    parts.push(Part::Marker(EOT));
                }
                if add_generation_prompt {
                    header(&mut parts, "assistant");
                }
            }
        }
        parts
    }
}

/// A piece of a rendered prompt.
enum Part {
    /// One of the template's own control-token strings.
    Marker(&'static str),
    /// Text between markers: roles and message contents.
    Text(String),
}

impl Part {
    fn text(&self) -> &str {
        match self {
            Part::Marker(m) => m,
            Part::Text(t) => t,
        }
    }
}
