//! The CPU's identity (CPUID), printed next to every measured figure: figures from different
//! CPUs are not comparable.

use std::fmt;

/// Vendor, family, model and brand string of the host CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuId {
    pub vendor: String,
    /// Display family and model (base plus extended fields, as the vendors define them).
    pub family: u32,
    pub model: u32,
    pub name: String,
}

impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, family {} model {})", self.name, self.vendor, self.family, self.model)
    }
}

/// The host CPU, or `None` off x86-64.
pub fn cpu_id() -> Option<CpuId> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, CpuidResult};
        // CPUID is always available on x86-64 and only reads identification registers.
        #[allow(unused_unsafe)]
        let leaf = |l: u32| -> CpuidResult { unsafe { __cpuid(l) } };
        let bytes = |regs: &[u32]| -> String {
            let raw: Vec<u8> = regs.iter().flat_map(|r| r.to_le_bytes()).collect();
            String::from_utf8_lossy(&raw).trim_matches(char::from(0)).trim().to_string()
        };
        let v = leaf(0);
        let vendor = bytes(&[v.ebx, v.edx, v.ecx]);
        let eax = leaf(1).eax;
        let base_family = (eax >> 8) & 0xf;
        let family = if base_family == 0xf { base_family + ((eax >> 20) & 0xff) } else { base_family };
        let model = ((eax >> 4) & 0xf) | if base_family >= 6 { ((eax >> 16) & 0xf) << 4 } else { 0 };
        let name = if leaf(0x8000_0000).eax >= 0x8000_0004 {
            let parts: Vec<u32> =
                (0x8000_0002..=0x8000_0004).map(leaf).flat_map(|r| [r.eax, r.ebx, r.ecx, r.edx]).collect();
            bytes(&parts)
        } else {
            vendor.clone()
        };
        Some(CpuId { vendor, family, model, name })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// `cpu_id()` printed, or "unknown CPU".
pub fn cpu_name() -> String {
    cpu_id().map_or_else(|| "unknown CPU".to_string(), |c| c.to_string())
}
