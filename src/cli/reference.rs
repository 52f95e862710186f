//! What `matmul` and `gemm` check their result against: the plain definition `nn::matmul`
//! (u8 × i8 → i32) by the interpreter while that is quick, else under the generic schedule,
//! compiled (as `resnet18` checks its convolutions); the interpreter walks the expression tree
//! per element, far too slowly for a large GEMM.

use std::error::Error;

use ir::DType;
use ir::interp::eval_te;
use ir::te::Tensor as TeTensor;
use schedules::generic::default_schedule;
use schedules::nn::matmul;
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor, build};

/// Up to this many multiply-adds the interpreter is the reference: few enough that it stays
/// quick even in a debug build, as the tests run it.
pub const INTERPRETER_MAX_MACS: u64 = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reference {
    /// `te_eval` of the definition.
    Interpreter,
    /// The generic schedule of the definition, compiled at the scalar level: no kernel and no
    /// vector code in common with what it checks.
    GenericJit,
}

impl Reference {
    pub fn for_size(m: i64, n: i64, k: i64) -> Reference {
        let macs = (m as u64).checked_mul(n as u64).and_then(|mn| mn.checked_mul(k as u64));
        if macs.is_some_and(|macs| macs <= INTERPRETER_MAX_MACS) {
            Reference::Interpreter
        } else {
            Reference::GenericJit
        }
    }

    /// The name JSON output and the matmul line use (`resnet18`'s `reference` names).
    pub fn name(self) -> &'static str {
        match self {
            Reference::Interpreter => "eval_te",
            Reference::GenericJit => "generic-jit",
        }
    }

    /// `matmul(A, B)` for `a` and `b` (`A: u8[m, k]`, `B: i8[k, n]`) bound to `ta` and `tb`.
    pub fn matmul(
        self,
        a: &TeTensor,
        b: &TeTensor,
        ta: &mut Tensor,
        tb: &mut Tensor,
    ) -> Result<Tensor, Box<dyn Error>> {
        let plain = matmul(a, b, DType::I32, "R")?;
        match self {
            Reference::Interpreter => {
                let (a_data, b_data) = (ta.to_array(), tb.to_array());
                Ok(Tensor::from_array(&eval_te(&[&plain], &[(a, &a_data), (b, &b_data)])?.remove(0)))
            }
            Reference::GenericJit => {
                let options = CompileOptions { target: Target::Level(IsaLevel::Scalar), ..CompileOptions::default() };
                let kernel = build(&default_schedule(&[&plain]), &[a, b, &plain], "reference", &options)?;
                let mut out = Tensor::zeros(DType::I32, plain.shape())?;
                kernel.compiled.call(&mut [&mut *ta, &mut *tb, &mut out])?;
                Ok(out)
            }
        }
    }
}
