//! The processor's name for `cpc_cciname`/`cpc_cpuref`: x86's `model name` line of
//! /proc/cpuinfo; arm64 prints none, only the MIDR's implementer and part numbers, which are
//! named here for the server cores fleets run (the kernel's `cputype.h` numbers).

/// The processor's name from /proc/cpuinfo's text.
pub(crate) fn from_cpuinfo(cpuinfo: &str) -> String {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim())
        })
    };
    if let Some(model) = field("model name") {
        return model.to_owned();
    }
    let hex = |v: &str| u32::from_str_radix(v.trim_start_matches("0x"), 16).ok();
    match (
        field("CPU implementer").and_then(hex),
        field("CPU part").and_then(hex),
    ) {
        (Some(implementer), Some(part)) => match arm_name(implementer, part) {
            Some(name) => name.to_owned(),
            None => format!("Arm CPU (implementer {implementer:#04x}, part {part:#05x})"),
        },
        _ => "unknown processor".to_owned(),
    }
}

/// Known (implementer, part) pairs.
fn arm_name(implementer: u32, part: u32) -> Option<&'static str> {
    Some(match (implementer, part) {
        (0x41, 0xd03) => "Arm Cortex-A53",
        (0x41, 0xd05) => "Arm Cortex-A55",
        (0x41, 0xd07) => "Arm Cortex-A57",
        (0x41, 0xd08) => "Arm Cortex-A72",
        (0x41, 0xd0b) => "Arm Cortex-A76",
        (0x41, 0xd0c) => "Arm Neoverse N1",
        (0x41, 0xd40) => "Arm Neoverse V1",
        (0x41, 0xd49) => "Arm Neoverse N2",
        (0x41, 0xd4f) => "Arm Neoverse V2",
        (0x41, 0xd84) => "Arm Neoverse V3",
        (0x41, 0xd8e) => "Arm Neoverse N3",
        // Azure Cobalt 100 reports Microsoft as the implementer of its Neoverse N2 cores.
        (0x6d, 0xd49) => "Microsoft Azure Cobalt 100 (Neoverse N2)",
        (0xc0, 0xac3) => "AmpereOne",
        (0x50, 0x000) => "Applied Micro X-Gene",
        (0x46, 0x001) => "Fujitsu A64FX",
        (0x48, 0xd01) => "HiSilicon TaiShan v110",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_x86_and_arm64_processors() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) \
                   Platinum 8375C CPU @ 2.90GHz\n";
        assert_eq!(
            from_cpuinfo(x86),
            "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
        );
        // A Graviton2's /proc/cpuinfo (no model name line).
        let graviton2 = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes\n\
                         CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\n\
                         CPU part\t: 0xd0c\nCPU revision\t: 1\n";
        assert_eq!(from_cpuinfo(graviton2), "Arm Neoverse N1");
        let qemu = "CPU implementer\t: 0x00\nCPU part\t: 0x051\n";
        assert_eq!(from_cpuinfo(qemu), "Arm CPU (implementer 0x00, part 0x051)");
        assert_eq!(from_cpuinfo(""), "unknown processor");
    }
}
