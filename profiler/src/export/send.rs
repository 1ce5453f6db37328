//! Sending one request to one store: OTLP over gRPC (tonic) or HTTP (reqwest, protobuf,
//! gzip), or a pprof upload to Pyroscope's `/ingest` or its Push API (Connect over HTTP/1.1).
//! Each answer becomes `Ok(bytes sent)` or an [`ExportError`] that knows whether to try again.

use std::{io::Write as _, time::Duration};

use bytes::{Buf as _, BufMut as _};
use flate2::{Compression, write::GzEncoder};
use prost::Message as _;
use tonic::{
    codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder},
    codegen::http::uri::PathAndQuery,
    metadata::{MetadataKey, MetadataValue},
    transport::{Certificate, Channel, ClientTlsConfig},
};

use super::{
    Endpoint, ExportError, Notice, Protocol, otlp_proto::ExportProfilesServiceResponse, push,
    retry, spool::Item,
};

/// How long one request may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
const EXPORT_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

pub enum Client {
    Grpc {
        endpoint: Endpoint,
        grpc: tonic::client::Grpc<Channel>,
        headers: Vec<(
            MetadataKey<tonic::metadata::Ascii>,
            MetadataValue<tonic::metadata::Ascii>,
        )>,
    },
    Http {
        endpoint: Endpoint,
        http: reqwest::Client,
        headers: reqwest::header::HeaderMap,
        /// The labels of an interval an earlier version spooled as a bare pprof file.
        legacy: Vec<push::LabelPair>,
        /// `/ingest`: the interval (its sequence number) whose first uploads (how many, and
        /// their bytes) the store took before one failed: a retry sends only the rest.
        ingested: Option<(u64, usize, u64)>,
    },
}

/// The CA certificates to trust instead of the system's, PEM.
pub type CaPem = Option<Vec<u8>>;

impl Client {
    /// A client for `endpoint`; connects lazily (a store that is down now is not an error
    /// here). Must be called inside a tokio runtime. `legacy_name` is the application of
    /// Pyroscope intervals an earlier version spooled without one.
    pub fn new(
        endpoint: &Endpoint,
        headers: &[(String, String)],
        ca: &CaPem,
        legacy_name: &str,
        host_name: &str,
    ) -> Result<Self, ExportError> {
        let client_err = |reason: String| ExportError::Client {
            endpoint: endpoint.url.clone(),
            reason,
        };
        match endpoint.protocol {
            Protocol::OtlpGrpc => {
                let mut ch = Channel::from_shared(endpoint.base.clone())
                    .map_err(|e| client_err(e.to_string()))?
                    .connect_timeout(REQUEST_TIMEOUT)
                    .timeout(REQUEST_TIMEOUT);
                if endpoint.tls {
                    let tls = match ca {
                        Some(pem) => {
                            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
                        }
                        None => ClientTlsConfig::new().with_native_roots(),
                    };
                    ch = ch.tls_config(tls).map_err(|e| client_err(e.to_string()))?;
                }
                let grpc = tonic::client::Grpc::new(ch.connect_lazy())
                    .send_compressed(CompressionEncoding::Gzip)
                    .accept_compressed(CompressionEncoding::Gzip);
                let headers = headers
                    .iter()
                    .map(|(k, v)| {
                        let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                            .map_err(|e| client_err(format!("header {k}: {e}")))?;
                        let value = MetadataValue::try_from(v.as_str())
                            .map_err(|e| client_err(format!("header {k}: {e}")))?;
                        Ok((key, value))
                    })
                    .collect::<Result<_, ExportError>>()?;
                Ok(Self::Grpc {
                    endpoint: endpoint.clone(),
                    grpc,
                    headers,
                })
            }
            Protocol::OtlpHttp | Protocol::Pyroscope | Protocol::PyroscopePush => {
                let mut b = reqwest::Client::builder()
                    .no_proxy()
                    .timeout(REQUEST_TIMEOUT)
                    .connect_timeout(REQUEST_TIMEOUT)
                    .use_rustls_tls();
                if let Some(pem) = ca {
                    let certs = reqwest::Certificate::from_pem_bundle(pem)
                        .map_err(|e| client_err(format!("the CA file: {e}")))?;
                    b = b.tls_built_in_root_certs(false);
                    for c in certs {
                        b = b.add_root_certificate(c);
                    }
                }
                let http = b.build().map_err(|e| client_err(e.to_string()))?;
                let mut map = reqwest::header::HeaderMap::new();
                for (k, v) in headers {
                    let key = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| client_err(format!("header {k}: {e}")))?;
                    let value = reqwest::header::HeaderValue::from_str(v)
                        .map_err(|e| client_err(format!("header {k}: {e}")))?;
                    map.insert(key, value);
                }
                Ok(Self::Http {
                    endpoint: endpoint.clone(),
                    http,
                    headers: map,
                    legacy: push::labels(legacy_name, host_name),
                    ingested: None,
                })
            }
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        match self {
            Self::Grpc { endpoint, .. } | Self::Http { endpoint, .. } => endpoint,
        }
    }

