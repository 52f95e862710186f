//! Workload keys: a stable identity of a tensor-expression definition, for records of tuned
//! schedules.
//!
//! The key is the SHA-256 of the definition's canonical text (`canonical_definition`): every
//! tensor, in a deterministic walk from the outputs (each tensor after the tensors it reads, in
//! the order it reads them), with its shape, dtype, value range and body printed in the IR's
//! text format, after renaming tensors `t0, t1, ...` in that order and the axes of each compute
//! by position (`i, j, k, ...` for data axes, `r0, r1, ...` for reduction axes). Names, ids,
//! the process and the machine therefore do not change the key; any difference in shapes,
//! dtypes, value ranges, constants or the structure of a body does. Custom reducers are printed
//! with their name, combiner and identity. The key changes when the canonical text changes (the
//! IR printer's format included): its test holds a golden key that is re-blessed on purpose.

use rustc_hash::FxHashMap as HashMap;
use std::fmt::Write;

use sha2::{Digest, Sha256};

use crate::expr::{Expr, ExprKind, Var, VarId};
use crate::intrin::TensorIntrin;
use crate::mutator::{Mutator, walk_expr};
use crate::printer::{Renaming, expr_renamed};
use crate::te::{
    IterVar, Operation, Reducer, Tensor, TensorId, compute_axis_name, compute_vec, compute_vec_renamed,
    placeholder_vec_in_range,
};

/// The identity of a workload: `key` for lookups, `summary` for people.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WorkloadKey {
    /// SHA-256 of `canonical_definition`, lowercase hex.
    pub key: String,
    /// The inputs and outputs with dtypes and shapes, and the reductions, e.g.
    /// `u8[1,8,8,16] x i8[32,16,3,3] -> i32[1,6,6,32] (2 computes; sum[3x3x16])`.
    pub summary: String,
}

/// The key of the definition computing `outputs`.
pub fn workload_key(outputs: &[&Tensor]) -> WorkloadKey {
    let canon = Canonical::of(&[], outputs);
    WorkloadKey { key: sha256_hex(&canon.text), summary: canon.summary() }
}

/// The text `workload_key` hashes.
pub fn canonical_definition(outputs: &[&Tensor]) -> String {
    Canonical::of(&[], outputs).text
}

/// The key of an intrinsic's declaration: its inputs in call order, then its compute, renamed
/// like a workload (the inputs first, so that their order is part of the key).
pub fn intrin_key(intrin: &TensorIntrin) -> String {
    // A declaration never changes: its key is computed once (`TensorIntrin::key_with`).
    intrin.key_with(|| declaration_key(intrin)).to_string()
}

/// `intrin_key` computed from the declaration (what the kept key is).
fn declaration_key(intrin: &TensorIntrin) -> String {
    if let Some((gemm, map)) = &intrin.parts {
        return sha256_hex(&format!("{}+{}", intrin_key(gemm), intrin_key(map)));
    }
    let inputs: Vec<&Tensor> = intrin.inputs.iter().collect();
    sha256_hex(&Canonical::of(&inputs, &[&intrin.output]).text)
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A definition walked in canonical order with its canonical names, and its text.
struct Canonical {
    /// Original tensor → its canonical name (`t0, t1, ...`).
    names: HashMap<TensorId, String>,
    /// Original tensor → its renamed copy (`Make::Copy` only).
    renamed: HashMap<TensorId, Tensor>,
    /// The tensors in canonical order: the renamed copies, or the originals (`Make::Print`).
    tensors: Vec<Tensor>,
    outputs: Vec<Tensor>,
    text: String,
    make: Make,
}

/// How the canonical text is made.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Make {
    /// Each body printed with the canonical names in place of its own (`printer::expr_renamed`):
    /// no copy is built.
    Print,
    /// A copy of the definition built with the canonical names and printed (the slow twin the
    /// tests compare `Print` with). `checked`: its computes are checked again as `compute_vec`
    /// checks a new one, rather than made as the checked originals are.
    #[cfg_attr(not(test), allow(dead_code))]
    Copy { checked: bool },
}

