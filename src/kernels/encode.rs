//! `encode`: a `CodeAssembler`'s instructions to bytes, each instruction encoded once. iced's
//! `CodeAssembler::assemble` hands them to its `BlockEncoder`, which wraps every instruction in
//! an object, encodes it to learn its size and again at its final address, and relaxes branches
//! from their longest form down: most of an assembled kernel's cost, and a network's compile
//! assembles one kernel of thousands of instructions per distinct layer. A kernel here is
//! straight-line code and loops: position-independent instructions (no RIP-relative operand)
//! whose bytes do not depend on their address, and `jcc`/`jmp` to labels. Those are encoded
//! once, the branches start short and grow to rel32 only where their displacement does not fit
//! a byte, and the bytes are laid out once. Anything else (a RIP-relative operand, a call, any
//! other branch) goes to `assemble` as before, as does a branch whose label no instruction has.
//! `assemble` is the slow twin: in the crate's unit tests every kernel assembled is assembled
//! both ways and the bytes compared.

use iced_x86::code_asm::CodeAssembler;
use iced_x86::{Code, Encoder, FlowControl, IcedError, Instruction, OpKind};

/// The machine code of `a`'s instructions at address 0 (position independent either way).
pub(crate) fn encode(a: &mut CodeAssembler) -> Result<Vec<u8>, IcedError> {
    match encode_straight(a.instructions())? {
        Some(bytes) => {
            // In the crate's own tests every kernel any test assembles is checked against its
            // slow twin.
            #[cfg(test)]
            assert_eq!(bytes, a.assemble(0)?, "`encode` and iced's BlockEncoder disagree");
            Ok(bytes)
        }
        None => a.assemble(0),
    }
}

/// A `jcc` or `jmp` to the instruction `target`, at the short (rel8) or near (rel32) size.
struct Branch {
    index: usize,
    target: usize,
    short: (Code, usize),
    near: (Code, usize),
    is_short: bool,
}

