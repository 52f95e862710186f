//! Expression compiler shared by both interpreters: each expression becomes a closure tree once,
//! with variables and memories resolved to slot indices, so evaluation does no lookups.
//!
//! A compiled expression is evaluated one lane at a time: `eval(frame, lane)` is lane `lane` of
//! the value. Scalar nodes ignore the lane, so a scalar operand of a vector node (an index of a
//! multi-dimensional vector load, the operand of a `Broadcast`) reads the same at every lane.
//! Lane-wise evaluation also makes `Select` lazy per lane: only the chosen arm is evaluated.

use std::collections::HashMap;

use crate::dtype::{DType, ScalarType};
use crate::expr::{BinOp, Expr, ExprKind, Var, VarId, VectorReduceOp};
use crate::interp::scalar::{self, Scalar};
use crate::interp::{Access, Array, InterpError};
use crate::stmt::{Buffer, BufferId};
use crate::te::TensorId;

/// Expands `$body` with `$T` bound to the value of `$ty` as a constant, so the inlined scalar
/// operation is specialized to the type.
macro_rules! with_type {
    ($ty:expr, $T:ident => $body:expr) => {
        with_type!(@arms $ty, $T, $body, Bool U8 I8 U16 I16 U32 I32 U64 I64 F16 BF16 F32 F64)
    };
    (@arms $ty:expr, $T:ident, $body:expr, $($name:ident)*) => {
        match $ty {
            $(ScalarType::$name => {
                const $T: ScalarType = ScalarType::$name;
                $body
            })*
        }
    };
}

/// Errors are boxed so the hot `Result<Scalar, _>` stays two words.
pub(crate) type Fault = Box<InterpError>;
pub(crate) type ExprFn = Box<dyn Fn(&Frame, usize) -> Result<Scalar, Fault>>;

/// The run-time state: values of variables and contents of memories, by slot.
#[derive(Default)]
pub(crate) struct Frame {
    pub scalars: Vec<Scalar>,
    pub vectors: Vec<Vec<Scalar>>,
    pub buffers: Vec<Array>,
}

/// What a memory slot holds: a tensor (tensor expressions) or a buffer (loop IR).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Memory {
    Tensor(TensorId),
    Buffer(BufferId),
}

/// Where a variable's value lives in a `Frame`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Slot {
    Scalar(usize),
    Vector(usize),
}

/// Compile-time scopes. Every binding site gets its own slot, so shadowing is harmless.
#[derive(Default)]
pub(crate) struct Compiler {
    vars: HashMap<VarId, Vec<Slot>>,
    memories: HashMap<Memory, Vec<usize>>,
    scalar_slots: usize,
    vector_slots: usize,
    memory_slots: usize,
}

pub(crate) fn malformed(reason: String) -> InterpError {
    InterpError::Malformed { reason }
}

impl Compiler {
    /// Grows `frame` to hold every slot bound so far, keeping its contents; new memories are empty.
    pub fn grow(&self, frame: &mut Frame) {
        frame.scalars.resize(self.scalar_slots, Scalar::Int(0));
        frame.vectors.resize(self.vector_slots, Vec::new());
        frame.buffers.resize_with(self.memory_slots, || Array::zeros(DType::U8, &[0]));
    }

    /// Opens the scope of `var` (a scalar or vector slot by its lane count) until `unbind_var`.
    pub fn bind_var(&mut self, var: &Var) -> Slot {
        let slot = if var.dtype().is_scalar() {
            self.scalar_slots += 1;
            Slot::Scalar(self.scalar_slots - 1)
        } else {
            self.vector_slots += 1;
            Slot::Vector(self.vector_slots - 1)
        };
        self.vars.entry(var.id()).or_default().push(slot);
        slot
    }

    /// Binds a scalar variable and returns its slot in `Frame::scalars`.
    pub fn bind_scalar(&mut self, var: &Var) -> usize {
        match self.bind_var(var) {
            Slot::Scalar(s) => s,
            Slot::Vector(_) => panic!("bind_scalar of vector variable {var}: {}", var.dtype()),
        }
    }

    pub fn unbind_var(&mut self, var: &Var) {
        self.vars.get_mut(&var.id()).and_then(Vec::pop);
    }

    /// Opens the scope of a memory and returns its slot in `Frame::buffers`.
    pub fn bind_memory(&mut self, memory: Memory) -> usize {
        self.memory_slots += 1;
        self.memories.entry(memory).or_default().push(self.memory_slots - 1);
        self.memory_slots - 1
    }

