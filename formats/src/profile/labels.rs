//! A sample's own labels: the key-value pairs the sampled code set for itself (a Go
//! goroutine's `runtime/pprof` labels), as pprof sample labels carry them.

use std::sync::Arc;

/// Key-value pairs sorted by key, keys unique and not empty; cheap to clone (one set is
/// shared by every stack that carries it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Option<Arc<[Pair]>>);

/// One label: key, value.
type Pair = (Arc<str>, Arc<str>);

impl Labels {
    /// The set of `pairs`: sorted, empty keys dropped, the first value of a repeated key
    /// kept.
    pub fn new<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut v: Vec<Pair> = Vec::new();
        for (k, val) in pairs {
            let k = k.as_ref();
            if !k.is_empty() && !v.iter().any(|(have, _)| &**have == k) {
                v.push((Arc::from(k), Arc::from(val.as_ref())));
            }
        }
        v.sort();
        Self((!v.is_empty()).then(|| Arc::from(v)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The pairs, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .flat_map(|v| v.iter().map(|(k, v)| (&**k, &**v)))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_sorted_and_keys_unique() {
        let l = Labels::new([("route", "/a"), ("", "x"), ("tenant", "t"), ("route", "/b")]);
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            [("route", "/a"), ("tenant", "t")]
        );
        assert_eq!(l.get("tenant"), Some("t"));
        assert!(Labels::new(Vec::<(&str, &str)>::new()).is_empty());
        assert_eq!(l, Labels::new([("tenant", "t"), ("route", "/a")]));
    }
}
