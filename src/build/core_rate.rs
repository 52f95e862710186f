//! The host's `CoreRate` for the default convolution schedules (`schedules::x86_conv`): the one
//! place a measured fact about the cores (`runtime::peak`) becomes a schedule's input, so that
//! neither the probes nor the runtime know schedule types.

use schedules::x86_conv::CoreRate;

use crate::isa::IsaLevel;
use crate::runtime::peak::zmm_vnni_runs_full_width;

/// The `CoreRate` of this CPU's cores for code at `level`, which the default schedules' tiles
/// and threads follow: tiles at `amx`; full where the level is `avx512-vnni` and the cores run
/// zmm `vpdpbusd` at their full width, else slower. Only that level runs the probes (once per
/// process).
pub fn core_rate(level: IsaLevel) -> CoreRate {
    if level == IsaLevel::Amx {
        CoreRate::Tiles
    } else if level.has_avx512() && zmm_vnni_runs_full_width() {
        CoreRate::FullZmmVnni
    } else {
        CoreRate::Slower
    }
}
