//! Fusion of a GEMM's epilogue: the element-wise `Map` that reads an accumulator buffer filled
//! by resetting GEMM calls moves into those calls, which become `IntrinKind::GemmMap` calls
//! (`composite`), so that a kernel maps each accumulator tile while it is in registers.

use rustc_hash::FxHashMap as HashMap;

use crate::analysis::linear::Linear;
use crate::composite::{call_nest, gemm_map, map_tile};
use crate::dtype::DType;
use crate::expr::{BinOp, Expr, ExprKind, Var};
use crate::intrin::{IntrinKind, TensorIntrin};
use crate::mutator::{Mutator, for_each_stmt, substitute, walk_stmt};
use crate::stmt::{Buffer, ForKind, Func, Operand, Stmt, StmtKind};

/// Tile points and map cells the proof enumerates at most; larger patterns stay as they are.
const MAX_POINTS: i64 = 1 << 16;
const MAX_CELLS: i64 = 1 << 22;

/// Rewrites, in every `Allocate` of an accumulator `acc` whose body (inside allocations of
/// other buffers) runs, one after the other, nests of `For` loops (each alone, or at the end of
/// allocations of other buffers after statements not touching `acc`) each around one
/// resetting `Int8Gemm`/`Int16Gemm` call writing an
/// `[mr, nr]` tile of `acc`, then a nest of at most one `For` loop around one `Map` call
/// reading `acc` as its input 0: each GEMM call becomes a `GemmMap` call of the GEMM and the
/// Map resized to the tile (`composite::map_tile`), whose other operands are offset to the
/// tile (an `[n]` operand by its column, an `[m, n]` one by its row and column), and the Map
/// nest goes. `acc`'s allocation goes when nothing reads it any more.
///
/// Only where it provably computes the same: the flat offsets are linear in terms the proof
/// evaluates (loop variables, their quotients and remainders by constants, as in one fused
/// parallel tile loop: `Let`s between the loops are substituted), the tiles (enumerated, each
/// term's value at each point) cover every element the Map calls read exactly once,
/// each tile inside one Map call's block, with the Map's row stride, or starting in its
/// columns and ending past them within the row stride (the last panel of an output that is
/// not a whole number of panels: that tile's Map is resized to the columns it reads, and
/// where only some tiles are such, they must be the last iteration of the nest's outermost
/// loop, which is peeled into a nest of its own, in the same order); the Map writes no buffer
/// a GEMM reads; nothing else in the allocation touches `acc` between them. Run after
/// `flatten_buffers` (origins are flat). A fused call's fallback is the two calls on a
/// temporary tile, each with its declaration's loop nest as fallback.
pub fn fuse_epilogues(func: &Func) -> Func {
    let body = FuseEpilogues { fused: HashMap::default() }.mutate_stmt(&func.body);
    Func { name: func.name.clone(), params: func.params.clone(), body }
}

struct FuseEpilogues {
    /// Composites built so far, by (GEMM, Map) declaration identity and the columns mapped.
    fused: HashMap<(usize, usize, i64), (TensorIntrin, TensorIntrin)>,
}

impl Mutator for FuseEpilogues {
    fn mutate_stmt(&mut self, stmt: &Stmt) -> Stmt {
        let walked = walk_stmt(self, stmt);
        let StmtKind::Allocate { buffer, body } = walked.kind() else { return walked };
        let Some(fused) = self.fuse(buffer, body) else { return walked };
        if touches(&fused, buffer) { Stmt::allocate(buffer.clone(), fused) } else { fused }
    }
}

/// Whether `stmt` loads or stores `buffer`, or passes it to a call.
fn touches(stmt: &Stmt, buffer: &Buffer) -> bool {
    let mut found = false;
    crate::mutator::for_each_stmt_expr(stmt, &mut |e| {
        e.for_each(&mut |x| found |= matches!(x.kind(), ExprKind::Load(b, _) if b == buffer))
    });
    for_each_stmt(stmt, &mut |s| match s.kind() {
        StmtKind::Store { buffer: b, .. } => found |= b == buffer,
        StmtKind::Call { operands, .. } => found |= operands.iter().any(|o| &o.buffer == buffer),
        _ => {}
    });
    found
}