/// `encode` where every instruction is position independent or a `jcc`/`jmp` to a label of
/// this block; `None` otherwise.
fn encode_straight(instructions: &[Instruction]) -> Result<Option<Vec<u8>>, IcedError> {
    // A label's id is the `ip` of the instruction it marks (0: none), as `CodeAssembler` sets it.
    let mut label_at = Vec::new();
    for (i, instr) in instructions.iter().enumerate() {
        let Ok(id) = usize::try_from(instr.ip()) else { return Ok(None) };
        if id != 0 {
            if label_at.len() <= id {
                label_at.resize(id + 1, None);
            }
            label_at[id] = Some(i);
        }
    }
    let (mut encoder, mut sizer) = (Encoder::try_new(64)?, Encoder::try_new(64)?);
    let mut sizes = Vec::with_capacity(instructions.len());
    let mut branches = Vec::new();
    for (index, instr) in instructions.iter().enumerate() {
        let code = instr.code();
        if code.is_jcc_short_or_near() || code.is_jmp_short_or_near() {
            let target = usize::try_from(instr.near_branch64()).ok().and_then(|id| label_at.get(id).copied().flatten());
            let (Some(target), OpKind::NearBranch64) = (target, instr.op0_kind()) else { return Ok(None) };
            let mut size = |code: Code| -> Result<(Code, usize), IcedError> {
                let mut probe = *instr;
                probe.set_code(code);
                probe.set_near_branch64(0);
                let len = sizer.encode(&probe, 0)?;
                let _ = sizer.take_buffer();
                Ok((code, len))
            };
            branches.push(Branch {
                index,
                target,
                short: size(code.as_short_branch())?,
                near: size(code.as_near_branch())?,
                is_short: true,
            });
            sizes.push(0);
            continue;
        }
        let plain = matches!(instr.flow_control(), FlowControl::Next | FlowControl::Return);
        if instr.is_ip_rel_memory_operand() || !plain {
            return Ok(None);
        }
        // Encoded at address 0: the bytes are the same at any address.
        sizes.push(encoder.encode(instr, 0)?);
    }
    let straight = encoder.take_buffer();
    // Branches start short; one that does not reach grows, which can only push others
    // further, so the sizes only grow and the loop ends.
    let mut offsets = vec![0usize; instructions.len() + 1];
    loop {
        for b in &branches {
            sizes[b.index] = if b.is_short { b.short.1 } else { b.near.1 };
        }
        for (i, size) in sizes.iter().enumerate() {
            offsets[i + 1] = offsets[i] + size;
        }
        let mut grew = false;
        for b in branches.iter_mut().filter(|b| b.is_short) {
            let next = offsets[b.index] + b.short.1;
            let displacement = offsets[b.target] as i64 - next as i64;
            if i8::try_from(displacement).is_err() {
                b.is_short = false;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let mut out = Vec::with_capacity(offsets[instructions.len()]);
    let (mut from, mut branch) = (0usize, branches.iter().peekable());
    for (i, instr) in instructions.iter().enumerate() {
        match branch.next_if(|b| b.index == i) {
            Some(b) => {
                let mut jump = *instr;
                jump.set_code(if b.is_short { b.short.0 } else { b.near.0 });
                jump.set_near_branch64(offsets[b.target] as u64);
                encoder.encode(&jump, offsets[i] as u64)?;
                out.extend_from_slice(&encoder.take_buffer());
            }
            None => {
                out.extend_from_slice(&straight[from..from + sizes[i]]);
                from += sizes[i];
            }
        }
    }
    debug_assert_eq!(out.len(), offsets[instructions.len()]);
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use iced_x86::code_asm::*;

    use super::*;

    /// `encode` and iced's `BlockEncoder` on the same instructions.
    fn both(build: impl Fn(&mut CodeAssembler) -> Result<(), IcedError>) -> (Vec<u8>, Vec<u8>) {
        let mut a = CodeAssembler::new(64).unwrap();
        build(&mut a).unwrap();
        let fast = encode(&mut a).unwrap();
        (fast, a.assemble(0).unwrap())
    }

    #[test]
    fn short_and_long_loops_encode_as_the_block_encoder_does() {
        for body in [1usize, 10, 40, 200] {
            let (fast, slow) = both(|a| {
                let mut top = a.create_label();
                let mut done = a.create_label();
                a.xor(rax, rax)?;
                a.set_label(&mut top)?;
                a.cmp(rax, 100)?;
                a.jge(done)?;
                for k in 0..body {
                    a.vpdpbusd(zmm0, zmm1, dword_bcst(rsi + (4 * k) as i32))?;
                }
                a.add(rax, 1)?;
                a.jmp(top)?;
                a.set_label(&mut done)?;
                a.vzeroupper()?;
                a.ret()
            });
            assert_eq!(fast, slow, "a loop of {body} instructions");
        }
    }

    #[test]
    fn a_branch_to_a_label_no_instruction_has_goes_to_the_block_encoder() {
        let (fast, slow) = both(|a| {
            let top = a.create_label();
            a.jmp(top)?;
            a.ret()
        });
        assert_eq!(fast, slow);
    }

    #[test]
    fn a_rip_relative_operand_goes_to_the_block_encoder() {
        let (fast, slow) = both(|a| {
            let mut data = a.create_label();
            a.vmovups(zmm0, zmmword_ptr(data))?;
            a.ret()?;
            a.set_label(&mut data)?;
            a.dd(&[1, 2, 3, 4])
        });
        assert_eq!(fast, slow);
        assert!(
            encode_straight(&{
                let mut a = CodeAssembler::new(64).unwrap();
                let mut data = a.create_label();
                a.vmovups(zmm0, zmmword_ptr(data)).unwrap();
                a.set_label(&mut data).unwrap();
                a.ret().unwrap();
                a.take_instructions()
            })
            .unwrap()
            .is_none()
        );
    }
}
