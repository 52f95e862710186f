//! Vector registers by number, as the kernel generators allocate them, and their iced-x86
//! operands at each width.

use iced_x86::Register;
use iced_x86::code_asm::registers::{xmm::get_xmm, ymm::get_ymm, zmm::get_zmm};
use iced_x86::code_asm::{AsmRegisterXmm, AsmRegisterYmm, AsmRegisterZmm};

/// A vector register by number, at the kernel's width.
#[derive(Clone, Copy)]
pub(super) struct V(pub(super) usize);

// Register numbers come from a generator's allocator, which checks them against the width's
// register count, so these lookups cannot fail.
pub(super) fn zmm(v: V) -> AsmRegisterZmm {
    get_zmm(Register::ZMM0 + v.0 as u32).expect("allocated zmm register")
}

pub(super) fn ymm(v: V) -> AsmRegisterYmm {
    get_ymm(Register::YMM0 + v.0 as u32).expect("allocated ymm register")
}

pub(super) fn xmm(v: V) -> AsmRegisterXmm {
    get_xmm(Register::XMM0 + v.0 as u32).expect("allocated xmm register")
}
