//! Printing: one line per op (`op3 "conv1" Convolution(t1, t2) -> t4: u8[1,64,56,56]`) and one
//! line per partition (`p2 QuantizedConv [dq_x, dq_w, conv1, relu, q] (t1) -> (t9)`), as
//! `tensorlift run` shows which ops each partition fuses.

use std::fmt::{self, Write as _};

use super::finalize::FinalizedGraph;
use super::op::OpId;
use super::partition::{Activation, Partition, PartitionKind};

/// Displays op `id` of `graph` on one line: id, name, kind, inputs, outputs with type and shape.
pub struct OpLine<'a> {
    pub graph: &'a FinalizedGraph,
    pub id: OpId,
}

impl fmt::Display for OpLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(op) = self.graph.op(self.id) else { return write!(f, "{} (not an op of this graph)", self.id) };
        let ins: Vec<String> = op.inputs.iter().map(ToString::to_string).collect();
        write!(f, "{} {:?} {}({}) ->", self.id, op.name, op.kind.name(), ins.join(", "))?;
        for &t in &op.outputs {
            match self.graph.tensor(t) {
                Some(lt) => write!(f, " {t}: {}{}", lt.dtype, lt.shape)?,
                None => write!(f, " {t}")?,
            }
        }
        Ok(())
    }
}

/// Displays a partition on one line: id, kind with its key parameters, the names of the ops
/// it computes, its inputs and outputs.
pub struct PartitionLine<'a> {
    pub graph: &'a FinalizedGraph,
    pub partition: &'a Partition,
}

impl fmt::Display for PartitionLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.partition;
        write!(f, "{} {}", p.id, p.kind.name())?;
        let act = |a: Activation| match a {
            Activation::None => String::new(),
            Activation::ReLU => "+relu".into(),
            Activation::Clip { min, max } => format!("+clip({min},{max})"),
        };
        let detail = match &p.kind {
            PartitionKind::QuantizedConv(c) => {
                let mut s = format!("{}→{} w{:?}", c.src.dtype, c.dst.dtype, c.weight_dims);
                if c.groups != 1 {
                    let _ = write!(s, " groups {}", c.groups);
                }
                if c.bias.is_some() {
                    s.push_str("+bias");
                }
                s += &act(c.activation);
                if let Some(r) = &c.residual {
                    let _ = write!(s, "+sum→{}{}", r.add.dst.dtype, act(r.add.activation));
                }
                s
            }
            PartitionKind::QuantizedMatMul(m) => {
                let s = format!(
                    "{}→{} w{:?}{}",
                    m.src.dtype,
                    m.dst.dtype,
                    m.weight_dims,
                    if m.bias.is_some() { "+bias" } else { "" }
                );
                s + &act(m.activation)
            }
            PartitionKind::QuantizedAdd(a) => {
                format!("{}+{}→{}{}", a.a.dtype, a.b.dtype, a.dst.dtype, act(a.activation))
            }
            PartitionKind::QuantizedMaxPool(m) => format!("{} k{:?} s{:?}", m.dtype, m.window.kernel, m.window.strides),
            PartitionKind::QuantizedGlobalAvgPool(a) => format!("{}→{}", a.src.dtype, a.dst.dtype),
            PartitionKind::Single(k) => k.name().to_string(),
            PartitionKind::Unsupported { op, reason } => format!("{}: {reason}", op.name()),
        };
        let names: Vec<String> =
            p.ops.iter().map(|&id| self.graph.op(id).map_or_else(|| id.to_string(), |op| op.name.clone())).collect();
        let ins: Vec<String> = p.inputs.iter().map(ToString::to_string).collect();
        let outs: Vec<String> = p.outputs.iter().map(ToString::to_string).collect();
        write!(f, "({detail}) [{}] ({}) -> ({})", names.join(", "), ins.join(", "), outs.join(", "))
    }
}

impl FinalizedGraph {
    /// Every op, one line each, in dependency order.
    pub fn display_ops(&self) -> String {
        self.order().iter().map(|&id| format!("{}\n", OpLine { graph: self, id })).collect()
    }

    /// Every partition, one line each.
    pub fn display_partitions(&self, partitions: &[Partition]) -> String {
        partitions.iter().map(|p| format!("{}\n", PartitionLine { graph: self, partition: p })).collect()
    }
}
