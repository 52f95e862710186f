//! AMX (Advanced Matrix Extensions): whether the CPU has the tile and int8 tile instructions,
//! whether the OS saves their state, and the per-process permission Linux requires before a
//! thread may touch tile data (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`).

use std::sync::OnceLock;

/// `ARCH_REQ_XCOMP_PERM`: asks the kernel for permission to use an XSAVE-enabled feature.
const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
/// `XFEATURE_XTILEDATA`: the AMX tile data state component.
const XFEATURE_XTILEDATA: libc::c_long = 18;

/// CPUID leaf 7 sub-leaf 0 EDX bit 24 (AMX-TILE).
pub(super) fn has_tile() -> bool {
    tiles().0
}

/// CPUID leaf 7 sub-leaf 0 EDX bit 25 (AMX-INT8).
pub(super) fn has_int8() -> bool {
    tiles().1
}

/// (AMX-TILE, AMX-INT8), asked of the CPU once per process: under a hypervisor every CPUID
/// exits to it, and a network's compile asks for every layer.
fn tiles() -> (bool, bool) {
    static TILES: OnceLock<(bool, bool)> = OnceLock::new();
    *TILES.get_or_init(|| {
        let (edx, saved) = (leaf7_edx(), os_saves_tiles());
        (edx >> 24 & 1 == 1 && saved, edx >> 25 & 1 == 1 && saved)
    })
}

/// Requests the process's permission to use tile data, once per process; the answer is the
/// kernel's (threads share the permission, so one request covers every thread).
pub(super) fn permitted() -> bool {
    *PERMITTED.get_or_init(request_permission)
}

/// The kernel's answer to the permission request, once made.
static PERMITTED: OnceLock<bool> = OnceLock::new();

/// Returns the calling thread's tile state to its initial one (`tilerelease`), when this
/// process was granted tile data (else no tile code ran, and the instruction may not exist).
/// AMX kernels leave their tile configuration loaded between calls (`kernels::amx`); the
/// runtime calls this where a thread's work ends, so an idle thread does not keep the state
/// in use.
pub fn release_tiles() {
    if PERMITTED.get() == Some(&true) {
        tilerelease();
    }
}

#[cfg(target_arch = "x86_64")]
fn tilerelease() {
    // SAFETY: `tilerelease` (encoded as bytes: assemblers may want the feature enabled) only
    // resets tile registers and their configuration, which no Rust code holds; the CPU has it
    // (the OS granted tile data).
    unsafe {
        std::arch::asm!(".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0", options(nomem, nostack, preserves_flags));
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn tilerelease() {}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_permission() -> bool {
    // SAFETY: arch_prctl with ARCH_REQ_XCOMP_PERM only changes this process's permitted XSAVE
    // features; it reads and writes no memory of ours.
    unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request_permission() -> bool {
    let _ = (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    false
}

#[cfg(target_arch = "x86_64")]
fn leaf7_edx() -> u32 {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is always available on x86-64 and only reads identification registers.
    #[allow(unused_unsafe)]
    unsafe {
        if __cpuid(0).eax < 7 { 0 } else { __cpuid_count(7, 0).edx }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn leaf7_edx() -> u32 {
    0
}

/// XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS manages tile state.
#[cfg(target_arch = "x86_64")]
fn os_saves_tiles() -> bool {
    use std::arch::x86_64::__cpuid;
    // CPUID.1:ECX bit 27: OSXSAVE, which makes `xgetbv` available.
    #[allow(unused_unsafe)]
    let osxsave = unsafe { __cpuid(1).ecx } >> 27 & 1 == 1;
    if !osxsave {
        return false;
    }
    let (lo, _hi): (u32, u32);
    // SAFETY: xgetbv with ECX = 0 reads XCR0; OSXSAVE (checked above) makes it legal.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") _hi, options(nomem, nostack, preserves_flags));
    }
    lo >> 17 & 3 == 3
}

#[cfg(not(target_arch = "x86_64"))]
fn os_saves_tiles() -> bool {
    false
}