    /// Sends one interval: the body bytes sent, and what the store said it did not keep.
    pub async fn send(&mut self, item: &Item) -> Result<(u64, Option<Notice>), ExportError> {
        match self {
            Self::Grpc {
                endpoint,
                grpc,
                headers,
            } => send_grpc(endpoint, grpc, headers, item).await,
            Self::Http {
                endpoint,
                http,
                headers,
                legacy,
                ingested,
            } => match endpoint.protocol {
                Protocol::Pyroscope => {
                    ingest(endpoint, http, headers, legacy, ingested, item).await
                }
                Protocol::PyroscopePush => {
                    // Queued as the request itself (or, spooled by an earlier version, as
                    // the bare pprof file).
                    let body = match item.body.starts_with(&[0x1f, 0x8b]) {
                        true => push::request(&[(legacy.clone(), item.body.clone())]),
                        false => item.body.clone(),
                    };
                    let len = body.len() as u64;
                    let request = http
                        .post(format!("{}{}", endpoint.base, push::PUSH_PATH))
                        .header("content-type", "application/proto")
                        .header("connect-protocol-version", "1")
                        .header(
                            "connect-timeout-ms",
                            REQUEST_TIMEOUT.as_millis().to_string(),
                        )
                        .body(body);
                    exchange(endpoint, request.headers(headers.clone())).await?;
                    Ok((len, None))
                }
                _ => {
                    let body = gzip(&item.body);
                    let len = body.len() as u64;
                    let request = http
                        .post(format!("{}/v1development/profiles", endpoint.base))
                        .header("content-type", "application/x-protobuf")
                        .header("content-encoding", "gzip")
                        .body(body);
                    let answer = exchange(endpoint, request.headers(headers.clone())).await?;
                    Ok((len, partial_success(endpoint, &answer)))
                }
            },
        }
    }
}

/// `/ingest`: one upload per application of the interval, named `service{hostname=h}`,
/// those the store already took (before a failure) not sent again.
async fn ingest(
    endpoint: &Endpoint,
    http: &reqwest::Client,
    headers: &reqwest::header::HeaderMap,
    legacy: &[push::LabelPair],
    ingested: &mut Option<(u64, usize, u64)>,
    item: &Item,
) -> Result<(u64, Option<Notice>), ExportError> {
    let request = push::queued(&item.body, legacy).map_err(|e| ExportError::Item {
        endpoint: endpoint.url.clone(),
        reason: e.to_string(),
    })?;
    let (mut done, mut sent) = match *ingested {
        Some((seq, done, sent)) if seq == item.seq => (done, sent),
        _ => (0, 0),
    };
    let label = |text: &str| text.replace([',', '}', '{', '='], "_");
    for series in &request.series[done.min(request.series.len())..] {
        let name = format!(
            "{}{{hostname={}}}",
            label(series.label("service_name")),
            label(series.label("hostname"))
        );
        for sample in &series.samples {
            let (body, boundary) = multipart(&sample.raw_profile);
            let len = body.len() as u64;
            let r = http
                .post(format!("{}/ingest", endpoint.base))
                .query(&[
                    ("name", name.as_str()),
                    ("from", &item.from.to_string()),
                    ("until", &item.until.to_string()),
                    ("format", "pprof"),
                    ("spyName", "profiler"),
                    ("sampleRate", &item.rate.to_string()),
                ])
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={boundary}"),
                )
                .body(body);
            exchange(endpoint, r.headers(headers.clone())).await?;
            sent += len;
        }
        done += 1;
        *ingested = Some((item.seq, done, sent));
    }
    *ingested = None;
    Ok((sent, None))
}

