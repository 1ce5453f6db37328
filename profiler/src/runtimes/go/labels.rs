//! Reading a goroutine's label set from the process's memory, from the two words the kernel
//! wrote (`profiler_common::golabels`): a `map[string]string` (Go 1.16-1.23, walked as
//! `runtime/map.go` lays it out) or the sorted slice of Go 1.24+.

use crate::runtimes::shared::memory::{Memory, ReadError};

use super::offsets::LabelsKind;

/// Most labels a sample keeps (the first by key).
pub const MAX_LABELS: usize = 16;
/// Longest key and value kept, in bytes (cut at a character boundary).
pub const MAX_KEY: usize = 128;
pub const MAX_VALUE: usize = 256;

/// Buckets a map is read through at most (2^6; a label map of more than 400 labels is cut).
const MAX_BUCKETS_LOG2: u8 = 6;
/// Overflow buckets followed per bucket.
const MAX_OVERFLOW: usize = 4;

// `runtime.hmap` and a `map[string]string` bucket (`bmap`): 8 slots of tophash, keys,
// elems, then the overflow pointer.
const HMAP_FLAGS: u64 = 8;
const HMAP_B: u64 = 9;
const HMAP_BUCKETS: u64 = 16;
const HMAP_OLDBUCKETS: u64 = 24;
const SAME_SIZE_GROW: u8 = 8;
const BUCKET_BYTES: usize = 272;
const BUCKET_KEYS: usize = 8;
const BUCKET_ELEMS: usize = 136;
const BUCKET_OVERFLOW: usize = 264;
/// tophash values below this mark an empty or evacuated slot.
const MIN_TOP_HASH: u8 = 5;
/// A `label{key, value string}` of Go 1.24+.
const SLICE_LABEL_BYTES: usize = 32;

/// A goroutine's labels, sorted by key, and whether any was cut.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Read {
    pub pairs: Vec<(String, String)>,
    pub cut: bool,
}

/// The label set at `labels` (the `*labelMap`) whose first word is `first`.
pub fn read(
    mem: &dyn Memory,
    kind: LabelsKind,
    labels: u64,
    first: u64,
) -> Result<Read, ReadError> {
    let mut out = Read::default();
    let mut raw = Vec::new();
    match kind {
        LabelsKind::Map => read_map(mem, first, &mut raw, &mut out.cut)?,
        LabelsKind::Slice => {
            let len = mem.read_u64(labels + 8)?;
            if len > 1 << 16 {
                return Err(ReadError::invalid(
                    "Go label slice",
                    labels,
                    "implausible length",
                ));
            }
            let n = (len as usize).min(MAX_LABELS);
            out.cut |= n < len as usize;
            let mut bytes = vec![0u8; n * SLICE_LABEL_BYTES];
            mem.read(first, &mut bytes)?;
            for l in bytes.chunks_exact(SLICE_LABEL_BYTES) {
                raw.push((string_header(l, 0), string_header(l, 16)));
            }
        }
    }
    for ((kp, kl), (vp, vl)) in raw {
        let key = string(mem, kp, kl, MAX_KEY, &mut out.cut)?;
        let value = string(mem, vp, vl, MAX_VALUE, &mut out.cut)?;
        if !key.is_empty() && !out.pairs.iter().any(|(k, _)| *k == key) {
            out.pairs.push((key, value));
        }
    }
    out.pairs.sort();
    if out.pairs.len() > MAX_LABELS {
        out.pairs.truncate(MAX_LABELS);
        out.cut = true;
    }
    Ok(out)
}

type Header = (u64, u64);

/// The (pointer, length) string header at `at` of `bytes`.
fn string_header(bytes: &[u8], at: usize) -> Header {
    let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    (word(at), word(at + 8))
}

/// Every full slot of the map at `hmap`: its buckets and, mid-growth, the old buckets not
/// yet moved (each entry is in exactly one of them).
fn read_map(
    mem: &dyn Memory,
    hmap: u64,
    out: &mut Vec<(Header, Header)>,
    cut: &mut bool,
) -> Result<(), ReadError> {
    let mut head = [0u8; 32];
    mem.read(hmap, &mut head)?;
    let (flags, b) = (head[HMAP_FLAGS as usize], head[HMAP_B as usize]);
    let word = |at: u64| u64::from_le_bytes(head[at as usize..at as usize + 8].try_into().unwrap());
    let (buckets, old) = (word(HMAP_BUCKETS), word(HMAP_OLDBUCKETS));
    let old_b = if flags & SAME_SIZE_GROW != 0 {
        b
    } else {
        b.saturating_sub(1)
    };
    for (base, log2) in [(buckets, b), (old, old_b)] {
        if base == 0 {
            continue;
        }
        if log2 > MAX_BUCKETS_LOG2 {
            *cut = true;
        }
        for i in 0..1u64 << log2.min(MAX_BUCKETS_LOG2) {
            let mut at = base + i * BUCKET_BYTES as u64;
            for hop in 0..=MAX_OVERFLOW {
                let mut bucket = [0u8; BUCKET_BYTES];
                mem.read(at, &mut bucket)?;
                for slot in 0..8 {
                    if bucket[slot] >= MIN_TOP_HASH {
                        out.push((
                            string_header(&bucket, BUCKET_KEYS + 16 * slot),
                            string_header(&bucket, BUCKET_ELEMS + 16 * slot),
                        ));
                    }
                }
                at = u64::from_le_bytes(
                    bucket[BUCKET_OVERFLOW..BUCKET_OVERFLOW + 8]
                        .try_into()
                        .expect("8 bytes"),
                );
                if at == 0 {
                    break;
                }
                if hop == MAX_OVERFLOW {
                    *cut = true;
                }
            }
        }
    }
    Ok(())
}

