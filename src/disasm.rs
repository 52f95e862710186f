//! Ground floor: disassembly of machine code in Intel syntax (iced-x86), for `--asm`,
//! `CompiledFunc::disassembly` and the tests that check encodings. It reads bytes, whoever
//! produced them (Cranelift or `kernels`), so it stands below both.

use std::collections::HashMap;
use std::fmt::Write;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Formatter, Instruction, IntelFormatter};

use crate::isa::KernelVariant;

/// The machine code of one function as it sits in memory.
#[derive(Clone, Debug)]
pub struct MachineCode {
    pub name: String,
    /// Who produced it: "cranelift", or a kernel description.
    pub origin: String,
    /// The family of a hand-assembled kernel.
    pub kernel: Option<KernelVariant>,
    pub address: u64,
    pub bytes: Vec<u8>,
}

/// Decodes `bytes` as 64-bit code located at `address`.
pub fn decode(bytes: &[u8], address: u64) -> Vec<Instruction> {
    Decoder::with_ip(64, bytes, address, DecoderOptions::NONE).into_iter().collect()
}

/// Intel-syntax listing of every function: address, bytes, instruction, and the name of the
/// function a call or jump lands on. Bytes after the last reachable instruction (Cranelift's
/// constant pool) are summarized, not decoded.
pub fn disassemble(functions: &[MachineCode]) -> String {
    let names: HashMap<u64, &str> = functions.iter().map(|f| (f.address, f.name.as_str())).collect();
    let mut formatter = IntelFormatter::new();
    formatter.options_mut().set_first_operand_char_index(10);
    let mut out = String::new();
    for f in functions {
        let _ = writeln!(out, "; {} ({}, {} bytes at {:#x})", f.name, f.origin, f.bytes.len(), f.address);
        let end = f.address + f.bytes.len() as u64;
        // Farthest in-function branch target seen so far: code past an unconditional exit that
        // nothing jumps to is data.
        let mut reach = f.address;
        let mut text = String::new();
        for ins in decode(&f.bytes, f.address) {
            text.clear();
            formatter.format(&ins, &mut text);
            let start = (ins.ip() - f.address) as usize;
            let hex: String = f.bytes[start..start + ins.len()].iter().map(|b| format!("{b:02x}")).collect();
            let _ = write!(out, "{:08x}  {hex:<24} {text}", ins.ip());
            let target = match ins.flow_control() {
                FlowControl::Call | FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    Some(ins.near_branch_target())
                }
                _ => None,
            };
            if let Some(target) = target {
                if let Some(name) = names.get(&target) {
                    let _ = write!(out, "  ; {name}");
                }
                if (f.address..end).contains(&target) {
                    reach = reach.max(target);
                }
            }
            out.push('\n');
            let exits = matches!(ins.flow_control(), FlowControl::Return | FlowControl::UnconditionalBranch);
            if exits && ins.next_ip() > reach && ins.next_ip() < end {
                let _ = writeln!(out, "{:08x}  ; {} bytes of data", ins.next_ip(), end - ins.next_ip());
                break;
            }
        }
    }
    out
}
