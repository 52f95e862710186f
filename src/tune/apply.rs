//! `RecordKnobs`: the knobs a network's compiled kernels take from tuning records — the best
//! record of the user's database for the workload on this CPU, else of the repository's
//! pre-tuned records, else none (the defaults). `tensorlift run` and the model export both
//! compile through it, so that a database means the same schedules in both.
//!
//! A workload's records are found by its own key (`tasks::workload_key`: what `tensorlift tune
//! MODEL.onnx` records), else by the table layer of the same geometry (`table_layer`: what
//! `tensorlift tune resnet18` and the pre-tuned records carry), with weights in its range.
//!
//! An auto-scheduled convolution takes the point of the best record of its definition's key
//! (`tasks::auto_workload_key`) measured at the same ISA level (the space depends on the
//! level's vector width), on at most `max_threads` threads.

use schedules::auto::AutoPoint;
use schedules::resnet18::{self, ConvLayer, Layer, WeightBits};
use schedules::x86_conv::Conv2dInt8Knobs;

use super::record_for;
use super::tasks::workload_key;
use crate::engine::{Tuning, Workload};
use crate::layer::{QConvAutoSpec, qconv_auto_key};
use crate::record::{Host, Record, select};

/// Records to apply, on `host`, to schedules of at most `max_threads` threads.
pub struct RecordKnobs {
    pub user: Vec<Record>,
    pub pretuned: Vec<Record>,
    pub host: Host,
    pub max_threads: usize,
}

impl RecordKnobs {
    /// The knobs of `w` and where they came from (`None`: no record applies).
    pub fn knobs(&self, w: Workload<'_>) -> Option<(Conv2dInt8Knobs, Tuning)> {
        let (workload, weights) = workload_key(w);
        let table = table_layer(w);
        let found = |records: &[Record], tuning| {
            let fitting = records.iter().filter(|r| {
                r.target.threads <= self.max_threads && r.schedule.weights == weights && r.schedule.knobs.is_some()
            });
            select(fitting, &workload.key, &self.host)
                .or_else(|| {
                    let (layer, weights) = table?;
                    record_for(records, layer, weights, self.max_threads, &self.host)
                })
                .and_then(|r| Some((r.schedule.knobs?, tuning)))
        };
        found(&self.user, Tuning::Tuned).or_else(|| found(&self.pretuned, Tuning::Pretuned))
    }
}

impl RecordKnobs {
    /// The point of the auto-scheduled convolution `spec` and where it came from (`None`: no
    /// record applies, the rules' point serves; also when the spec has no definition, which
    /// its compile then reports).
    pub fn auto_point(&self, spec: &QConvAutoSpec) -> Option<(AutoPoint, Tuning)> {
        // No record of a point: no definition to build for its key.
        if !self.user.iter().chain(&self.pretuned).any(|r| r.schedule.auto.is_some()) {
            return None;
        }
        let key = qconv_auto_key(spec).ok()?.key;
        let found = |records: &[Record], tuning| {
            let fitting = records.iter().filter(|r| {
                r.schedule.auto.is_some()
                    && r.target.isa == self.host.level.name()
                    && r.target.threads <= self.max_threads
            });
            select(fitting, &key, &self.host).and_then(|r| Some((r.schedule.auto.clone()?, tuning)))
        };
        found(&self.user, Tuning::Tuned).or_else(|| found(&self.pretuned, Tuning::Pretuned))
    }
}

/// The table layer of the same geometry as a workload (what tuning records are keyed by), and
/// the range of its weights.
pub fn table_layer(w: Workload<'_>) -> Option<(Layer, WeightBits)> {
    let seven = |weights: &[i8]| weights.iter().all(|&v| (-64..=63).contains(&v));
    let (layer, weights) = match w {
        Workload::Conv(c) => {
            let same = |l: &ConvLayer| {
                (l.ic, l.oc, l.h, l.w, l.k, l.k, l.stride, l.stride, l.pad)
                    == (c.ic, c.oc, c.h, c.w, c.kh, c.kw, c.stride.0, c.stride.1, c.pads[0])
                    && c.pads.iter().all(|&p| p == l.pad)
            };
            let layer = resnet18::layers().into_iter().find(|l| matches!(l, Layer::Conv(cl) if same(cl)))?;
            (layer, &c.weights)
        }
        Workload::Dense(d) => {
            let layer = resnet18::layers().into_iter().find(
                |l| matches!(l, Layer::Dense(dl) if d.m == 1 && (dl.in_features, dl.out_features) == (d.k, d.n)),
            )?;
            (layer, &d.weights)
        }
    };
    Some((layer, if seven(weights) { WeightBits::Seven } else { WeightBits::Eight }))
}