    pub fn unbind_memory(&mut self, memory: Memory) {
        self.memories.get_mut(&memory).and_then(Vec::pop);
    }

    pub fn memory(&self, memory: Memory) -> Option<usize> {
        self.memories.get(&memory).and_then(|s| s.last().copied())
    }

    /// Compiles `expr` into a closure.
    pub fn compile(&mut self, expr: &Expr) -> Result<ExprFn, InterpError> {
        Ok(self.operand(expr)?.into_fn())
    }

    /// Compiles `expr` as an operand of another node. Constants, scalar variables and element
    /// reads are evaluated in place by the parent, which saves a closure call per leaf.
    pub fn operand(&mut self, expr: &Expr) -> Result<Operand, InterpError> {
        Ok(match expr.kind() {
            ExprKind::Int(v) => Operand::Const(Scalar::Int(*v)),
            ExprKind::Float(x) => Operand::Const(Scalar::Float(*x)),
            ExprKind::Var(var) => match self.vars.get(&var.id()).and_then(|s| s.last()) {
                Some(&Slot::Scalar(s)) => Operand::Slot(s),
                Some(&Slot::Vector(s)) => Operand::Node(Box::new(move |f, lane| Ok(f.vectors[s][lane]))),
                None => return Err(malformed(format!("variable {var} is used outside the scope that binds it"))),
            },
            ExprKind::TensorRead(tensor, indices) => {
                let memory = Memory::Tensor(tensor.id());
                let Some(slot) = self.memory(memory) else {
                    return Err(InterpError::MissingInput { tensor: tensor.name().to_string() });
                };
                Operand::Load(slot, self.compile_index(Access::Read, tensor.name(), tensor.shape(), indices)?)
            }
            ExprKind::Load(buffer, indices) => {
                let slot = self.buffer_slot(buffer)?;
                Operand::Load(slot, self.compile_index(Access::Read, buffer.name(), buffer.shape(), indices)?)
            }
            _ => Operand::Node(self.node(expr)?),
        })
    }

