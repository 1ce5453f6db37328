use std::process::ExitCode;

fn main() -> ExitCode {
    tune_allocator();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Invoked as `cputrack` or `cpustat`: the Solaris command line.
    if let Some(code) = profiler::cli::run_persona(&args) {
        return code;
    }
    if let Some(code) = profiler::cli::run_docs(&args) {
        return code;
    }
    match profiler::cli::parse(args) {
        Ok(cli) => profiler::cli::run(cli),
        Err(code) => code,
    }
}

/// Big blocks (a module's unwind rows, a file's symbol index) are freed as soon as they are
/// used. glibc raises its mmap threshold to the largest block freed, after which blocks of
/// up to 32 MiB come from the heap and stay in RSS; a fixed threshold returns them to the
/// kernel on free (a system-wide run beside a Rust build peaked at 200 MiB of heap without).
fn tune_allocator() {
    // SAFETY: mallopt only sets an allocator parameter; no other thread runs yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}
