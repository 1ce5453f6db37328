use std::process::ExitCode;

fn main() -> ExitCode {
    match profiler::cli::parse(std::env::args_os()) {
        Ok(cli) => profiler::cli::run(cli),
        Err(code) => code,
    }
}