    fn node(&mut self, expr: &Expr) -> Result<ExprFn, InterpError> {
        let ty = expr.dtype().scalar;
        Ok(match expr.kind() {
            ExprKind::Int(_)
            | ExprKind::Float(_)
            | ExprKind::Var(_)
            | ExprKind::TensorRead(..)
            | ExprKind::Load(..) => self.compile(expr)?,
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.operand(a)?, self.operand(b)?);
                binary_fn(*op, ty, a, b)
            }
            ExprKind::Cmp(op, a, b) => {
                let (op, operand_ty) = (*op, a.dtype().scalar);
                let (a, b) = (self.operand(a)?, self.operand(b)?);
                Box::new(move |f, l| {
                    Ok(Scalar::Int(scalar::compare(op, operand_ty, a.eval(f, l)?, b.eval(f, l)?) as i64))
                })
            }
            ExprKind::Not(a) => {
                let a = self.operand(a)?;
                Box::new(move |f, l| Ok(scalar::not(ty, a.eval(f, l)?)))
            }
            ExprKind::Cast(a) | ExprKind::SaturatingCast(a) => {
                let saturating = matches!(expr.kind(), ExprKind::SaturatingCast(_));
                let from = a.dtype().scalar;
                let a = self.operand(a)?;
                cast_fn(from, ty, a, saturating)
            }
            ExprKind::Round(a) => {
                if !ty.is_float() {
                    return Err(malformed(format!("round is defined on floats only, found `{expr}` of {ty}")));
                }
                let a = self.operand(a)?;
                round_fn(ty, a)
            }
            ExprKind::Sqrt(a) => {
                if !ty.is_float() {
                    return Err(malformed(format!("sqrt is defined on floats only, found `{expr}` of {ty}")));
                }
                let a = self.operand(a)?;
                sqrt_fn(ty, a)
            }
            ExprKind::Fma(a, b, c) => {
                if ty != ScalarType::F32 && ty != ScalarType::F64 {
                    return Err(malformed(format!("fma is defined on f32 and f64 only, found `{expr}` of {ty}")));
                }
                let (a, b, c) = (self.operand(a)?, self.operand(b)?, self.operand(c)?);
                Box::new(move |f, l| Ok(scalar::fma(ty, a.eval(f, l)?, b.eval(f, l)?, c.eval(f, l)?)))
            }
            ExprKind::Reinterpret(a) => {
                let from = a.dtype().scalar;
                if from.bits() != ty.bits() || from.is_bool() || ty.is_bool() {
                    return Err(malformed(format!("`{expr}` reinterprets {from} as {ty}")));
                }
                let a = self.operand(a)?;
                Box::new(move |f, l| Ok(scalar::reinterpret(from, ty, a.eval(f, l)?)))
            }
            ExprKind::Select(c, t, e) => {
                let (c, t, e) = (self.operand(c)?, self.operand(t)?, self.operand(e)?);
                Box::new(move |f, l| if c.eval(f, l)?.as_bool() { t.eval(f, l) } else { e.eval(f, l) })
            }
            ExprKind::Ramp(base, stride) => {
                let (base, stride) = (self.operand(base)?, self.operand(stride)?);
                Box::new(move |f, l| {
                    let lane = scalar::cast(ScalarType::I64, ty, Scalar::Int(l as i64), false);
                    let offset = scalar::binary(BinOp::Mul, ty, lane, stride.eval(f, l)?);
                    Ok(scalar::binary(BinOp::Add, ty, base.eval(f, l)?, offset))
                })
            }
            ExprKind::Broadcast(v) => {
                let v = self.operand(v)?;
                Box::new(move |f, _| v.eval(f, 0))
            }
            ExprKind::VectorReduce(op, v) => {
                let (in_lanes, out_lanes) = (v.dtype().lanes as usize, expr.dtype().lanes as usize);
                if in_lanes % out_lanes != 0 {
                    return Err(malformed(format!(
                        "`{expr}` reduces {in_lanes} lanes into {out_lanes}, which does not divide them"
                    )));
                }
                let group = in_lanes / out_lanes;
                let op = match op {
                    VectorReduceOp::Add => BinOp::Add,
                    VectorReduceOp::Min => BinOp::Min,
                    VectorReduceOp::Max => BinOp::Max,
                };
                let v = self.operand(v)?;
                Box::new(move |f, l| {
                    // A scalar result ignores the requested lane, like every scalar node.
                    let first = if out_lanes == 1 { 0 } else { l * group };
                    let mut acc = v.eval(f, first)?;
                    for lane in first + 1..first + group {
                        acc = scalar::binary(op, ty, acc, v.eval(f, lane)?);
                    }
                    Ok(acc)
                })
            }
            ExprKind::Reduce(_) => {
                return Err(malformed(format!("a reduction may only be the whole body of a compute, found `{expr}`")));
            }
        })
    }

    pub fn buffer_slot(&self, buffer: &Buffer) -> Result<usize, InterpError> {
        self.memory(Memory::Buffer(buffer.id())).ok_or_else(|| {
            malformed(format!("buffer {} is accessed but is neither a parameter nor allocated here", buffer.name()))
        })
    }

    /// Compiles the position computation of an access: one index per dimension, or a single flat
    /// element index (after `flatten_buffers`). Every index is bounds-checked.
    pub fn compile_index(
        &mut self,
        access: Access,
        name: &str,
        shape: &[i64],
        indices: &[Expr],
    ) -> Result<Index, InterpError> {
        if let Some(bad) = indices.iter().find(|i| !i.dtype().is_int()) {
            return Err(malformed(format!("{access} of {name}: index `{bad}` has type {}, expected i64", bad.dtype())));
        }
        let lanes = indices.iter().map(|i| i.dtype().lanes).max().unwrap_or(1);
        if let Some(bad) = indices.iter().find(|i| i.dtype().lanes != 1 && i.dtype().lanes != lanes) {
            return Err(malformed(format!(
                "{access} of {name}: index `{bad}` has {} lanes but another index has {lanes}",
                bad.dtype().lanes
            )));
        }
        if indices.len() != shape.len() && indices.len() != 1 {
            return Err(malformed(format!(
                "{access} of {name} has {} indices, expected {} (one per dimension) or 1 (flat)",
                indices.len(),
                shape.len()
            )));
        }
        let parts = indices
            .iter()
            .map(|i| {
                Ok(match self.operand(i)? {
                    Operand::Const(v) => Leaf::Const(v.as_int()),
                    Operand::Slot(s) => Leaf::Slot(s),
                    other => Leaf::Node(other.into_fn()),
                })
            })
            .collect::<Result<Vec<_>, InterpError>>()?;
        // A flat index is checked against the element count, as a one-dimensional access.
        let extents = if indices.len() == shape.len() { shape.to_vec() } else { vec![shape.iter().product()] };
        Ok(Index { access, name: name.to_string(), shape: shape.to_vec(), parts, extents })
    }
}

