//! Chat templates. GGUF files carry a Jinja template (`tokenizer.chat_template`); RLX
//! does not embed a Jinja engine but recognizes the template families in use and renders
//! them directly. Implemented: ChatML (`<|im_start|>role\ncontent<|im_end|>\n`, SmolLM2,
//! Qwen, ...), including a default system message the template inserts when the
//! conversation does not start with one (read from the template's text).

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
}

const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

impl ChatTemplate {
    /// Recognizes the family of a Jinja template text.
    pub fn from_jinja(template: &str) -> Result<ChatTemplate> {
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
            "chat template not recognized (implemented: ChatML); it starts {:?}",
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
        let ChatTemplate::ChatMl { default_system } = self;
        let mut parts = Vec::new();
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
