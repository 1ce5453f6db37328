//! The list of `record`'s features ([`super::feature::Feature`]): the only module that names
//! them all. The session starts what the options ask for through it.

use super::{
    RecordError, RecordOptions, UsageError, aggregate,
    feature::{Feature, Spec, Start},
    group, offcpu,
};

/// Every feature, in the order their hooks run (in-kernel aggregation before counter groups:
/// the group's totals use what the aggregation put on stacks).
pub(super) const FEATURES: &[Spec] = &[offcpu::SPEC, aggregate::SPEC, group::SPEC];

/// Each feature's checks of the options, before anything is attached.
pub(super) fn validate(opts: &RecordOptions) -> Result<(), UsageError> {
    FEATURES.iter().try_for_each(|f| (f.validate)(opts))
}

/// The capture flags every feature asks of the program.
pub(super) fn capture(opts: &RecordOptions) -> u32 {
    FEATURES.iter().fold(0, |c, f| c | (f.capture)(opts))
}

/// The features the options ask for, started in [`FEATURES`]' order; each one's events
/// follow the previous ones'.
pub(super) fn start(start: &mut Start<'_>) -> Result<Vec<Box<dyn Feature>>, RecordError> {
    let mut started = Vec::new();
    for spec in FEATURES {
        if let Some(f) = (spec.start)(start)? {
            start.first_event += f.event_names().len() as u32;
            started.push(f);
        }
    }
    Ok(started)
}
