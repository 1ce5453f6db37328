use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Invoked as `cputrack` or `cpustat`: the Solaris command line.
    if let Some(code) = profiler::cli::run_persona(&args) {
        return code;
    }
    match profiler::cli::parse(args) {
        Ok(cli) => profiler::cli::run(cli),
        Err(code) => code,
    }
}
