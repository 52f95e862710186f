//! Logical tensors (oneDNN Graph's `logical_tensor`): a typed id, an element type, a shape whose
//! dimensions may be unknown until compilation, and a layout. Names are for printing only; the
//! id is the identity.

use std::fmt;

use cranelift_entity::entity_impl;

use super::dtype::DataType;

/// The identity of a logical tensor in one graph.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(u32);
entity_impl!(TensorId, "t");

/// One dimension: a size, or unknown until the graph is compiled (or evaluated) with concrete
/// inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Known(usize),
    Unknown,
}

impl Dim {
    /// The size, if known.
    pub fn known(self) -> Option<usize> {
        match self {
            Dim::Known(n) => Some(n),
            Dim::Unknown => None,
        }
    }

    /// Whether two dimensions can describe the same tensor (equal, or either unknown).
    pub fn fits(self, other: Dim) -> bool {
        match (self, other) {
            (Dim::Known(a), Dim::Known(b)) => a == b,
            _ => true,
        }
    }

    /// The more precise of two dimensions that fit (`Known` over `Unknown`).
    pub fn refine(self, other: Dim) -> Dim {
        match self {
            Dim::Known(_) => self,
            Dim::Unknown => other,
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Known(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A shape: the list of dimensions, or an unknown rank (only for tensors an op produces, whose
/// shape finalization infers).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    Dims(Vec<Dim>),
    UnknownRank,
}

impl Shape {
    /// A shape of known dimensions.
    pub fn known(dims: &[usize]) -> Shape {
        Shape::Dims(dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    /// The dimensions, if the rank is known.
    pub fn dims(&self) -> Option<&[Dim]> {
        match self {
            Shape::Dims(d) => Some(d),
            Shape::UnknownRank => None,
        }
    }

    /// The rank, if known.
    pub fn rank(&self) -> Option<usize> {
        self.dims().map(<[Dim]>::len)
    }

    /// The sizes, if every dimension is known.
    pub fn concrete(&self) -> Option<Vec<usize>> {
        self.dims()?.iter().map(|d| d.known()).collect()
    }

    /// Whether two shapes can describe the same tensor.
    pub fn fits(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Dims(a), Shape::Dims(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.fits(*y)),
            _ => true,
        }
    }

    /// The more precise of two shapes that fit.
    pub fn refine(&self, other: &Shape) -> Shape {
        match (self, other) {
            (Shape::Dims(a), Shape::Dims(b)) => Shape::Dims(a.iter().zip(b).map(|(x, y)| x.refine(*y)).collect()),
            (Shape::UnknownRank, s) | (s, Shape::UnknownRank) => s.clone(),
        }
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Shape {
        Shape::known(dims)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(dims: [usize; N]) -> Shape {
        Shape::known(&dims)
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Shape {
        Shape::Dims(dims)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Dims(dims) => {
                f.write_str("[")?;
                for (i, d) in dims.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str("]")
            }
            Shape::UnknownRank => f.write_str("[..]"),
        }
    }
}

/// How a tensor's elements are laid out in memory.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Public: element `(i0, i1, ...)` lives at `Σ i_d · strides[d]` elements from the start.
    /// A stride may be unknown until compilation, like a dimension.
    Strided(Vec<Dim>),
    /// Private to the compiler: only a compiled partition's output feeding another compiled
    /// partition's input may be opaque, never a graph input, output or constant.
    Opaque,
    /// Not decided yet: the compiler chooses (strided at the graph's boundary).
    Any,
}

impl Layout {
    /// Row-major strides for `shape` (the last dimension contiguous); a stride is unknown when a
    /// dimension after it is.
    pub fn row_major(shape: &Shape) -> Layout {
        let Some(dims) = shape.dims() else { return Layout::Any };
        let mut strides = vec![Dim::Known(1); dims.len()];
        let mut acc = Some(1usize);
        for d in (0..dims.len()).rev() {
            strides[d] = acc.map_or(Dim::Unknown, Dim::Known);
            acc = acc.zip(dims[d].known()).and_then(|(a, n)| a.checked_mul(n));
        }
        Layout::Strided(strides)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::Strided(strides) => write!(f, "strided{}", Shape::Dims(strides.clone())),
            Layout::Opaque => f.write_str("opaque"),
            Layout::Any => f.write_str("any"),
        }
    }
}

/// A logical tensor: what an op reads or writes, described but not stored (a constant's data
/// lives in the graph beside it).
#[derive(Clone, Debug, PartialEq)]
pub struct LogicalTensor {
    /// For printing only.
    pub name: String,
    pub dtype: DataType,
    pub shape: Shape,
    pub layout: Layout,
}

impl LogicalTensor {
    /// A tensor of layout `Any`.
    pub fn new(name: &str, dtype: DataType, shape: impl Into<Shape>) -> LogicalTensor {
        LogicalTensor { name: name.to_string(), dtype, shape: shape.into(), layout: Layout::Any }
    }
}
