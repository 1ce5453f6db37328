//! Unit tests of `cpc` against the fake syscall seam (no kernel, no privileges).

mod binder;
