//! Sets the soname, and compiles the one piece C must do: calling a `va_list` error handler (Rust cannot build
//! a `va_list` on stable).
fn main() {
    // Solaris's soname; `cargo xtask install` installs libcpc.so.1 and the libcpc.so link.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcpc.so.1");
    println!("cargo:rerun-if-changed=src/errhndlr.c");
    cc::Build::new()
        .file("src/errhndlr.c")
        .include("include")
        .compile("cpc_errhndlr");
}
