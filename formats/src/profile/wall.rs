//! Time views of a profile with off-CPU time (`record --off-cpu`): the `off-cpu` event counts
//! nanoseconds; the wall-clock view (`--wall`) puts them and the on-CPU time of the clock
//! events (nanoseconds too: the sum of their samples' periods) under one `wall` event, so a
//! thread's stacks add up to its wall time.

use std::sync::Arc;

use super::Profile;

/// The event of off-CPU stacks; their counts are nanoseconds.
pub const OFF_CPU_EVENT: &str = "off-cpu";
/// The event of the wall-clock view; its counts are nanoseconds.
pub const WALL_EVENT: &str = "wall";

/// Whether `event` is time off the CPU or wall time (not a sampled event).
pub fn is_time_event(event: &str) -> bool {
    event == OFF_CPU_EVENT || event == WALL_EVENT
}

/// The wall-clock view: the on-CPU nanoseconds of clock events and the off-CPU stacks
/// (with their `[off-cpu]` frame), all under the `wall` event. `record` allows `--wall`
/// with clock events only, whose values are nanoseconds already.
pub fn wall_view(profile: &Profile) -> Profile {
    let wall: Arc<str> = Arc::from(WALL_EVENT);
    let mut out = profile.clone();
    for s in &mut out.stacks {
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
    fn on_and_off_cpu_nanoseconds_under_one_event() {
        let frame = |n: &str| Frame::named(n, FrameKind::User);
        let mut profile = Profile::default();
        // Ten samples at 999 Hz: 10 x 1001001 ns.
        profile
            .push("cpu-clock", "a", &[frame("spin")], 10_010_010)
            .samples = 10;
        profile.push(
            OFF_CPU_EVENT,
            "a",
            &[frame("sleep"), frame("[off-cpu]")],
            5_000_000,
        );
        let wall = wall_view(&profile);
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
