//! `Reference`: what a table layer's output must equal, bit for bit: its definition
//! (`Definition`) computed without any target schedule, by the tensor-expression interpreter
//! where that is quick (the dense layer), else under the generic schedule compiled at the
//! scalar level on one thread (the interpreter would take minutes on a convolution).

use ir::DType;
use ir::interp::{Array, eval_te};
use schedules::generic::default_schedule;
use schedules::resnet18::Layer;

use super::data::LayerData;
use super::definition::Definition;
use super::error::LayerError;
use crate::build::build;
use crate::isa::IsaLevel;
use crate::runtime::{CompileOptions, Tensor};
use crate::target::Target;

/// How a layer's reference output is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// The definition and its weight preparation under the generic schedule, compiled at the
    /// scalar level, one thread.
    GenericJit,
    /// The definition and its weight preparation by the interpreter (`eval_te`).
    Interpreter,
}

impl Reference {
    /// The reference of `layer`: the interpreter for the dense layer, the generic schedule for
    /// convolutions.
    pub fn for_layer(layer: Layer) -> Reference {
        match layer {
            Layer::Conv(_) => Reference::GenericJit,
            Layer::Dense(_) => Reference::Interpreter,
        }
    }

    /// Its name in `tensorlift resnet18`'s output: `generic-jit` or `eval_te`.
    pub fn name(self) -> &'static str {
        match self {
            Reference::GenericJit => "generic-jit",
            Reference::Interpreter => "eval_te",
        }
    }

    /// The output of `def` on `data`, in the definition's layout (`LayerData::output_shape`).
    pub fn output(self, data: &LayerData, def: &Definition) -> Result<Array, LayerError> {
        match self {
            Reference::Interpreter => {
                let comp = eval_te(&[&def.prep.compensation], &[(&def.wei, &data.wei)])?.remove(0);
                let mut inputs = vec![
                    (&def.src, &data.src),
                    (&def.wei, &data.wei),
                    (&def.layer.compensation, &comp),
                    (&def.bias, &data.bias),
                ];
                inputs.extend(def.layer.params.iter().map(|p| (&p.tensor, &p.values)));
                Ok(eval_te(&[&def.layer.output], &inputs)?.remove(0))
            }
            Reference::GenericJit => {
                let options =
                    CompileOptions { target: Target::Level(IsaLevel::Scalar), threads: Some(1), ..Default::default() };
                let prep_args = [&def.wei, &def.prep.compensation];
                let prep = build(&default_schedule(&[&def.prep.compensation]), &prep_args, "prep", &options)?;
                let mut wei = Tensor::from_array(&data.wei);
                let mut comp = Tensor::zeros(DType::I32, def.prep.compensation.shape())?;
                prep.compiled.call(&mut [&mut wei, &mut comp])?;
                let layer = build(&default_schedule(&[&def.layer.output]), &def.args(), "reference", &options)?;
                let mut args = vec![Tensor::from_array(&data.src), wei, comp, Tensor::from_array(&data.bias)];
                args.extend(def.layer.params.iter().map(|p| Tensor::from_array(&p.values)));
                args.push(Tensor::zeros(def.layer.output.dtype(), def.layer.output.shape())?);
                layer.compiled.call(&mut args.iter_mut().collect::<Vec<_>>())?;
                Ok(args.last().map(Tensor::to_array).expect("the output is the last argument"))
            }
        }
    }
}
