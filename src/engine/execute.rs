//! `CompiledGraph::execute`: the inputs checked against the graph, stored once, the steps run
//! in order on the engine's buffers, the outputs read back; with the time of each step.

use std::time::{Duration, Instant};

use super::compile::{CompiledGraph, Step};
use super::error::EngineError;
use super::kernel::Kernel;
use super::native::split::{quantize, quantize_copying};
use super::slot::{Bytes, Slot, f32_bytes};
use crate::graph::{Data, Value, reference};

impl CompiledGraph {
    /// The steps (partitions with their kernels), in execution order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Import to code: compiling every partition and preparing its weights.
    pub fn compile_time(&self) -> Duration {
        self.compile_time
    }

    /// Of `compile_time`, the wall time of the convolutions and products compiled and their
    /// weights prepared on every core (`engine::compile`'s jobs).
    pub fn jobs_time(&self) -> Duration {
        self.jobs_time
    }

    /// The bytes of weights the layers carry (the weight arena's first pages were faulted in
    /// for them while the layers were planned) and the bytes their packed forms took in the
    /// arena (`layer::KernelCache`'s weight arena).
    pub fn arena_bytes(&self) -> (usize, usize) {
        self.arena_bytes
    }

    /// Tuning records that could not be applied, and why (`engine::compile_tuned`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The graph this was compiled from.
    pub fn graph(&self) -> &crate::graph::FinalizedGraph {
        &self.graph
    }

    /// The threads and ISA level the kernels were compiled for.
    pub fn options(&self) -> &crate::runtime::CompileOptions {
        &self.options
    }

    /// The buffers, one per tensor the engine keeps (`Step::inputs`, `outputs` index them).
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The slots of the graph's inputs and of its outputs, in the graph's order.
    pub fn io_slots(&self) -> (Vec<usize>, Vec<usize>) {
        (self.inputs.iter().map(|&(_, s)| s).collect(), self.outputs.iter().map(|&(_, s)| s).collect())
    }

    /// The graph inputs' dtypes and dimensions, in the graph's order.
    pub fn input_specs(&self) -> Vec<(crate::graph::DataType, Vec<usize>)> {
        self.inputs.iter().map(|&(_, s)| (self.slots[s].dtype, self.slots[s].dims.clone())).collect()
    }

    /// Runs the graph on `inputs` (one value per graph input, in the graph's order, logical
    /// layout) and returns its outputs and the time each step took. Every input is checked
    /// against its tensor before any kernel runs.
    pub fn execute(&mut self, inputs: &[Value]) -> Result<(Vec<Value>, Vec<Duration>), EngineError> {
        self.execute_steps(inputs, false)
    }

    /// `execute`, each step run once more, untimed, right before its timed run: the times are
    /// those of steps whose operands, weights and code the run before left in cache, and the
    /// difference from `execute`'s times is what fetching them costs (a diagnosis; the
    /// outputs are the same, since every step computes its outputs from its inputs alone).
    pub fn execute_warm(&mut self, inputs: &[Value]) -> Result<(Vec<Value>, Vec<Duration>), EngineError> {
        self.execute_steps(inputs, true)
    }

    fn execute_steps(&mut self, inputs: &[Value], warm: bool) -> Result<(Vec<Value>, Vec<Duration>), EngineError> {
        if inputs.len() != self.inputs.len() {
            return Err(EngineError::InputCount { expected: self.inputs.len(), found: inputs.len() });
        }
        for (index, (v, &(t, s))) in inputs.iter().zip(&self.inputs).enumerate() {
            let slot = &self.slots[s];
            if v.dtype() != slot.dtype || v.dims() != slot.dims {
                return Err(EngineError::Input {
                    index,
                    tensor: self.graph.graph().tensor_ref(t).to_string(),
                    expected_dtype: slot.dtype,
                    expected_dims: slot.dims.clone(),
                    found_dtype: v.dtype(),
                    found_dims: v.dims().to_vec(),
                });
            }
        }
        let copying = self.quantized_input.map(|(k, _)| k);
        for (k, (v, &(_, s))) in inputs.iter().zip(&self.inputs).enumerate() {
            if copying != Some(k) {
                self.slots[s].store_on(v, self.pool.as_deref());
            }
        }
        let mut times = Vec::with_capacity(self.steps.len());
        for i in 0..self.steps.len() {
            // The shared buffers this step writes into, from the tensors that held them.
            for &(slot, buffer) in self.sharing.takes.get(i).into_iter().flatten() {
                let holder = std::mem::replace(&mut self.holders[buffer], slot);
                if holder != slot {
                    let released = self.slots[holder].bytes.release();
                    self.slots[slot].bytes.hold(released);
                }
            }
            for timed in [!warm, true] {
                let start = Instant::now();
                match copying {
                    Some(k) if i == 0 => self.run_quantize_copying(&inputs[k]),
                    _ => self.run_step(i)?,
                }
                if timed {
                    times.push(start.elapsed());
                    break;
                }
            }
        }
        let outputs = self.outputs.iter().map(|&(_, s)| self.slots[s].load()).collect();
        Ok((outputs, times))
    }

