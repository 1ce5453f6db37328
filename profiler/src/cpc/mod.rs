//! The libcpc model on perf_event_open: event names, attributes and (later) sets and binding.
pub mod events;
