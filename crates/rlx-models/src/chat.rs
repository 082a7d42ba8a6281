//! Chat templates. GGUF files carry a Jinja template (`tokenizer.chat_template`); RLX
//! does not embed a Jinja engine but recognizes the template families in use and renders
//! them directly. Implemented: ChatML (`<|im_start|>role\ncontent<|im_end|>\n`, SmolLM2,
//! Qwen, ...), including a default system message the template inserts when the
//! conversation does not start with one (read from the template's text).

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
        let ChatTemplate::ChatMl { default_system } = self;
        let mut out = String::new();
        if let Some(system) = default_system
            && messages.first().is_some_and(|m| m.role != "system")
        {
            out.push_str(&format!("{IM_START}system\n{system}{IM_END}\n"));
        }
        for m in messages {
            out.push_str(&format!("{IM_START}{}\n{}{IM_END}\n", m.role, m.content));
        }
        if add_generation_prompt {
            out.push_str(&format!("{IM_START}assistant\n"));
        }
        out
    }
}
