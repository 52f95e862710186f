//! Quantized layers on the x86 path, and the data of the resnet-18 int8 table's layers
//! (`schedules::resnet18`; `engine::TableGraph` sets each up as a one-partition graph for
//! `tensorlift resnet18` and the tuner; the export and the workload keys take their
//! quantization from here).
//!
//! * `data`: a layer's data as the table defines it (`LayerData`: source, weights and
//!   quantization with the i32 bias, drawn from seeds that follow the layer's position in the
//!   table);
//! * `definition`: the layer's definition in the operator library (`ops::conv2d_nchw_int8` or
//!   `ops::dense_int8`), kept for the workload key tuning records name (`tune::workload`);
//! * `transpose`: activations between NCHW and NHWC, in plain Rust;
//! * `qconv`, `qdense`: the compile API of imported networks' quantized convolutions and matrix
//!   products in onnxruntime's requantization order (`QConvSpec`, `QDenseSpec`,
//!   `compile_qconv`, `compile_qdense`), `qprepare`, their weight preparation in plain Rust
//!   (`prepare_weights`; its x86 vector loops in `qprepare_x86`), `qcompiled`, what they give (`CompiledQuantized`), `qlowered`, the
//!   same lowered for a level without compiling (`LoweredQuantized`, for the export), and
//!   `kernel_cache`, their functions shared between layers of one geometry, across threads
//!   (`KernelCache`); `qauto`, the convolutions the x86 template does not take (groups,
//!   depthwise, dilations, per-side pads, batch) as one definition scheduled by the
//!   auto-scheduler's rules (`QConvAutoSpec`, `compile_qconv_auto`, `CompiledAuto`; for the
//!   export, `lower_qconv_auto` and `LoweredAuto`, the same lowered for a level);
//! * `error`: `LayerError`, `NotInTable`.

mod data;
mod definition;
mod error;
mod kernel_cache;
mod qauto;
mod qcompiled;
mod qconv;
mod qdense;
mod qlowered;
mod qprepare;
mod qprepare_x86;
mod transpose;

pub use data::LayerData;
pub use definition::Definition;
pub use error::{LayerError, NotInTable, SpecError};
pub use kernel_cache::KernelCache;
pub use qauto::{
    CompiledAuto, LoweredAuto, QConvAutoSpace, QConvAutoSpec, compile_qconv_auto, compile_qconv_auto_at,
    lower_qconv_auto, lower_qconv_auto_at, qconv_auto_key, qconv_auto_space,
};
pub use qcompiled::CompiledQuantized;
pub use qconv::{ActQuant, QConvSpec, compile_qconv, compile_qconv_in, lower_qconv};
pub use qdense::{QDenseSpec, compile_qdense, compile_qdense_in, lower_qdense};
pub use qlowered::LoweredQuantized;
pub use qprepare::{PreparedWeights, prepare_weights, prepare_weights_in, prepare_weights_scalar};
pub use transpose::{nchw_to_nhwc, nhwc_to_nchw, permute_bytes};