/// Sends one HTTP request: the answer's body when the store took it, else the error its
/// status (and body) make.
async fn exchange(
    endpoint: &Endpoint,
    request: reqwest::RequestBuilder,
) -> Result<bytes::Bytes, ExportError> {
    let response = request
        .send()
        .await
        .map_err(|e| transport_error(&endpoint.url, &e))?;
    let status = response.status();
    let protobuf = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/x-protobuf"));
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(retry::parse_retry_after);
    let body = response
        .bytes()
        .await
        .map_err(|e| transport_error(&endpoint.url, &e))?;
    if status.is_success() {
        return Ok(body);
    }
    // A Connect error is JSON with its code; one without (a proxy's 502 page) is an HTTP
    // error like any other.
    if endpoint.protocol == Protocol::PyroscopePush
        && let Some((code, message)) = push::connect_error(&body)
    {
        return Err(ExportError::Connect {
            endpoint: endpoint.url.clone(),
            status: status.as_u16(),
            code,
            message,
            retry_after,
        });
    }
    // OTLP/HTTP explains a failure in a google.rpc.Status message.
    let message = protobuf
        .then(|| RpcStatus::decode(body.as_ref()).ok())
        .flatten()
        .map(|s| s.message)
        .filter(|m| !m.is_empty());
    Err(ExportError::Http {
        endpoint: endpoint.url.clone(),
        status: status.as_u16(),
        body: message.unwrap_or_else(|| printable(&body)),
        retry_after,
    })
}

async fn send_grpc(
    endpoint: &Endpoint,
    grpc: &mut tonic::client::Grpc<Channel>,
    headers: &[(
        MetadataKey<tonic::metadata::Ascii>,
        MetadataValue<tonic::metadata::Ascii>,
    )],
    item: &Item,
) -> Result<(u64, Option<Notice>), ExportError> {
    let status_error = |s: tonic::Status| grpc_error(&endpoint.url, s);
    grpc.ready().await.map_err(|e| ExportError::Transport {
        endpoint: endpoint.url.clone(),
        reason: e.to_string(),
    })?;
    let mut request = tonic::Request::new(item.body.clone());
    for (k, v) in headers {
        request.metadata_mut().insert(k.clone(), v.clone());
    }
    let response = grpc
        .unary(request, PathAndQuery::from_static(EXPORT_PATH), RawCodec)
        .await
        .map_err(status_error)?;
    let partial = partial_success(endpoint, &response.into_inner());
    // The body as compressed on the wire is not visible through tonic: report what gzip
    // makes of it, the same compression tonic applies.
    Ok((gzip(&item.body).len() as u64, partial))
}

/// The error of a failed gRPC call. A status tonic makes up for a connection that broke
/// mid-request (the store killed, a reset) is Unknown with the transport error as its
/// source: no answer came from the store, so it is a transport failure (retried), not the
/// store's own Unknown.
fn grpc_error(endpoint: &str, s: tonic::Status) -> ExportError {
    if let (tonic::Code::Unknown, Some(source)) = (s.code(), std::error::Error::source(&s)) {
        return ExportError::Transport {
            endpoint: endpoint.to_string(),
            reason: format!("{}: {source}", s.message()),
        };
    }
    ExportError::Grpc {
        endpoint: endpoint.to_string(),
        code: s.code(),
        message: s.message().to_string(),
        retry_after: retry_info(s.details()),
    }
}

/// An OTLP response that says every profile was rejected is an error (not retried); one
/// that rejected some or carries a warning is printed and counts as sent.
fn partial_success(endpoint: &Endpoint, body: &[u8]) -> Option<Notice> {
    let p = ExportProfilesServiceResponse::decode(body)
        .ok()?
        .partial_success?;
    (p.rejected_profiles > 0 || !p.error_message.is_empty()).then(|| Notice::Rejected {
        url: endpoint.url.clone(),
        profiles: p.rejected_profiles,
        message: p.error_message,
    })
}

fn transport_error(endpoint: &str, e: &reqwest::Error) -> ExportError {
    // reqwest's Display omits the cause ("error sending request"): add the chain.
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        reason.push_str(&format!(": {s}"));
        source = s.source();
    }
    ExportError::Transport {
        endpoint: endpoint.to_string(),
        reason,
    }
}

