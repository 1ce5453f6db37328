//! libcpc's errors: an errno plus, where libcpc has one, a subcode for the error handler.

use std::{borrow::Cow, fmt, sync::Arc};

/// libcpc's error subcodes (values from libcpc.h; 10 and 11 are not in the man page).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Subcode {
    InvalidEvent = 1,
    InvalidPicnum = 2,
    InvalidAttribute = 3,
    AttributeOutOfRange = 4,
    ResourceUnavail = 5,
    PicNotCapable = 6,
    ReqInvalidFlags = 7,
    ConflictingReqs = 8,
    AttrRequiresPrivilege = 9,
    PbindFailed = 10,
    HvNoAccess = 11,
}

impl Subcode {
    /// libcpc's own text for the subcode.
    pub fn text(self) -> &'static str {
        match self {
            Subcode::InvalidEvent => "Unknown event",
            Subcode::InvalidPicnum => "Invalid counter number",
            Subcode::InvalidAttribute => "Unknown attribute",
            Subcode::AttributeOutOfRange => "Attribute out of range",
            Subcode::ResourceUnavail => "Hardware resources unavailable",
            Subcode::PicNotCapable => "Counter cannot count requested event",
            Subcode::ReqInvalidFlags => "Invalid flags in a request",
            Subcode::ConflictingReqs => "Requests conflict with each other",
            Subcode::AttrRequiresPrivilege => "Attribute requires the cpc_cpu privilege",
            Subcode::PbindFailed => "Couldn't bind LWP to requested processor",
            Subcode::HvNoAccess => "Hypervisor event access denied",
        }
    }
}

/// An error of a libcpc function: which function, the errno libcpc would set, the subcode
/// (if libcpc reports one) and a message with the specifics. A static message costs no
/// allocation, which the signal-handler paths (`set_restart`, `request_preset`) rely on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpcError {
    pub func: &'static str,
    pub errno: i32,
    pub subcode: Option<Subcode>,
    pub message: Cow<'static, str>,
}

impl CpcError {
    pub fn new(func: &'static str, errno: i32, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            func,
            errno,
            subcode: None,
            message: message.into(),
        }
    }

    pub fn with_subcode(
        func: &'static str,
        errno: i32,
        subcode: Subcode,
        detail: impl fmt::Display,
    ) -> Self {
        let detail = detail.to_string();
        let message = if detail.is_empty() {
            Cow::Borrowed(subcode.text())
        } else {
            Cow::Owned(format!("{}: {detail}", subcode.text()))
        };
        Self {
            func,
            errno,
            subcode: Some(subcode),
            message,
        }
    }

    /// The errno as an `io::Error` (its name and text).
    pub fn os_error(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }
}

impl fmt::Display for CpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.func, self.message)
    }
}

impl std::error::Error for CpcError {}

/// The error handler: called with (function, subcode, message) for errors that carry a
/// subcode, as libcpc calls its handler. The default prints `libcpc: <fn>: <text>` to stderr.
pub type ErrorHandler = Arc<dyn Fn(&str, i32, &str) + Send + Sync>;

pub(crate) fn default_handler() -> ErrorHandler {
    // The one print in the library crates, on purpose: cpc_seterrhndlr(3CPC) specifies that
    // the default handler writes the message to stderr; callers replace it to do otherwise.
    Arc::new(|func, _subcode, msg| eprintln!("libcpc: {func}: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subcode_values_are_libcpcs() {
        let all = [
            (Subcode::InvalidEvent, 1),
            (Subcode::InvalidPicnum, 2),
            (Subcode::InvalidAttribute, 3),
            (Subcode::AttributeOutOfRange, 4),
            (Subcode::ResourceUnavail, 5),
            (Subcode::PicNotCapable, 6),
            (Subcode::ReqInvalidFlags, 7),
            (Subcode::ConflictingReqs, 8),
            (Subcode::AttrRequiresPrivilege, 9),
            (Subcode::PbindFailed, 10),
            (Subcode::HvNoAccess, 11),
        ];
        for (s, v) in all {
            assert_eq!(s as i32, v);
        }
    }

    #[test]
    fn message_has_libcpc_text_and_detail() {
        let e = CpcError::with_subcode(
            "cpc_set_add_request",
            libc::EINVAL,
            Subcode::InvalidEvent,
            "'cyles'",
        );
        assert_eq!(e.to_string(), "cpc_set_add_request: Unknown event: 'cyles'");
        assert_eq!(e.errno, libc::EINVAL);
    }
}
