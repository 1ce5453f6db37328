//! Sets of requests (`cpc_set_create`, `cpc_set_add_request`, `cpc_walk_requests`).

use std::sync::Arc;

use super::bind::Binding;
use crate::events::Event;

/// A request's attribute (`cpc_attr_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub name: String,
    pub value: u64,
}

impl Attr {
    pub fn new(name: impl Into<String>, value: u64) -> Self {
        Self {
            name: name.into(),
            value,
        }
    }
}

/// One request: an event to count, its preset, flags and attributes.
#[derive(Clone, Debug)]
pub struct Request {
    pub event: String,
    pub preset: u64,
    pub flags: u32,
    pub attrs: Vec<Attr>,
    pub(crate) resolved: Event,
}

/// An ordered list of requests; a request's index is its insertion order. A set is unbound
/// until one of the `bind_*` calls; binding it again or dropping it unbinds it.
pub struct Set {
    pub(crate) handle: u64,
    pub(crate) requests: Vec<Request>,
    pub(crate) binding: Option<Arc<Binding>>,
}

impl Set {
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    pub fn is_bound(&self) -> bool {
        self.binding.as_ref().is_some_and(|b| b.is_live())
    }
}

impl Drop for Set {
    fn drop(&mut self) {
        if let Some(b) = self.binding.take() {
            b.release();
        }
    }
}
