//! Time views of a profile with off-CPU time (`record --off-cpu`): the `off-cpu` event counts
//! nanoseconds; the wall-clock view (`--wall`) converts the on-CPU samples to nanoseconds too
//! and puts both under one `wall` event, so a thread's stacks add up to its wall time.

use std::sync::Arc;

use super::Profile;

/// The event of off-CPU stacks; their counts are nanoseconds.
pub const OFF_CPU_EVENT: &str = "off-cpu";
/// The event of the wall-clock view; its counts are nanoseconds.
pub const WALL_EVENT: &str = "wall";

/// Whether `event`'s counts are nanoseconds rather than samples.
pub fn is_time_event(event: &str) -> bool {
    event == OFF_CPU_EVENT || event == WALL_EVENT
}

/// The wall-clock view: every on-CPU sample becomes `ns_per_sample` nanoseconds, off-CPU
/// stacks keep theirs (and their `[off-cpu]` frame), all under the `wall` event.
pub fn wall_view(profile: &Profile, ns_per_sample: u64) -> Profile {
    let wall: Arc<str> = Arc::from(WALL_EVENT);
    let mut out = profile.clone();
    for s in &mut out.stacks {
        if !is_time_event(&s.event) {
            s.count = s.count.saturating_mul(ns_per_sample);
        }
        s.event = wall.clone();
    }
    out.info.event = WALL_EVENT.to_string();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{Frame, FrameKind};

    #[test]
    fn samples_become_nanoseconds_and_off_cpu_time_is_kept() {
        let frame = |n: &str| Frame::named(n, FrameKind::User);
        let mut profile = Profile::default();
        profile.push("cpu-clock", "a", &[frame("spin")], 10);
        profile.push(
            OFF_CPU_EVENT,
            "a",
            &[frame("sleep"), frame("[off-cpu]")],
            5_000_000,
        );
        let wall = wall_view(&profile, 1_001_001);
        assert_eq!(wall.events(), vec![Arc::from(WALL_EVENT)]);
        assert_eq!(wall.stacks[0].count, 10_010_010);
        assert_eq!(wall.stacks[1].count, 5_000_000);
        assert_eq!(wall.total(), 15_010_010);
        let names: Vec<&str> = wall
            .frames_of(&wall.stacks[1])
            .map(|f| f.function.as_ref())
            .collect();
        assert_eq!(names, ["sleep", "[off-cpu]"], "the frames are kept");
    }
}
