use which::which;

/// Rebuild the eBPF object when bpf-linker changes (a new LLVM can change the output), and
/// say which architecture's registers the programs read (`bpf_target_arch`): aya-build
/// passes the profiler's target architecture; a build of this crate on its own (clippy)
/// takes the host's.
fn main() {
    if let Ok(linker) = which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
    println!("cargo::rustc-check-cfg=cfg(bpf_target_arch, values(\"x86_64\", \"aarch64\"))");
    println!("cargo:rerun-if-env-changed=CARGO_CFG_BPF_TARGET_ARCH");
    if std::env::var_os("CARGO_CFG_BPF_TARGET_ARCH").is_none() {
        let host = std::env::var("HOST").unwrap_or_default();
        let arch = host.split('-').next().unwrap_or_default();
        println!("cargo:rustc-cfg=bpf_target_arch=\"{arch}\"");
    }
}
