//! `cargo xtask warm`: what the stages after the tests build and fetch, made ahead of them, in
//! the order they come: the fuzz targets under AddressSanitizer (and cargo-fuzz), the bench's
//! release build (and inferno), then the kernel matrix's images and release builds. CI runs
//! it at idle priority beside the README's test command, whose privileged tests run one at a
//! time and leave about one of two CPUs idle; each stage then finds its build fresh. Each
//! build is the stage's own command, so a stage never depends on it: what warm did not
//! finish, the stage builds. It installs no package (the test command's apt may be running):
//! it needs `cargo xtask setup` done, and waits for the cross toolchain the test command
//! installs.

use std::time::{Duration, Instant};

/// How long the arm64 build waits for the cross toolchain.
const CROSS_WAIT: Duration = Duration::from_secs(20 * 60);

pub fn warm() -> anyhow::Result<()> {
    let started = Instant::now();
    let step = |name: &str, f: &dyn Fn() -> anyhow::Result<()>| {
        let t = Instant::now();
        f().map_err(|e| e.context(format!("warm: {name}")))?;
        eprintln!(
            "warm: {name} in {:.0} s ({:.0} s in all)",
            t.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        anyhow::Ok(())
    };
    step("fuzz targets", &crate::fuzz::build)?;
    step("bench build", &crate::bench::env::build)?;
    step("kernels' images and builds", &|| {
        crate::kernels::warm(CROSS_WAIT)
    })
}