/// A Go string of `len` bytes at `ptr`, at most `max` (cut at a character boundary; bytes
/// that are not UTF-8 replaced).
fn string(
    mem: &dyn Memory,
    ptr: u64,
    len: u64,
    max: usize,
    cut: &mut bool,
) -> Result<String, ReadError> {
    if len == 0 {
        return Ok(String::new());
    }
    let n = (len as usize).min(max);
    let mut bytes = vec![0u8; n];
    mem.read(ptr, &mut bytes)?;
    if n < len as usize {
        *cut = true;
        // The valid prefix: a character split by the cut is dropped whole.
        let valid = match std::str::from_utf8(&bytes) {
            Ok(_) => n,
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => n,
        };
        bytes.truncate(valid);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::shared::memory::FakeMemory;

    /// Puts `s` at `at` and returns its header.
    fn put_str(mem: &mut FakeMemory, at: u64, s: &str) -> [u8; 16] {
        mem.put(at, s.as_bytes());
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&at.to_le_bytes());
        h[8..].copy_from_slice(&(s.len() as u64).to_le_bytes());
        h
    }

    fn hmap(b: u8, flags: u8, buckets: u64, old: u64) -> [u8; 32] {
        let mut h = [0u8; 32];
        h[8] = flags;
        h[9] = b;
        h[16..24].copy_from_slice(&buckets.to_le_bytes());
        h[24..32].copy_from_slice(&old.to_le_bytes());
        h
    }

    /// A bucket with `entries` in its first slots (tophash 5 + i), the rest empty.
    fn bucket(
        mem: &mut FakeMemory,
        strings: &mut u64,
        entries: &[(&str, &str)],
        overflow: u64,
    ) -> Vec<u8> {
        let mut b = vec![0u8; BUCKET_BYTES];
        for (i, (k, v)) in entries.iter().enumerate() {
            b[i] = MIN_TOP_HASH + i as u8;
            let kh = put_str(mem, *strings, k);
            *strings += 0x100;
            let vh = put_str(mem, *strings, v);
            *strings += 0x100;
            b[BUCKET_KEYS + 16 * i..BUCKET_KEYS + 16 * i + 16].copy_from_slice(&kh);
            b[BUCKET_ELEMS + 16 * i..BUCKET_ELEMS + 16 * i + 16].copy_from_slice(&vh);
        }
        b[BUCKET_OVERFLOW..].copy_from_slice(&overflow.to_le_bytes());
        b
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_small_map_is_one_bucket() {
        let mut mem = FakeMemory::default();
        let mut strings = 0x9000_0000;
        let b = bucket(
            &mut mem,
            &mut strings,
            &[("route", "/checkout"), ("tenant", "acme")],
            0,
        );
        mem.put(0x5000, &b);
        mem.put(0x4000, &hmap(0, 0, 0x5000, 0));
        let got = read(&mem, LabelsKind::Map, 0x3000, 0x4000).unwrap();
        assert_eq!(
            got.pairs,
            pairs(&[("route", "/checkout"), ("tenant", "acme")])
        );
        assert!(!got.cut);
    }

    #[test]
    fn a_growing_map_is_read_from_both_bucket_arrays_and_overflow() {
        let mut mem = FakeMemory::default();
        let mut s = 0x9000_0000;
        // New array of 2 buckets (B = 1): one entry moved; old array (1 bucket) with one
        // entry still there and an overflow bucket with another.
        let new0 = bucket(&mut mem, &mut s, &[("a", "1")], 0);
        let new1 = bucket(&mut mem, &mut s, &[], 0);
        mem.put(0x5000, &[new0, new1].concat());
        let over = bucket(&mut mem, &mut s, &[("c", "3")], 0);
        mem.put(0x7000, &over);
        let mut old = bucket(&mut mem, &mut s, &[("x", "moved"), ("b", "2")], 0x7000);
        old[0] = 2; // evacuated: its entry is in the new array
        mem.put(0x6000, &old);
        mem.put(0x4000, &hmap(1, 0, 0x5000, 0x6000));
        let got = read(&mem, LabelsKind::Map, 0x3000, 0x4000).unwrap();
        assert_eq!(got.pairs, pairs(&[("a", "1"), ("b", "2"), ("c", "3")]));
    }

    #[test]
    fn a_slice_is_read_in_order_and_long_values_are_cut() {
        let mut mem = FakeMemory::default();
        let long = "é".repeat(200); // 400 bytes: cut to 256, a character boundary
        let mut list = Vec::new();
        list.extend(put_str(&mut mem, 0x9000, "span_id"));
        list.extend(put_str(&mut mem, 0x9100, &long));
        list.extend(put_str(&mut mem, 0x9400, "route"));
        list.extend(put_str(&mut mem, 0x9500, "/a"));
        mem.put(0x5000, &list);
        let mut set = Vec::new();
        set.extend(0x5000u64.to_le_bytes());
        set.extend(2u64.to_le_bytes());
        mem.put(0x3000, &set);
        let got = read(&mem, LabelsKind::Slice, 0x3000, 0x5000).unwrap();
        assert_eq!(got.pairs[0], ("route".into(), "/a".into()));
        assert_eq!(got.pairs[1].1, "é".repeat(128));
        assert!(got.cut);
    }

    #[test]
    fn unreadable_memory_is_an_error_not_labels() {
        let mem = FakeMemory::default();
        assert!(read(&mem, LabelsKind::Map, 0x3000, 0x4000).is_err());
        assert!(read(&mem, LabelsKind::Slice, 0x3000, 0x4000).is_err());
    }
}
