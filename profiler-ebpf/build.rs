use which::which;

/// Rebuild the eBPF object when bpf-linker changes (a new LLVM can change the output).
fn main() {
    if let Ok(linker) = which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