/// The statements of `stmt`, nested sequences flattened.
fn flatten(stmt: &Stmt, out: &mut Vec<Stmt>) {
    match stmt.kind() {
        StmtKind::Seq(stmts) => stmts.iter().for_each(|s| flatten(s, out)),
        _ => out.push(stmt.clone()),
    }
}

/// A nest of `For` loops around one call; the `Let`s between them substituted into the
/// call's operands.
#[derive(Clone)]
struct Nest {
    loops: Vec<(Var, i64, ForKind)>,
    intrin: TensorIntrin,
    operands: Vec<Operand>,
    reset: bool,
}

fn nest(stmt: &Stmt) -> Option<Nest> {
    let mut loops = Vec::new();
    let mut lets = Vec::new();
    let mut s = stmt;
    loop {
        match s.kind() {
            StmtKind::For { var, extent, kind, body } if *kind != ForKind::Vectorized => {
                loops.push((var.clone(), *extent, *kind));
                s = body;
            }
            StmtKind::Let { var, value, body } => {
                lets.push((var.clone(), value.clone()));
                s = body;
            }
            StmtKind::Call { intrin, operands, reset, .. } => {
                // Innermost first: a value may name an outer `Let`'s variable.
                let bound =
                    |e: &Expr| lets.iter().rev().fold(e.clone(), |e, pair| substitute(&e, std::slice::from_ref(pair)));
                let operands = operands
                    .iter()
                    .map(|o| Operand { origin: o.origin.iter().map(bound).collect(), ..o.clone() })
                    .collect();
                return Some(Nest { loops, intrin: intrin.clone(), operands, reset: *reset });
            }
            _ => return None,
        }
    }
}

/// A statement writing `acc` by GEMM calls: one nest, or allocations of other buffers (a
/// padded source's) around statements that do not touch `acc` (`prefix`), then nests only.
struct Site {
    allocations: Vec<Buffer>,
    prefix: Vec<Stmt>,
    nests: Vec<Nest>,
}

fn site(stmt: &Stmt, acc: &Buffer) -> Option<Site> {
    if let Some(n) = nest(stmt) {
        return Some(Site { allocations: Vec::new(), prefix: Vec::new(), nests: vec![n] });
    }
    let (mut allocations, mut s) = (Vec::new(), stmt);
    while let StmtKind::Allocate { buffer, body } = s.kind()
        && buffer != acc
    {
        allocations.push(buffer.clone());
        s = body;
    }
    if allocations.is_empty() {
        return None;
    }
    let mut stmts = Vec::new();
    flatten(s, &mut stmts);
    let first = stmts.iter().position(|x| touches(x, acc))?;
    let nests = stmts[first..].iter().map(nest).collect::<Option<Vec<_>>>()?;
    Some(Site { allocations, prefix: stmts[..first].to_vec(), nests })
}

/// A flat offset as `Σ coefficient · term + constant`, each term an index expression of
/// `loops`' variables that `value` evaluates (a variable, or, say, the quotient and remainder
/// of a fused loop's variable by a constant): the terms and the coefficients, the constant.
fn linear(e: &Expr, loops: &[(Var, i64, ForKind)]) -> Option<(Vec<Expr>, Vec<i64>, i64)> {
    let form = Linear::of(e);
    let zero = vec![0; loops.len()];
    let mut terms = Vec::new();
    let mut coefficients = Vec::new();
    for (term, c) in &form.terms {
        value(term, loops, &zero)?;
        terms.push(term.clone());
        coefficients.push(*c);
    }
    Some((terms, coefficients, form.constant))
}