/// At most a line of a response body, for the error message.
fn printable(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect()
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(bytes).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// A `multipart/form-data` body with the pprof file in field `profile`, as Pyroscope's own
/// agents upload it, and its boundary.
fn multipart(pprof: &[u8]) -> (Vec<u8>, String) {
    let boundary = "profiler-pprof-3f9a1c0b7e5d4a2b".to_string();
    let mut body = Vec::with_capacity(pprof.len() + 256);
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(pprof);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (body, boundary)
}

/// `google.rpc.Status`: an OTLP/HTTP error body, and a gRPC error's details (for their
/// `google.rpc.RetryInfo`).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<RpcAny>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RpcAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<RpcDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RpcDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The delay a gRPC error's RetryInfo asks for (OTLP's throttling signal).
fn retry_info(details: &[u8]) -> Option<Duration> {
    let status = RpcStatus::decode(details).ok()?;
    status.details.iter().find_map(|d| {
        if !d.type_url.ends_with("google.rpc.RetryInfo") {
            return None;
        }
        let d = RetryInfo::decode(d.value.as_slice()).ok()?.retry_delay?;
        Some(Duration::new(
            d.seconds.max(0) as u64,
            d.nanos.max(0) as u32,
        ))
    })
}

/// A codec that sends already-encoded protobuf bytes and hands back the response's.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        *self
    }

    fn decoder(&mut self) -> Self::Decoder {
        *self
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Self::Error> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_is_a_transport_failure_and_the_stores_unknown_is_not() {
        // What tonic returns when the connection breaks mid-call: Unknown, with a source.
        let broken = tonic::Status::from_error(Box::new(std::io::Error::other("reset")));
        assert_eq!(broken.code(), tonic::Code::Unknown);
        let e = grpc_error("otlp+grpc://h:4317", broken);
        assert!(matches!(e, ExportError::Transport { .. }), "{e}");
        assert!(e.retryable());
        // An Unknown the store itself answered has no source: not retried.
        let answered = grpc_error("otlp+grpc://h:4317", tonic::Status::unknown("boom"));
        assert!(matches!(answered, ExportError::Grpc { .. }), "{answered}");
        assert!(!answered.retryable());
    }

    #[test]
    fn retry_info_in_status_details() {
        let details = RpcStatus {
            message: String::new(),
            details: vec![RpcAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: RetryInfo {
                    retry_delay: Some(RpcDuration {
                        seconds: 2,
                        nanos: 500_000_000,
                    }),
                }
                .encode_to_vec(),
            }],
        }
        .encode_to_vec();
        assert_eq!(retry_info(&details), Some(Duration::from_millis(2500)));
        assert_eq!(retry_info(b""), None);
    }

    /// Serves one canned HTTP answer per connection; hands back what each request was.
    fn one_answer_per_request(
        answers: Vec<&'static str>,
    ) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        use std::io::{BufRead as _, BufReader, Read as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            answers
                .into_iter()
                .map(|answer| {
                    let (mut conn, _) = listener.accept().unwrap();
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        reader.read_line(&mut line).unwrap();
                        if line == "\r\n" {
                            break;
                        }
                        head.push_str(&line.to_ascii_lowercase());
                    }
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.trim().parse().unwrap());
                    let mut body = vec![0; len];
                    reader.read_exact(&mut body).unwrap();
                    conn.write_all(answer.as_bytes()).unwrap();
                    head
                })
                .collect()
        });
        (port, server)
    }

    #[test]
    fn push_answers_become_connect_errors_or_http_ones() {
        let answers = vec![
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: application/proto\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: application/json\r\nretry-after: 2\r\ncontent-length: 43\r\n\r\n{\"code\":\"unavailable\",\"message\":\"ingester\"}",
            "HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 26\r\n\r\n{\"code\":\"unauthenticated\"}",
            "HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\ncontent-type: text/html\r\ncontent-length: 11\r\n\r\nbad gateway",
        ];
        let (port, server) = one_answer_per_request(answers);
        let endpoint = Endpoint::parse(&format!("pyroscope+connect://127.0.0.1:{port}")).unwrap();
        let item = Item {
            seq: 1,
            from: 1,
            until: 2,
            rate: 99,
            body: b"\x1f\x8bpprof".to_vec(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let results: Vec<_> = runtime.block_on(async {
            let headers = [("X-Scope-OrgID".to_string(), "t1".to_string())];
            let mut client = Client::new(&endpoint, &headers, &None, "svc", "h1").unwrap();
            let mut out = Vec::new();
            for _ in 0..4 {
                // (bytes sent, whether the store added a notice)
                out.push(
                    client
                        .send(&item)
                        .await
                        .map(|(n, notice)| (n, notice.is_some())),
                );
            }
            out
        });
        let requests = server.join().unwrap();
        for head in &requests {
            assert!(
                head.starts_with("post /push.v1.pusherservice/push http/1.1\r\n"),
                "{head}"
            );
            for h in [
                "content-type: application/proto",
                "connect-protocol-version: 1",
                "connect-timeout-ms: 5000",
                "x-scope-orgid: t1",
            ] {
                assert!(head.contains(h), "{h}: {head}");
            }
        }
        // A bare pprof file (as an earlier version spooled it) goes under the legacy labels.
        let want = push::request(&[(push::labels("svc", "h1"), item.body.clone())]).len() as u64;
        assert!(
            matches!(results[0], Ok((n, false)) if n == want),
            "{:?}",
            results[0]
        );
        match &results[1] {
            Err(
                e @ ExportError::Connect {
                    status: 503,
                    code,
                    retry_after: Some(d),
                    ..
                },
            ) if code == "unavailable" && *d == Duration::from_secs(2) => {
                assert!(e.retryable());
                assert!(
                    e.to_string()
                        .ends_with("Connect unavailable (HTTP 503): ingester")
                );
            }
            other => panic!("{other:?}"),
        }
        match &results[2] {
            Err(e @ ExportError::Connect { status: 401, .. }) => assert!(!e.retryable()),
            other => panic!("{other:?}"),
        }
        // A proxy's page has no Connect code: an HTTP error, retried as a 5xx.
        match &results[3] {
            Err(e @ ExportError::Http { status: 502, .. }) => assert!(e.retryable()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ingest_uploads_each_application_and_a_retry_only_those_not_taken() {
        let ok = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let busy = "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 4\r\n\r\nbusy";
        let (port, server) = one_answer_per_request(vec![ok, busy, ok]);
        let endpoint = Endpoint::parse(&format!("pyroscope+http://127.0.0.1:{port}")).unwrap();
        let item = Item {
            seq: 7,
            from: 1,
            until: 2,
            rate: 99,
            body: push::request(&[
                (push::labels("checkout", "h1"), b"\x1f\x8bone".to_vec()),
                (push::labels("a{b}=c,d", "h1"), b"\x1f\x8btwo".to_vec()),
            ]),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (first, second) = runtime.block_on(async {
            let mut client = Client::new(&endpoint, &[], &None, "svc", "h1").unwrap();
            let first = client.send(&item).await;
            let second = client.send(&item).await;
            (first, second)
        });
        let requests = server.join().unwrap();
        assert!(
            matches!(&first, Err(e @ ExportError::Http { status: 503, .. }) if e.retryable()),
            "{first:?}"
        );
        let names: Vec<&str> = requests
            .iter()
            .map(|h| {
                let q = h.lines().next().unwrap();
                let q = &q[q.find("name=").unwrap() + 5..];
                &q[..q.find('&').unwrap()]
            })
            .collect();
        assert_eq!(
            names,
            [
                "checkout%7bhostname%3dh1%7d",
                "a_b__c_d%7bhostname%3dh1%7d",
                "a_b__c_d%7bhostname%3dh1%7d"
            ],
            "the second application again, not the first"
        );
        let one = multipart(b"\x1f\x8bone").0.len() + multipart(b"\x1f\x8btwo").0.len();
        assert!(
            matches!(second, Ok((n, None)) if n == one as u64),
            "{second:?}"
        );
    }

    #[test]
    fn the_multipart_body_carries_the_file_whole() {
        let (body, boundary) = multipart(b"\x1f\x8bPPROF");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.contains("name=\"profile\""));
        assert!(text.contains("\r\n\r\n\u{1f}\u{fffd}PPROF\r\n"));
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
    }
}
