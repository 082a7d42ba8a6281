//! The one error type of RLX. Every fallible call in every crate returns [`Result`].

use std::fmt;

/// What went wrong, coarsely; the message says precisely what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Shapes that do not fit an op's rule (rank, broadcast, bounds).
    Shape,
    /// A dtype an op or call does not accept.
    DType,
    /// A malformed graph: unknown node, bad structure, duplicate names.
    Graph,
    /// A bad run-time input or param: unknown name, wrong length, bad value.
    Input,
    /// A malformed document or file (JSON, .npy, ...).
    Parse,
    /// Operating-system I/O.
    Io,
    /// Valid, but not supported by this backend or build.
    Unsupported,
    /// A data-dependent failure while running (an index out of range, ...).
    Runtime,
    /// A broken internal invariant: a bug in RLX, never the user's fault.
    Internal,
}

impl ErrorKind {
    fn label(self) -> &'static str {
        match self {
            ErrorKind::Shape => "shape error",
            ErrorKind::DType => "dtype error",
            ErrorKind::Graph => "graph error",
            ErrorKind::Input => "input error",
            ErrorKind::Parse => "parse error",
            ErrorKind::Io => "i/o error",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Runtime => "runtime error",
            ErrorKind::Internal => "internal error",
        }
    }
}

/// An error whose message names the op, node or tensor at fault and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }
    pub fn shape(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Shape, message)
    }
    pub fn dtype(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::DType, message)
    }
    pub fn graph(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Graph, message)
    }
    pub fn input(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Input, message)
    }
    pub fn parse(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Parse, message)
    }
    pub fn io(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Io, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unsupported, message)
    }
    pub fn runtime(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Runtime, message)
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` prepended ("while X: <message>").
    pub fn context(self, context: impl fmt::Display) -> Error {
        Error { kind: self.kind, message: format!("{context}: {}", self.message) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.label(), self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::io(e.to_string())
    }
}

/// Returns early with an error of the given kind and a formatted message.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $($fmt:tt)+) => {
        return Err($crate::Error::$kind(format!($($fmt)+)))
    };
}
