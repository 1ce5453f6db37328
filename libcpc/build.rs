//! Compiles the one piece C must do: calling a `va_list` error handler (Rust cannot build
//! a `va_list` on stable).
fn main() {
    println!("cargo:rerun-if-changed=src/errhndlr.c");
    cc::Build::new()
        .file("src/errhndlr.c")
        .include("include")
        .compile("cpc_errhndlr");
}
