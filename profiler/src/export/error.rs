//! The exporter's errors: each names its endpoint, carries the protocol's status, and says
//! whether sending again can help.

use std::{path::PathBuf, time::Duration};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("invalid --export URL `{url}`: {reason}")]
    Url { url: String, reason: String },
    #[error("invalid export header `{header}`: {reason}")]
    Header { header: String, reason: String },
    #[error("reading {path}: {source}")]
    ReadFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the spool directory {path}: {source}")]
    Spool {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{endpoint}: setting up the client: {reason}")]
    Client { endpoint: String, reason: String },
    /// The request never got an answer (refused, reset, timed out, TLS).
    #[error("{endpoint}: {reason}")]
    Transport { endpoint: String, reason: String },
    #[error("{endpoint}: gRPC status {code:?}: {message}")]
    Grpc {
        endpoint: String,
        code: tonic::Code,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("{endpoint}: HTTP {status}{}", if .body.is_empty() { String::new() } else { format!(": {}", .body) })]
    Http {
        endpoint: String,
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    /// A Connect-protocol error (Pyroscope's Push API): its code, and the HTTP status it came
    /// with.
    #[error("{endpoint}: Connect {code} (HTTP {status}){}", if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Connect {
        endpoint: String,
        status: u16,
        code: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// A queued interval that cannot be read back as a request (a damaged spool file).
    #[error("{endpoint}: a queued interval cannot be read: {reason}")]
    Item { endpoint: String, reason: String },
    /// The store took the request but said it kept none of it.
    #[error("{endpoint}: {rejected} profiles rejected: {message}")]
    Rejected {
        endpoint: String,
        rejected: i64,
        message: String,
    },
}

impl ExportError {
    /// Whether the same request may succeed later: the store was away or asked us to slow
    /// down (gRPC codes OTLP calls retryable, HTTP 408, 429 and 5xx). Everything else (bad
    /// auth, a request the store refuses) fails the same way every time. gRPC
    /// RESOURCE_EXHAUSTED is retried when the store says when (RetryInfo), as OTLP says:
    /// without it, it is what a request over the store's size limit gets, and retrying that
    /// one would hold every later interval back forever.
    pub fn retryable(&self) -> bool {
        use tonic::Code;
        match self {
            Self::Transport { .. } => true,
            Self::Grpc {
                code: Code::ResourceExhausted,
                retry_after,
                ..
            } => retry_after.is_some(),
            Self::Grpc { code, .. } => matches!(
                code,
                Code::Unavailable
                    | Code::Cancelled
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::OutOfRange
                    | Code::DataLoss
            ),
            Self::Http { status, .. } => matches!(status, 408 | 429 | 500..=599),
            // The gRPC codes above, with the HTTP rule: resource_exhausted is Connect's 429
            // (a rate limit), always retried as a 429 is, though a server's limit on a
            // request's size answers it too; internal and unknown are its 500s.
            // unimplemented (501) fails the same way every time, like the 4xx codes.
            Self::Connect { code, .. } => matches!(
                code.as_str(),
                "unavailable"
                    | "resource_exhausted"
                    | "canceled"
                    | "deadline_exceeded"
                    | "aborted"
                    | "out_of_range"
                    | "data_loss"
                    | "internal"
                    | "unknown"
            ),
            _ => false,
        }
    }

    /// How long the store asked us to wait (HTTP Retry-After, gRPC RetryInfo).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Grpc { retry_after, .. }
            | Self::Http { retry_after, .. }
            | Self::Connect { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> ExportError {
        ExportError::Http {
            endpoint: "e".into(),
            status,
            body: String::new(),
            retry_after: None,
        }
    }

    fn grpc(code: tonic::Code) -> ExportError {
        ExportError::Grpc {
            endpoint: "e".into(),
            code,
            message: String::new(),
            retry_after: None,
        }
    }

    #[test]
    fn which_errors_are_retried() {
        for s in [429, 500, 502, 503, 504, 408] {
            assert!(http(s).retryable(), "{s}");
        }
        for s in [400, 401, 403, 404, 413] {
            assert!(!http(s).retryable(), "{s}");
        }
        assert!(grpc(tonic::Code::Unavailable).retryable());
        assert!(
            !grpc(tonic::Code::ResourceExhausted).retryable(),
            "too large"
        );
        let throttled = ExportError::Grpc {
            endpoint: "e".into(),
            code: tonic::Code::ResourceExhausted,
            message: String::new(),
            retry_after: Some(std::time::Duration::from_secs(1)),
        };
        assert!(throttled.retryable(), "throttled, with RetryInfo");
        assert!(!grpc(tonic::Code::Unauthenticated).retryable());
        assert!(!grpc(tonic::Code::InvalidArgument).retryable());
        assert_eq!(http(401).to_string(), "e: HTTP 401");
    }

    #[test]
    fn which_connect_errors_are_retried() {
        let connect = |code: &str, status: u16| ExportError::Connect {
            endpoint: "e".into(),
            status,
            code: code.into(),
            message: String::new(),
            retry_after: None,
        };
        for (code, status) in [
            ("unavailable", 503),
            ("resource_exhausted", 429),
            ("deadline_exceeded", 504),
            ("internal", 500),
            ("unknown", 500),
            ("aborted", 409),
        ] {
            assert!(connect(code, status).retryable(), "{code}");
        }
        for (code, status) in [
            ("invalid_argument", 400),
            ("unauthenticated", 401),
            ("permission_denied", 403),
            ("not_found", 404),
            ("unimplemented", 501),
            ("failed_precondition", 400),
        ] {
            assert!(!connect(code, status).retryable(), "{code}");
        }
        let mut e = connect("unauthenticated", 401);
        assert_eq!(e.to_string(), "e: Connect unauthenticated (HTTP 401)");
        if let ExportError::Connect { message, .. } = &mut e {
            *message = "no token".into();
        }
        assert_eq!(
            e.to_string(),
            "e: Connect unauthenticated (HTTP 401): no token"
        );
    }
}