/// A compiled operand: leaves are evaluated in place rather than through a closure call.
pub(crate) enum Operand {
    Const(Scalar),
    Slot(usize),
    /// An element of the memory in a slot.
    Load(usize, Index),
    Node(ExprFn),
}

impl Operand {
    #[inline(always)]
    pub fn eval(&self, f: &Frame, lane: usize) -> Result<Scalar, Fault> {
        match self {
            Operand::Const(v) => Ok(*v),
            Operand::Slot(s) => Ok(f.scalars[*s]),
            Operand::Load(slot, index) => Ok(f.buffers[*slot].get(index.eval(f, lane)?)),
            Operand::Node(node) => node(f, lane),
        }
    }

    pub fn into_fn(self) -> ExprFn {
        match self {
            Operand::Const(v) => Box::new(move |_, _| Ok(v)),
            Operand::Slot(s) => Box::new(move |f, _| Ok(f.scalars[s])),
            Operand::Load(slot, index) => Box::new(move |f, l| Ok(f.buffers[slot].get(index.eval(f, l)?))),
            Operand::Node(node) => node,
        }
    }
}

/// An index operand. Separate from `Operand` so that evaluating an index never recurses into
/// an inlined load.
enum Leaf {
    Const(i64),
    Slot(usize),
    Node(ExprFn),
}

/// A compiled access position: the row-major element index of one lane, bounds-checked.
pub(crate) struct Index {
    access: Access,
    name: String,
    /// The memory's shape, for error messages.
    shape: Vec<i64>,
    parts: Vec<Leaf>,
    /// The extent each part must lie in.
    extents: Vec<i64>,
}

impl Index {
    #[inline(always)]
    pub fn eval(&self, f: &Frame, lane: usize) -> Result<usize, Fault> {
        let mut flat = 0i64;
        for (part, &extent) in self.parts.iter().zip(&self.extents) {
            let i = part.eval(f, lane)?;
            if i < 0 || i >= extent {
                return Err(self.out_of_bounds(f, lane));
            }
            flat = flat * extent + i;
        }
        Ok(flat as usize)
    }

    #[cold]
    fn out_of_bounds(&self, f: &Frame, lane: usize) -> Fault {
        let index = match self.parts.iter().map(|p| p.eval(f, lane)).collect() {
            Ok(index) => index,
            Err(fault) => return fault,
        };
        Box::new(InterpError::OutOfBounds {
            access: self.access,
            name: self.name.clone(),
            index,
            shape: self.shape.clone(),
        })
    }
}

impl Leaf {
    #[inline(always)]
    fn eval(&self, f: &Frame, lane: usize) -> Result<i64, Fault> {
        match self {
            Leaf::Const(v) => Ok(*v),
            Leaf::Slot(s) => Ok(f.scalars[*s].as_int()),
            Leaf::Node(node) => Ok(node(f, lane)?.as_int()),
        }
    }
}

// The closures specialized by `with_type!` are built outside the recursive `Compiler::node`:
// in a debug build every one of them takes its own stack slots, and kept inline they made each
// level of `node` ~90 KiB, so deep expressions (the `math` expansions) overflowed a test
// thread's stack.

#[inline(never)]
fn binary_fn(op: BinOp, ty: ScalarType, a: Operand, b: Operand) -> ExprFn {
    macro_rules! binary {
        ($($op:ident)*) => {
            match op {
                $(BinOp::$op => with_type!(ty, T => Box::new(move |f, l| {
                    Ok(scalar::binary(BinOp::$op, T, a.eval(f, l)?, b.eval(f, l)?))
                })),)*
            }
        };
    }
    binary!(Add Sub Mul Div Mod Min Max And Or Xor Shl Shr)
}

#[inline(never)]
fn cast_fn(from: ScalarType, to: ScalarType, a: Operand, saturating: bool) -> ExprFn {
    with_type!(from, FROM => with_type!(to, TO => Box::new(move |f, l| {
        Ok(scalar::cast(FROM, TO, a.eval(f, l)?, saturating))
    })))
}

#[inline(never)]
fn round_fn(ty: ScalarType, a: Operand) -> ExprFn {
    with_type!(ty, T => Box::new(move |f, l| Ok(scalar::round(T, a.eval(f, l)?))))
}

#[inline(never)]
fn sqrt_fn(ty: ScalarType, a: Operand) -> ExprFn {
    with_type!(ty, T => Box::new(move |f, l| Ok(scalar::sqrt(T, a.eval(f, l)?))))
}