impl Canonical {
    fn of(first: &[&Tensor], outputs: &[&Tensor]) -> Canonical {
        Canonical::made(first, outputs, Make::Print)
    }

    fn made(first: &[&Tensor], outputs: &[&Tensor], make: Make) -> Canonical {
        let mut c = Canonical {
            names: HashMap::default(),
            renamed: HashMap::default(),
            tensors: Vec::new(),
            outputs: Vec::new(),
            text: String::new(),
            make,
        };
        for t in first.iter().chain(outputs) {
            c.visit(t);
        }
        c.outputs = match make {
            Make::Print => outputs.iter().map(|&t| t.clone()).collect(),
            Make::Copy { .. } => outputs.iter().map(|t| c.renamed[&t.id()].clone()).collect(),
        };
        let names = |ts: &[&Tensor]| ts.iter().map(|t| c.names[&t.id()].as_str()).collect::<Vec<_>>().join(", ");
        let mut head = String::new();
        if !first.is_empty() {
            let _ = writeln!(head, "inputs {}", names(first));
        }
        let _ = writeln!(head, "outputs {}", names(outputs));
        c.text.push_str(&head);
        c
    }

    fn visit(&mut self, tensor: &Tensor) {
        if self.names.contains_key(&tensor.id()) {
            return;
        }
        for input in tensor.inputs() {
            self.visit(&input);
        }
        let name = format!("t{}", self.tensors.len());
        self.names.insert(tensor.id(), name.clone());
        let printed = match self.make {
            Make::Print => tensor.clone(),
            Make::Copy { checked } => {
                let copy = self.copy(tensor, &name, checked);
                self.renamed.insert(tensor.id(), copy.clone());
                copy
            }
        };
        // A compute's copy takes its body's dtype (`compute_vec_renamed`).
        let dtype = printed.body().map_or(printed.dtype(), Expr::dtype);
        let _ = write!(self.text, "{name}: {dtype}{:?}", printed.shape());
        match (printed.body(), printed.value_range()) {
            (Some(body), _) => {
                let text = match self.make {
                    Make::Print => {
                        let vars = canonical_vars(tensor.axes(), body);
                        expr_renamed(body, Renaming { vars: &vars, tensors: &self.names })
                    }
                    Make::Copy { .. } => body.to_string(),
                };
                let _ = write!(self.text, " = {text}");
                if let ExprKind::Reduce(r) = body.kind()
                    && let Reducer::Custom(c) = &r.reducer
                {
                    let _ = write!(
                        self.text,
                        " with {}({}, {}) = {}, identity {}",
                        c.name,
                        c.lhs.name(),
                        c.rhs.name(),
                        c.combine,
                        c.identity
                    );
                }
            }
            (None, Some((lo, hi))) => {
                let _ = write!(self.text, " placeholder in {lo}..={hi}");
            }
            (None, None) => self.text.push_str(" placeholder"),
        }
        self.text.push('\n');
        self.tensors.push(printed);
    }

    /// `tensor` rebuilt as `name`, reading the renamed copies of its inputs.
    fn copy(&self, tensor: &Tensor, name: &str, checked: bool) -> Tensor {
        let shape = tensor.shape().to_vec();
        match (tensor.body(), tensor.value_range()) {
            // The original's shape and dtype were checked when it was made.
            (None, None) => Tensor::from_parts(name, shape, tensor.dtype(), Operation::Placeholder),
            (None, Some((lo, hi))) => placeholder_vec_in_range(shape, tensor.dtype(), lo..=hi, name)
                .expect("the same range was accepted for the original"),
            (Some(body), _) => {
                let axes = tensor.axes();
                let renamed = &self.renamed;
                let body = |idx: &[Expr]| {
                    let vars = axes.iter().map(|a| a.var().clone()).zip(idx.iter().cloned()).collect();
                    Rename { vars, tensors: renamed, reduce_axes: 0 }.mutate_expr(body)
                };
                if checked {
                    compute_vec(shape, body, name).expect("a renamed copy of a well-typed body is well typed")
                } else {
                    // The original was checked when it was made; its copy differs in names only.
                    compute_vec_renamed(shape, body, name)
                }
            }
        }
    }

