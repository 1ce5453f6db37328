//! Pyroscope's Push API (`push.v1.PusherService/Push`), what Grafana Alloy's
//! `pyroscope.write` sends: a Connect-protocol unary call whose body is a
//! `push.v1.PushRequest` holding an interval's pprof files (gzipped, as written), one series
//! per application, each under its labels. The same request is what a Pyroscope destination
//! spools and queues: `/ingest` sends each of its series as one upload. Field numbers are those
//! of grafana/pyroscope's `api/push/v1/push.proto` and `api/types/v1/types.proto`; the tests
//! decode what is sent with Google's protobuf runtime from a schema declared there, so a
//! wrong number fails there.

use std::hash::{Hash as _, Hasher as _};

use prost::Message as _;

/// The Connect procedure's path.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// `push.v1.PushRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

/// `push.v1.RawProfileSeries`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

/// `types.v1.LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `push.v1.RawSample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    pub id: String,
}

/// The series labels of one application's profile: the profile type's name (`process_cpu`,
/// the name Pyroscope's eBPF agents use), `service_name` (the application), `hostname` (the
/// labels `/ingest`'s `service{hostname=h}` makes), and `__delta__=false`: each interval
/// already holds only its own samples, so the store must not difference it against the
/// previous one. The per-process labels (`pid`, `comm`, `cgroup`, ...) are per sample inside
/// the pprof, as on `/ingest`.
pub fn labels(service_name: &str, host_name: &str) -> Vec<LabelPair> {
    [
        ("__name__", "process_cpu"),
        ("__delta__", "false"),
        ("service_name", service_name),
        ("hostname", host_name),
    ]
    .into_iter()
    .map(|(name, value)| LabelPair {
        name: name.into(),
        value: value.into(),
    })
    .collect()
}

/// The encoded request of one interval: a series per (labels, pprof file), each file with
/// its ID.
pub fn request(series: &[(Vec<LabelPair>, Vec<u8>)]) -> Vec<u8> {
    PushRequest {
        series: series
            .iter()
            .map(|(labels, pprof)| RawProfileSeries {
                labels: labels.clone(),
                samples: vec![RawSample {
                    raw_profile: pprof.clone(),
                    id: profile_id(pprof),
                }],
            })
            .collect(),
    }
    .encode_to_vec()
}

/// The request a Pyroscope destination's queued interval is. An interval spooled by a
/// version that spooled the pprof file itself (gzip's magic first, where a request starts
/// with its field 1, 0x0a) becomes a request of that file under `legacy` labels.
pub fn queued(body: &[u8], legacy: &[LabelPair]) -> Result<PushRequest, prost::DecodeError> {
    if body.starts_with(&[0x1f, 0x8b]) {
        return PushRequest::decode(request(&[(legacy.to_vec(), body.to_vec())]).as_slice());
    }
    PushRequest::decode(body)
}

impl RawProfileSeries {
    /// The value of the label `name` ("" without it).
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .iter()
            .find(|l| l.name == name)
            .map_or("", |l| l.value.as_str())
    }
}

/// The profile's ID, a UUID (the form Pyroscope stores IDs in) made from the file's bytes,
/// so a retried interval carries the ID it had the first time.
fn profile_id(pprof: &[u8]) -> String {
    let half = |salt: u8| {
        // SipHash with fixed keys: the same bytes give the same value in every run of a build.
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        pprof.hash(&mut h);
        h.finish()
    };
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&half(0).to_be_bytes());
    b[8..].copy_from_slice(&half(1).to_be_bytes());
    // Version 4 and the RFC 4122 variant, so a strict parser takes it.
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// A Connect error body (`{"code": "unavailable", "message": "..."}`), when the answer is one.
pub fn connect_error(body: &[u8]) -> Option<(String, String)> {
    #[derive(serde::Deserialize)]
    struct Body {
        code: String,
        #[serde(default)]
        message: String,
    }
    let b: Body = serde_json::from_slice(body).ok()?;
    Some((b.code, b.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_request_holds_each_file_under_its_labels() {
        let body = request(&[
            (labels("checkout", "vm1"), b"\x1f\x8bpprof".to_vec()),
            (labels("batch", "vm1"), b"\x1f\x8bother".to_vec()),
        ]);
        let back = PushRequest::decode(body.as_slice()).unwrap();
        assert_eq!(back.series.len(), 2);
        let s = &back.series[0];
        let pairs: Vec<(&str, &str)> = s
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("__name__", "process_cpu"),
                ("__delta__", "false"),
                ("service_name", "checkout"),
                ("hostname", "vm1")
            ]
        );
        assert_eq!(s.samples.len(), 1);
        assert_eq!(s.samples[0].raw_profile, b"\x1f\x8bpprof");
        assert_eq!(back.series[1].label("service_name"), "batch");
        assert_eq!(back.series[1].label("nope"), "");
        assert_ne!(s.samples[0].id, back.series[1].samples[0].id);
        // The wire form of the first field: series (1, length-delimited).
        assert_eq!(body[0], 0x0a);
        // Queued as is; a file spooled alone by an earlier version gets the legacy labels.
        assert_eq!(queued(&body, &[]).unwrap(), back);
        let old = queued(b"\x1f\x8bpprof", &labels("profiler", "vm1")).unwrap();
        assert_eq!(old.series.len(), 1);
        assert_eq!(old.series[0].label("service_name"), "profiler");
        assert_eq!(old.series[0].samples[0], s.samples[0]);
        assert!(queued(b"\x0a\xff", &[]).is_err());
    }

    #[test]
    fn the_id_is_a_uuid_fixed_by_the_bytes() {
        let a = profile_id(b"one");
        assert_eq!(a, profile_id(b"one"));
        assert_ne!(a, profile_id(b"two"));
        let parts: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12], "{a}");
        assert_eq!(&a[14..15], "4", "{a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }

    #[test]
    fn connect_errors_are_read_from_their_json() {
        assert_eq!(
            connect_error(br#"{"code":"unavailable","message":"ingester down"}"#),
            Some(("unavailable".into(), "ingester down".into()))
        );
        assert_eq!(
            connect_error(br#"{"code":"unauthenticated"}"#),
            Some(("unauthenticated".into(), String::new()))
        );
        assert_eq!(connect_error(b"<html>502 Bad Gateway</html>"), None);
    }
}
