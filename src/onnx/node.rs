//! One ONNX node as the importer sees it: its inputs and outputs by position (an empty name is
//! an absent optional input) and its attributes, read with their types checked. A missing
//! attribute takes the default the ONNX operator schema gives it.

use super::error::{NodeRef, OnnxError};
use super::proto::attribute_proto::AttributeType;
use super::proto::{AttributeProto, NodeProto, TensorProto};

/// A node of the graph being imported.
pub struct Node<'m> {
    pub proto: &'m NodeProto,
    pub r: Box<NodeRef>,
}

impl<'m> Node<'m> {
    /// The node at `index` of its graph.
    pub fn new(index: usize, proto: &'m NodeProto) -> Node<'m> {
        let r = Box::new(NodeRef {
            index,
            name: proto.name().to_string(),
            op_type: proto.op_type().to_string(),
            domain: proto.domain().to_string(),
        });
        Node { proto, r }
    }

    /// The name of input `i`, if present and not empty.
    pub fn input(&self, i: usize) -> Option<&'m str> {
        self.proto.input.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// The name of output `i`, if present and not empty.
    pub fn output(&self, i: usize) -> Option<&'m str> {
        self.proto.output.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// The name graph ops made for this node take: the node's name, else its first output's.
    pub fn op_name(&self, suffix: &str) -> String {
        let base = if self.r.name.is_empty() { self.output(0).unwrap_or("") } else { &self.r.name };
        if suffix.is_empty() { base.to_string() } else { format!("{base}/{suffix}") }
    }

    /// An `Attribute` error for this node.
    pub fn attr_err(&self, attribute: &str, expected: impl Into<String>, found: impl Into<String>) -> OnnxError {
        OnnxError::Attribute {
            node: self.r.clone(),
            attribute: attribute.to_string(),
            expected: expected.into(),
            found: found.into(),
        }
    }

    /// An `Unsupported` error for this node.
    pub fn unsupported(&self, what: impl Into<String>) -> OnnxError {
        OnnxError::Unsupported { node: self.r.clone(), what: what.into() }
    }

    fn attr(&self, name: &str, ty: AttributeType) -> Result<Option<&'m AttributeProto>, OnnxError> {
        let Some(a) = self.proto.attribute.iter().find(|a| a.name() == name) else { return Ok(None) };
        match a.r#type {
            Some(t) if t != ty as i32 => {
                let found =
                    AttributeType::try_from(t).map_or_else(|_| format!("type code {t}"), |t| t.as_str_name().into());
                Err(self.attr_err(name, format!("of type {}", ty.as_str_name()), found))
            }
            _ => Ok(Some(a)),
        }
    }

    /// An integer attribute, or `default`.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, OnnxError> {
        Ok(self.attr(name, AttributeType::Int)?.map_or(default, |a| a.i()))
    }

    /// A 0/1 integer attribute as a flag, or `default`.
    pub fn flag(&self, name: &str, default: bool) -> Result<bool, OnnxError> {
        match self.int(name, i64::from(default))? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.attr_err(name, "0 or 1", v.to_string())),
        }
    }

    /// A float attribute, or `default`.
    pub fn float(&self, name: &str, default: f32) -> Result<f32, OnnxError> {
        Ok(self.attr(name, AttributeType::Float)?.map_or(default, |a| a.f()))
    }

    /// A list of integers, if present.
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OnnxError> {
        Ok(self.attr(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    /// A string attribute (UTF-8), if present.
    pub fn string(&self, name: &str) -> Result<Option<String>, OnnxError> {
        match self.attr(name, AttributeType::String)? {
            None => Ok(None),
            Some(a) => String::from_utf8(a.s().to_vec())
                .map(Some)
                .map_err(|_| self.attr_err(name, "a UTF-8 string", "invalid UTF-8")),
        }
    }

    /// A tensor attribute, if present.
    pub fn tensor(&self, name: &str) -> Result<Option<&'m TensorProto>, OnnxError> {
        Ok(self.attr(name, AttributeType::Tensor)?.and_then(|a| a.t.as_ref()))
    }

    /// Whether attribute `name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.proto.attribute.iter().any(|a| a.name() == name)
    }
}