    /// The first step (a `Kernel::Quantize` of `value`'s slot, `quantized_input`) run on
    /// `value`'s own bytes, which it copies into the slot as it reads them where a later step
    /// reads the slot: the slot then ends as `store` leaves it; the output as `Kernel::run`
    /// leaves it.
    fn run_quantize_copying(&mut self, value: &Value) {
        let step = &self.steps[0];
        let (Kernel::Quantize(q), Data::F32(x)) = (&step.kernel, value.data()) else {
            unreachable!("quantize_copying_input chose a quantization of f32")
        };
        let (input, out) = (step.inputs[0], step.outputs[0]);
        let mut output = std::mem::replace(&mut self.slots[out], Slot::placeholder());
        let dims = if output.nhwc { output.nchw() } else { [0; 4] };
        let pool = self.pool.as_deref();
        if self.quantized_input.is_some_and(|(_, kept)| kept) {
            let copy = &mut self.slots[input].bytes;
            quantize_copying(pool, &f32_bytes(x), dims, output.nhwc, *q, &mut output.bytes, copy);
        } else {
            quantize(pool, &f32_bytes(x), dims, output.nhwc, *q, &mut output.bytes);
        }
        self.slots[out] = output;
    }

    fn run_step(&mut self, i: usize) -> Result<(), EngineError> {
        let step = &self.steps[i];
        if let Kernel::Reference { .. } = step.kernel {
            let values: Vec<Value> = step.inputs.iter().map(|&s| self.slots[s].load()).collect();
            let fail = |what: String| EngineError::Reference { partition: step.partition.id.to_string(), what };
            let out =
                reference::run_partition(&self.graph, &step.partition, &values).map_err(|e| fail(e.to_string()))?;
            for (&s, v) in step.outputs.iter().zip([&out]) {
                if v.dims() != self.slots[s].dims || v.dtype() != self.slots[s].dtype {
                    return Err(fail(format!("an output of {:?}, expected {:?}", v.dims(), self.slots[s].dims)));
                }
                self.slots[s].store(v);
            }
            return Ok(());
        }
        // The output moves out of the slot list while the inputs are borrowed from it (a
        // placeholder that allocates nothing takes its place).
        let out = step.outputs[0];
        let mut output = std::mem::replace(&mut self.slots[out], Slot::placeholder());
        let pool = self.pool.as_deref();
        let result = match step.inputs[..] {
            [a] => step.kernel.run(&[&self.slots[a]], &mut output, pool),
            [a, b] => step.kernel.run(&[&self.slots[a], &self.slots[b]], &mut output, pool),
            _ => {
                let inputs: Vec<&Slot> = step.inputs.iter().map(|&s| &self.slots[s]).collect();
                step.kernel.run(&inputs, &mut output, pool)
            }
        };
        self.slots[out] = output;
        result.map_err(|e| EngineError::Layer {
            partition: step.partition.id.to_string(),
            kind: step.partition.kind.name(),
            source: Box::new(e),
        })
    }
}

impl CompiledGraph {
    /// The value a tensor holds after the last `execute` (logical layout), if its buffer still
    /// holds it: the graph's outputs and constants; the other tensors the steps write where
    /// no later tensor took their buffer (all of them after `keep_values`); the graph's inputs
    /// but one that only the first step, its quantization, reads (the step reads the caller's
    /// value directly).
    pub fn value(&self, t: crate::graph::TensorId) -> Option<Value> {
        let s = self.slot_of.get(t).copied().flatten()?;
        let unkept = self.quantized_input.is_some_and(|(k, kept)| !kept && self.inputs[k].1 == s);
        (!unkept && self.slots[s].bytes.holds()).then(|| self.slots[s].load())
    }

    /// Gives every tensor a buffer of its own from now on, so that after a run `value` has
    /// every tensor a step reads or writes (what tests and debugging look at), but a graph
    /// input the first step quantizes straight from the caller's value. By default the
    /// tensors whose lifetimes do not overlap share buffers (`share`).
    pub fn keep_values(&mut self) {
        for slot in &mut self.slots {
            if !slot.bytes.holds() {
                slot.bytes = Bytes::zeroed(slot.bytes.size(), 0);
            }
        }
        self.sharing = Default::default();
        self.holders.clear();
    }
}