    /// `u8[1,8,8,16] x i8[32,16,3,3] -> i32[1,6,6,32] (2 computes; sum[3x3x16])`.
    fn summary(&self) -> String {
        let show = |t: &Tensor| {
            let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
            let range = t.value_range().map(|(lo, hi)| format!("({lo}..={hi})")).unwrap_or_default();
            format!("{}[{}]{range}", t.dtype(), dims.join(","))
        };
        let inputs: Vec<String> = self.tensors.iter().filter(|t| t.is_placeholder()).map(show).collect();
        let outputs: Vec<String> = self.outputs.iter().map(show).collect();
        let computes = self.tensors.iter().filter(|t| !t.is_placeholder()).count();
        let reductions: Vec<String> = self
            .tensors
            .iter()
            .filter_map(|t| match t.body().map(|b| b.kind()) {
                Some(ExprKind::Reduce(r)) => {
                    let extents: Vec<String> = r.axes.iter().map(|a| a.extent().to_string()).collect();
                    Some(format!("{}[{}]", r.reducer.name(), extents.join("x")))
                }
                _ => None,
            })
            .collect();
        let plural = if computes == 1 { "" } else { "s" };
        let mut summary = format!("{} -> {} ({computes} compute{plural}", inputs.join(" x "), outputs.join(", "));
        if !reductions.is_empty() {
            let _ = write!(summary, "; {}", reductions.join(", "));
        }
        summary.push(')');
        summary
    }
}

/// Renames a compute body: its axes to the new compute's, its reduction axes to `r0, r1, ...`
/// (fresh identities), and its reads to the renamed tensors.
struct Rename<'a> {
    vars: HashMap<Var, Expr>,
    tensors: &'a HashMap<TensorId, Tensor>,
    reduce_axes: usize,
}

impl Mutator for Rename<'_> {
    fn mutate_expr(&mut self, expr: &Expr) -> Expr {
        match expr.kind() {
            ExprKind::Var(v) => self.vars.get(v).cloned().unwrap_or_else(|| expr.clone()),
            ExprKind::TensorRead(t, idx) => {
                let indices = idx.iter().map(|i| self.mutate_expr(i)).collect();
                self.tensors[&t.id()].at_vec(indices)
            }
            ExprKind::Reduce(r) => {
                let axes: Vec<IterVar> = r
                    .axes
                    .iter()
                    .map(|a| {
                        let fresh = IterVar::new(format!("r{}", self.reduce_axes), a.extent(), a.kind());
                        self.reduce_axes += 1;
                        self.vars.insert(a.var().clone(), fresh.to_expr());
                        fresh
                    })
                    .collect();
                let source = self.mutate_expr(&r.source);
                r.reducer.reduce(expr.dtype(), &axes.iter().collect::<Vec<_>>(), source)
            }
            _ => walk_expr(self, expr),
        }
    }
}