/// The value of the index expression `e` where `loops`' variables are `at`; `None` for any
/// other variable or node (loads, calls, selects ...) and on overflow. Division and modulo
/// floor, by zero give zero (`expr`'s semantics).
fn value(e: &Expr, loops: &[(Var, i64, ForKind)], at: &[i64]) -> Option<i64> {
    match e.kind() {
        ExprKind::Int(v) if e.dtype() == DType::INDEX => Some(*v),
        ExprKind::Var(v) => loops.iter().position(|(l, _, _)| l == v).map(|d| at[d]),
        ExprKind::Binary(op, a, b) if e.dtype() == DType::INDEX => {
            let (a, b) = (value(a, loops, at)?, value(b, loops, at)?);
            match op {
                BinOp::Add => a.checked_add(b),
                BinOp::Sub => a.checked_sub(b),
                BinOp::Mul => a.checked_mul(b),
                BinOp::Div if b == 0 => Some(0),
                BinOp::Div => a.checked_div_euclid(b).map(|q| if b < 0 && a.rem_euclid(b) != 0 { q - 1 } else { q }),
                BinOp::Mod if b == 0 => Some(0),
                BinOp::Mod => a.checked_rem_euclid(b).map(|r| if b < 0 && r != 0 { r + b } else { r }),
                BinOp::Min => Some(a.min(b)),
                BinOp::Max => Some(a.max(b)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `Σ c_t · term_t + constant` as an index expression.
fn linear_expr(coefficients: &[i64], terms: &[Expr], constant: i64) -> Expr {
    let mut scaled = coefficients
        .iter()
        .zip(terms)
        .filter(|(c, _)| **c != 0)
        .map(|(&c, t)| if c == 1 { t.clone() } else { t.clone() * c });
    let first = scaled.next().unwrap_or_else(|| Expr::index(constant));
    let sum = scaled.fold(first.clone(), |acc, t| acc + t);
    if constant != 0 && !first.is_const() { sum + Expr::index(constant) } else { sum }
}

/// Where a tile lies in the Map's blocks: block `u`, row `p`, column `c`, as linear forms
/// (coefficients over the nest's offset's terms, constant).
#[derive(Clone)]
struct Placement {
    terms: Vec<Expr>,
    u: (Vec<i64>, i64),
    p: (Vec<i64>, i64),
    c: (Vec<i64>, i64),
}

impl FuseEpilogues {
    fn fuse(&mut self, acc: &Buffer, body: &Stmt) -> Option<Stmt> {
        // Through the allocations of other buffers (a padded source's, inside the accumulator's).
        if let StmtKind::Allocate { buffer, body: inner } = body.kind()
            && buffer != acc
        {
            return self.fuse(acc, inner).map(|fused| Stmt::allocate(buffer.clone(), fused));
        }
        let mut stmts = Vec::new();
        flatten(body, &mut stmts);
        let users: Vec<usize> = (0..stmts.len()).filter(|&i| touches(&stmts[i], acc)).collect();
        let (&last, first) = (users.last()?, users[0]);
        if users.len() < 2 || last - first + 1 != users.len() {
            return None;
        }
        let map = nest(&stmts[last])?;
        let sites: Vec<Site> = stmts[first..last].iter().map(|s| site(s, acc)).collect::<Option<_>>()?;
        let gemms: Vec<&Nest> = sites.iter().flat_map(|s| &s.nests).collect();
        let mut fused = self.rewrite(acc, &gemms, &map)?.into_iter();
        let mut out: Vec<Stmt> = stmts[..first].to_vec();
        for site in &sites {
            let mut body = site.prefix.clone();
            body.extend(fused.by_ref().take(site.nests.len()));
            let body = Stmt::seq(body);
            out.push(site.allocations.iter().rev().fold(body, |b, buffer| Stmt::allocate(buffer.clone(), b)));
        }
        out.extend(stmts[last + 1..].iter().cloned());
        Some(Stmt::seq(out))
    }

    fn rewrite(&mut self, acc: &Buffer, gemms: &[&Nest], map: &Nest) -> Option<Vec<Stmt>> {
        let IntrinKind::Map { m: big_m, n: big_n } = map.intrin.kind else { return None };
        let (map_acc, others) = map.operands.split_first()?;
        if map.reset || map_acc.buffer != *acc || others.iter().any(|o| o.buffer == *acc) || map_acc.origin.len() != 1 {
            return None;
        }
        let ld = match map_acc.strides[..] {
            [ld, 1] if ld >= big_n => ld,
            _ => return None,
        };
        // The Map's blocks: `blocks` of them, `big_m · ld` elements apart from `base`.
        let (map_terms, map_coefficients, base) = linear(&map_acc.origin[0], &map.loops)?;
        let block = big_m * ld;
        let (u_var, blocks) = match map.loops.as_slice() {
            [] if map_terms.is_empty() => (None, 1),
            [(v, extent, _)] if map_coefficients == [block] && map_terms[0].as_var() == Some(v) => {
                (Some(v.clone()), *extent)
            }
            _ => return None,
        };
        if blocks * big_m * big_n > MAX_CELLS {
            return None;
        }
        let mut covered = Cells::new(blocks * big_m * big_n);
        let mut pieces = Vec::new();
        for g in gemms {
            let (m, n) = match g.intrin.kind {
                IntrinKind::Int8Gemm { m, n, .. } | IntrinKind::Int16Gemm { m, n, .. } => (m, n),
                _ => return None,
            };
            let (inputs, c) = g.operands.split_at(g.operands.len().checked_sub(1)?);
            let c = &c[0];
            let writes_only_acc = c.buffer == *acc && inputs.iter().all(|o| o.buffer != *acc);
            let reads_no_output = inputs.iter().all(|o| o.buffer != others.last().expect("an output").buffer);
            if !g.reset || !writes_only_acc || !reads_no_output || c.origin.len() != 1 || c.strides != [ld, 1] {
                return None;
            }
            let (terms, coefficients, constant) = linear(&c.origin[0], &g.loops)?;
            let placement = place(terms, &coefficients, constant.checked_sub(base)?, block, ld);
            let widths = covers(&placement, &g.loops, (m, n), (blocks, big_m, big_n, ld), &mut covered)?;
            pieces.push(split_partial(g, placement, &widths)?);
        }
        if !covered.all() {
            return None;
        }
        let mut out = Vec::with_capacity(pieces.len());
        for nest_pieces in &pieces {
            let stmts = nest_pieces
                .iter()
                .map(|(g, placement, width)| self.fused_nest(g, map, u_var.as_ref(), placement, *width))
                .collect::<Option<Vec<_>>>()?;
            out.push(Stmt::seq(stmts));
        }
        Some(out)
    }

    /// `g` with its GEMM call replaced by the `GemmMap` call at `placement`, mapping the tile's
    /// first `width` columns.
    fn fused_nest(
        &mut self,
        g: &Nest,
        map: &Nest,
        u_var: Option<&Var>,
        placement: &Placement,
        width: i64,
    ) -> Option<Stmt> {
        let (IntrinKind::Int8Gemm { m, n, .. } | IntrinKind::Int16Gemm { m, n, .. }) = g.intrin.kind else {
            return None;
        };
        let key = (std::ptr::from_ref(&*g.intrin) as usize, std::ptr::from_ref(&*map.intrin) as usize, width);
        let (fused, tile_map) = match self.fused.get(&key) {
            Some(found) => found.clone(),
            None => {
                let tile_map = map_tile(&map.intrin, m, width).ok()?;
                let fused = gemm_map(&g.intrin, &tile_map).ok()?;
                self.fused.insert(key, (fused.clone(), tile_map.clone()));
                (fused, tile_map)
            }
        };
        let expr = |(coefficients, constant): &(Vec<i64>, i64)| linear_expr(coefficients, &placement.terms, *constant);
        let (u, p, c) = (expr(&placement.u), expr(&placement.p), expr(&placement.c));
        let mut operands: Vec<Operand> = g.operands[..g.operands.len() - 1].to_vec();
        for o in &map.operands[1..] {
            let origin = match u_var {
                Some(v) => substitute(&o.origin[0], &[(v.clone(), u.clone())]),
                None => o.origin[0].clone(),
            };
            let origin = match o.strides[..] {
                [row, 1] => origin + p.clone() * row + c.clone(),
                [1] => origin + c.clone(),
                _ => return None,
            };
            operands.push(Operand { buffer: o.buffer.clone(), origin: vec![origin], strides: o.strides.clone() });
        }
        // The fallback: both calls on a temporary tile.
        let c_operand = g.operands.last().expect("an output");
        let tile = Buffer::new(format!("{}.tile", c_operand.buffer.name()), c_operand.buffer.dtype(), vec![m, n]);
        let at_tile = Operand { buffer: tile.clone(), origin: vec![Expr::index(0)], strides: vec![n, 1] };
        let mut gemm_operands = g.operands[..g.operands.len() - 1].to_vec();
        gemm_operands.push(at_tile.clone());
        let mut map_operands = vec![at_tile];
        map_operands.extend(operands[gemm_operands.len() - 1..].iter().cloned());
        let gemm_call =
            Stmt::call(g.intrin.clone(), gemm_operands.clone(), true, call_nest(&g.intrin, &gemm_operands, true)?);
        let map_call =
            Stmt::call(tile_map.clone(), map_operands.clone(), false, call_nest(&tile_map, &map_operands, false)?);
        let fallback = Stmt::allocate(tile, Stmt::seq(vec![gemm_call, map_call]));
        let call = Stmt::call(fused, operands, false, fallback);
        Some(g.loops.iter().rev().fold(call, |body, (v, extent, kind)| Stmt::for_loop(v.clone(), *extent, *kind, body)))
    }
}

/// The tile at flat offset `Σ coefficients · terms + offset` from the Map's first block, split
/// by each term's coefficient: multiples of `block` pick the block, other multiples of `ld` the
/// row, the rest the column. `covers` checks that the split is the true one at every point.
fn place(terms: Vec<Expr>, coefficients: &[i64], offset: i64, block: i64, ld: i64) -> Placement {
    let (mut u, mut p, mut c) = (vec![0; coefficients.len()], vec![0; coefficients.len()], vec![0; coefficients.len()]);
    for (d, &k) in coefficients.iter().enumerate() {
        if k % block == 0 {
            u[d] = k / block;
        } else if k % ld == 0 {
            p[d] = k / ld;
        } else {
            c[d] = k;
        }
    }
    let u0 = offset.div_euclid(block);
    let rest = offset - u0 * block;
    let p0 = rest.div_euclid(ld);
    Placement { terms, u: (u, u0), p: (p, p0), c: (c, rest - p0 * ld) }
}

/// The Map's cells as bits, one per element, set as tiles cover them.
struct Cells {
    words: Vec<u64>,
    len: usize,
}

impl Cells {
    fn new(len: i64) -> Cells {
        let len = len as usize;
        Cells { words: vec![0; len.div_ceil(64)], len }
    }

    /// Sets cells `start..start + count` (in range); false, and nothing set, if one of them was
    /// set already.
    fn mark(&mut self, start: usize, count: usize) -> bool {
        if count == 0 {
            return true;
        }
        // The first and last words' masks; the words between are whole.
        let end = start + count;
        let (first, last) = (start / 64, (end - 1) / 64);
        let below = |bit: usize| if bit == 64 { u64::MAX } else { (1u64 << bit) - 1 };
        let head = !below(start % 64);
        let tail = below(end - last * 64);
        if first == last {
            let mask = head & tail;
            if self.words[first] & mask != 0 {
                return false;
            }
            self.words[first] |= mask;
            return true;
        }
        let words = &mut self.words[first..=last];
        if words[0] & head != 0
            || words[words.len() - 1] & tail != 0
            || words[1..words.len() - 1].iter().any(|&w| w != 0)
        {
            return false;
        }
        let n = words.len();
        words[1..n - 1].fill(u64::MAX);
        self.words[first] |= head;
        self.words[last] |= tail;
        true
    }

    /// Whether every cell is set.
    fn all(&self) -> bool {
        let (full, rest) = (self.len / 64, self.len % 64);
        self.words[..full].iter().all(|&w| w == u64::MAX) && (rest == 0 || self.words[full] == (1u64 << rest) - 1)
    }
}

/// At every point of `loops` (the last loop fastest), the columns of the `m × n` tile the
/// Map reads: the tile lies in one block of the Map (`blocks × rows × columns`, rows `ld`
/// elements apart), starting in its columns, and its columns past them (within `ld`) are
/// read by no Map call. Marks the cells read in `covered`; `None` where a cell is marked
/// twice, a tile lies elsewhere, or the points are too many to enumerate.
fn covers(
    placement: &Placement,
    loops: &[(Var, i64, ForKind)],
    (m, n): (i64, i64),
    (blocks, rows, columns, ld): (i64, i64, i64, i64),
    covered: &mut Cells,
) -> Option<Vec<i64>> {
    let points: i64 = loops.iter().map(|(_, e, _)| *e).product();
    if points > MAX_POINTS || loops.iter().any(|(_, e, _)| *e <= 0) {
        return None;
    }
    let eval = |(k, c0): &(Vec<i64>, i64), values: &[i64]| {
        k.iter().zip(values).try_fold(*c0, |sum, (k, v)| sum.checked_add(k.checked_mul(*v)?))
    };
    let mut widths = Vec::with_capacity(points as usize);
    let mut at = vec![0; loops.len()];
    let mut values = vec![0; placement.terms.len()];
    for _ in 0..points {
        for (v, t) in values.iter_mut().zip(&placement.terms) {
            *v = value(t, loops, &at)?;
        }
        let (u, p, c) = (eval(&placement.u, &values)?, eval(&placement.p, &values)?, eval(&placement.c, &values)?);
        if u < 0 || u >= blocks || p < 0 || p + m > rows || c < 0 || c >= columns || c + n > ld {
            return None;
        }
        let width = n.min(columns - c);
        let first = ((u * rows + p) * columns + c) as usize;
        // Rows as wide as the block follow each other: the tile's cells are one run.
        let marked = if width == columns {
            covered.mark(first, (m * columns) as usize)
        } else {
            (0..m as usize).all(|r| covered.mark(first + r * columns as usize, width as usize))
        };
        if !marked {
            return None;
        }
        widths.push(width);
        // The next point, the last loop fastest.
        for d in (0..loops.len()).rev() {
            at[d] += 1;
            if at[d] < loops[d].1 {
                break;
            }
            at[d] = 0;
        }
    }
    Some(widths)
}

/// `g` as nests that each map one width of tile (`widths`, per point as `covers` gives them):
/// itself, where every tile maps the same columns; else, where only the last iteration of
/// its outermost loop maps fewer (the last panel of an output whose columns are not a whole
/// number of panels), that loop without it, then that iteration (the order is the same).
fn split_partial(g: &Nest, placement: Placement, widths: &[i64]) -> Option<Vec<(Nest, Placement, i64)>> {
    let whole = widths[0];
    if widths.iter().all(|w| *w == whole) {
        return Some(vec![(g.clone(), placement, whole)]);
    }
    let (var, extent, _) = g.loops.first()?.clone();
    let rest = (widths.len() as i64 / extent * (extent - 1)) as usize;
    let last = widths[rest];
    if widths[..rest].iter().any(|w| *w != whole) || widths[rest..].iter().any(|w| *w != last) {
        return None;
    }
    let mut loops = g.loops.clone();
    loops[0].1 = extent - 1;
    let head = Nest { loops, ..g.clone() };
    let pair = [(var, Expr::index(extent - 1))];
    let at_last = |e: &Expr| substitute(e, &pair);
    let operands =
        g.operands.iter().map(|o| Operand { origin: o.origin.iter().map(at_last).collect(), ..o.clone() }).collect();
    let tail = Nest { loops: g.loops[1..].to_vec(), operands, ..g.clone() };
    let tail_placement = Placement { terms: placement.terms.iter().map(at_last).collect(), ..placement.clone() };
    Some(vec![(head, placement, whole), (tail, tail_placement, last)])
}

#[cfg(test)]
mod tests {
    use super::Cells;

    /// `Cells` against one bool per cell: random ranges across word boundaries, overlaps
    /// refused, `all` only once every cell is set.
    #[test]
    fn cells_agree_with_one_bool_per_cell() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |bound: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % bound as u64) as usize
        };
        for len in [1usize, 63, 64, 65, 200, 1000, 5000] {
            let (mut cells, mut bools) = (Cells::new(len as i64), vec![false; len]);
            for _ in 0..400 {
                let start = next(len);
                let count = 1 + next((len - start).min(700));
                let expected = bools[start..start + count].iter().all(|b| !b);
                assert_eq!(cells.mark(start, count), expected, "len {len} at {start} count {count}");
                if expected {
                    bools[start..start + count].iter_mut().for_each(|b| *b = true);
                }
                assert_eq!(cells.all(), bools.iter().all(|&b| b), "len {len}");
            }
            // Cover whatever is left cell by cell, then everything is set.
            for (i, &set) in bools.iter().enumerate() {
                assert_eq!(cells.mark(i, 1), !set);
            }
            assert!(cells.all());
        }
    }
}