/// The canonical names of a compute's variables, as `Rename` and `compute_vec_renamed` give
/// them: its axes by position (`compute_axis_name`), and its reduction axes `r0, r1, ...` in
/// the order `Rename` meets them (each reduction before its source, children in order).
fn canonical_vars(axes: &[IterVar], body: &Expr) -> HashMap<VarId, String> {
    fn reductions(expr: &Expr, vars: &mut HashMap<VarId, String>, next: &mut usize) {
        match expr.kind() {
            ExprKind::Reduce(r) => {
                for a in &r.axes {
                    vars.insert(a.var().id(), format!("r{next}"));
                    *next += 1;
                }
                reductions(&r.source, vars, next);
            }
            _ => expr.child_iter().for_each(|c| reductions(c, vars, next)),
        }
    }
    let mut vars: HashMap<VarId, String> =
        axes.iter().enumerate().map(|(d, a)| (a.var().id(), compute_axis_name(d))).collect();
    reductions(body, &mut vars, &mut 0);
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;
    use crate::expr::select;
    use crate::te::{compute, max, placeholder, placeholder_in_range, reduce_axis, sum};

    /// A padded 3×3 convolution over a ranged source, with a bias and a requantization, and
    /// a max reduction beside it: every kind of tensor the canonical copy renames.
    fn definitions() -> (Tensor, Vec<Tensor>) {
        let x = placeholder_in_range([1, 4, 6, 6], DType::U8, 0..=100, "X").unwrap();
        let w = placeholder([8, 4, 3, 3], DType::I8, "W").unwrap();
        let pad = compute(
            [1, 4, 8, 8],
            |i| {
                let (y, x_) = (&i[2] - 1, &i[3] - 1);
                let inside = y.ge(0) & y.lt(6) & x_.ge(0) & x_.lt(6);
                select(inside, x.at([&i[0], &i[1], &y, &x_]), Expr::int(DType::U8, 3))
            },
            "Pad",
        )
        .unwrap();
        let (rc, ry, rx) =
            (reduce_axis(4, "rc").unwrap(), reduce_axis(3, "ry").unwrap(), reduce_axis(3, "rx").unwrap());
        let acc = compute(
            [1, 8, 6, 6],
            |i| {
                let src = pad.at([&i[0], &rc, &(&i[2] + &*ry), &(&i[3] + &*rx)]).cast(DType::I32);
                sum(DType::I32, &[&rc, &ry, &rx], src * w.at([&i[1], &rc, &ry, &rx]).cast(DType::I32))
            },
            "Acc",
        )
        .unwrap();
        let out = compute([1, 8, 6, 6], |i| (acc.at([&i[0], &i[1], &i[2], &i[3]]) + 7).cast(DType::U8), "Out").unwrap();
        let r = reduce_axis(8, "r").unwrap();
        let peak = compute([1, 6, 6], |i| max(DType::I32, &[&r], acc.at([&i[0], &r, &i[1], &i[2]])), "Peak").unwrap();
        (x, vec![out, peak])
    }

    /// A GEMM of `k` and a map over its `[m, n]` tile, and the two chained.
    fn gemm_map_declarations(m: i64, n: i64, k: i64) -> [TensorIntrin; 3] {
        use crate::intrin::{Int8GemmSize, IntrinKind, decl_tensor_intrin, int8_gemm_compute};
        let a = placeholder([m, k], DType::U8, "A").unwrap();
        let b = placeholder([k / 4, n, 4], DType::I8, "B").unwrap();
        let c = int8_gemm_compute(&a, &b, Int8GemmSize { m, n, k, segments: 1 }, false, "C").unwrap();
        let kind = IntrinKind::Int8Gemm { m, n, k, segments: 1, saturating: false };
        let gemm = decl_tensor_intrin("gemm", kind, &c, &[&a, &b]).unwrap();
        let acc = placeholder([m, n], DType::I32, "acc").unwrap();
        let s = placeholder([n], DType::F32, "s").unwrap();
        let out = compute(
            [m, n],
            |i| (acc.at([&i[0], &i[1]]).cast(DType::F32) * s.at([&i[1]])).round().saturating_cast(DType::U8),
            "out",
        )
        .unwrap();
        let map = decl_tensor_intrin("rq", IntrinKind::Map { m, n }, &out, &[&acc, &s]).unwrap();
        let chained = crate::composite::gemm_map(&gemm, &map).unwrap();
        [gemm, map, chained]
    }

    /// The key kept with a declaration is the one computed from it, whichever is asked first
    /// (the chained one or its parts), and the same for an equal declaration built apart.
    #[test]
    fn the_kept_intrinsic_key_is_the_declarations() {
        let [gemm, map, chained] = gemm_map_declarations(4, 16, 32);
        let fresh: Vec<String> = [&gemm, &map, &chained].iter().map(|i| declaration_key(i)).collect();
        assert_eq!(intrin_key(&chained), fresh[2]);
        assert_eq!(
            [intrin_key(&gemm), intrin_key(&map), intrin_key(&chained)],
            [&fresh[0], &fresh[1], &fresh[2]].map(String::clone)
        );
        let [gemm2, map2, chained2] = gemm_map_declarations(4, 16, 32);
        assert_eq!(
            [intrin_key(&map2), intrin_key(&gemm2), intrin_key(&chained2)],
            [&fresh[1], &fresh[0], &fresh[2]].map(String::clone)
        );
        let [other_gemm, _, other] = gemm_map_declarations(4, 16, 64);
        assert_ne!(intrin_key(&other_gemm), fresh[0]);
        assert_ne!(intrin_key(&other), fresh[2]);
        assert_eq!(intrin_key(&other), declaration_key(&other));
    }

    /// The canonical copy made without checks is the one made with them: the same text, and
    /// computes of the same shapes, dtypes and bodies; and the text printed without a copy
    /// (`Make::Print`, what the keys use) is the copies' text, with the same summary.
    #[test]
    fn the_unchecked_canonical_copy_is_the_checked_one() {
        let (x, defs) = definitions();
        let outputs: Vec<&Tensor> = defs.iter().collect();
        for first in [vec![], vec![&x]] {
            let fast = Canonical::made(&first, &outputs, Make::Copy { checked: false });
            let slow = Canonical::made(&first, &outputs, Make::Copy { checked: true });
            assert!(fast.text.contains("max") && fast.text.contains("placeholder in 0..=100"), "{}", fast.text);
            assert_eq!(fast.text, slow.text);
            assert_eq!(fast.tensors.len(), slow.tensors.len());
            for (f, s) in fast.tensors.iter().zip(&slow.tensors) {
                assert_eq!((f.shape(), f.dtype(), f.name()), (s.shape(), s.dtype(), s.name()));
                assert_eq!(f.body().map(|b| b.to_string()), s.body().map(|b| b.to_string()));
            }
            let printed = Canonical::made(&first, &outputs, Make::Print);
            assert!(printed.text.contains("r0 in 0..4") && printed.text.contains("t1["), "{}", printed.text);
            assert_eq!(printed.text, slow.text);
            assert_eq!(printed.summary(), slow.summary());
        }
    }

    /// The text printed without a copy is the copy's for intrinsic declarations too (inputs
    /// first, a GEMM reduction and a requantizing map).
    #[test]
    fn printed_declarations_are_their_copies() {
        let [gemm, map, _] = gemm_map_declarations(4, 16, 32);
        for intrin in [gemm, map] {
            let inputs: Vec<&Tensor> = intrin.inputs.iter().collect();
            let printed = Canonical::made(&inputs, &[&intrin.output], Make::Print);
            let copied = Canonical::made(&inputs, &[&intrin.output], Make::Copy { checked: true });
            assert!(printed.text.contains("\ninputs t0, t1\n"), "{}", printed.text);
            assert_eq!(printed.text, copied.text);
            assert_eq!(printed.summary(), copied.summary());
        }
    }

    /// A body that reads an input twice, nests reductions and names its own axes like the
    /// canonical ones (`i`, `r1`): the printed text still equals the copy's.
    #[test]
    fn printed_text_with_clashing_names_is_the_copys() {
        let a = placeholder([6, 5], DType::I32, "t1").unwrap();
        let (r1, r0) = (reduce_axis(5, "r1").unwrap(), reduce_axis(6, "i").unwrap());
        let inner = compute([6], |i| sum(DType::I32, &[&r1], a.at([&i[0], &r1]) * a.at([&i[0], &r1])), "j").unwrap();
        let out =
            compute([3], |i| max(DType::I32, &[&r0], inner.at([&r0]) + i[0].clone().cast(DType::I32)), "i").unwrap();
        let printed = Canonical::made(&[], &[&out], Make::Print);
        let copied = Canonical::made(&[], &[&out], Make::Copy { checked: true });
        assert_eq!(printed.text, copied.text);
        assert_eq!(workload_key(&[&out]).key, sha256_hex(&copied.text));
    }
}
