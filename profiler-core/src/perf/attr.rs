//! Building `perf_event_attr` values. Pure data: unit-tested without privileges.

use perf_event_open_sys::bindings::{self, perf_event_attr};

/// perf's software events (PERF_TYPE_SOFTWARE configs), which need no hardware PMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum SoftwareEvent {
    CpuClock = bindings::PERF_COUNT_SW_CPU_CLOCK as u64,
    TaskClock = bindings::PERF_COUNT_SW_TASK_CLOCK as u64,
    PageFaults = bindings::PERF_COUNT_SW_PAGE_FAULTS as u64,
    ContextSwitches = bindings::PERF_COUNT_SW_CONTEXT_SWITCHES as u64,
    CpuMigrations = bindings::PERF_COUNT_SW_CPU_MIGRATIONS as u64,
    MinorFaults = bindings::PERF_COUNT_SW_PAGE_FAULTS_MIN as u64,
    MajorFaults = bindings::PERF_COUNT_SW_PAGE_FAULTS_MAJ as u64,
    AlignmentFaults = bindings::PERF_COUNT_SW_ALIGNMENT_FAULTS as u64,
    EmulationFaults = bindings::PERF_COUNT_SW_EMULATION_FAULTS as u64,
    Dummy = bindings::PERF_COUNT_SW_DUMMY as u64,
    CgroupSwitches = bindings::PERF_COUNT_SW_CGROUP_SWITCHES as u64,
}

/// How an event overflows: never (counting only), every N events, or N times a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplePolicy {
    Counting,
    Period(u64),
    Frequency(u64),
}

/// A `perf_event_attr` under construction. Starts disabled, so nothing counts until the owner
/// has attached what it needs and enables the event (or its group) explicitly.
#[derive(Clone, Copy)]
pub struct EventAttr {
    raw: perf_event_attr,
}

impl std::fmt::Debug for EventAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.raw;
        f.debug_struct("EventAttr")
            .field("type", &r.type_)
            .field("config", &format_args!("{:#x}", r.config))
            .field("config1", &format_args!("{:#x}", self.config1()))
            .field("config2", &format_args!("{:#x}", self.config2()))
            .field("sample", &self.sample_policy())
            .field("exclude_user", &r.exclude_user())
            .field("exclude_kernel", &r.exclude_kernel())
            .field("exclude_hv", &r.exclude_hv())
            .field("exclude_idle", &r.exclude_idle())
            .field("inherit", &r.inherit())
            .field("precise_ip", &r.precise_ip())
            .finish()
    }
}

impl EventAttr {
    /// An event of any perf type and config.
    pub fn new(type_: u32, config: u64) -> Self {
        // SAFETY: perf_event_attr is a plain C struct of integers, unions of integers and
        // bitfields; all-zero is its documented "everything off" state.
        let mut raw: perf_event_attr = unsafe { std::mem::zeroed() };
        raw.type_ = type_;
        raw.size = std::mem::size_of::<perf_event_attr>() as u32;
        raw.config = config;
        raw.set_disabled(1);
        Self { raw }
    }

    /// A software event.
    pub fn software(event: SoftwareEvent) -> Self {
        Self::new(bindings::PERF_TYPE_SOFTWARE, event as u64)
    }

    pub fn config1(&self) -> u64 {
        // SAFETY: every member of this union is a u64; reading any of them is defined.
        unsafe { self.raw.__bindgen_anon_3.config1 }
    }

    pub fn config2(&self) -> u64 {
        // SAFETY: as above.
        unsafe { self.raw.__bindgen_anon_4.config2 }
    }

    pub fn set_config1(&mut self, v: u64) -> &mut Self {
        self.raw.__bindgen_anon_3.config1 = v;
        self
    }

    pub fn set_config2(&mut self, v: u64) -> &mut Self {
        self.raw.__bindgen_anon_4.config2 = v;
        self
    }

    pub fn set_sample_policy(&mut self, policy: SamplePolicy) -> &mut Self {
        match policy {
            SamplePolicy::Counting => {
                self.raw.set_freq(0);
                self.raw.__bindgen_anon_1.sample_period = 0;
            }
            SamplePolicy::Period(n) => {
                self.raw.set_freq(0);
                self.raw.__bindgen_anon_1.sample_period = n;
            }
            SamplePolicy::Frequency(hz) => {
                self.raw.set_freq(1);
                self.raw.__bindgen_anon_1.sample_freq = hz;
            }
        }
        self
    }

    pub fn sample_policy(&self) -> SamplePolicy {
        // SAFETY: both union members are u64.
        let v = unsafe { self.raw.__bindgen_anon_1.sample_period };
        match (self.raw.freq(), v) {
            (1, hz) => SamplePolicy::Frequency(hz),
            (_, 0) => SamplePolicy::Counting,
            (_, n) => SamplePolicy::Period(n),
        }
    }

    pub fn set_exclude_user(&mut self, on: bool) -> &mut Self {
        self.raw.set_exclude_user(on.into());
        self
    }

    pub fn set_exclude_kernel(&mut self, on: bool) -> &mut Self {
        self.raw.set_exclude_kernel(on.into());
        self
    }

    pub fn set_exclude_hv(&mut self, on: bool) -> &mut Self {
        self.raw.set_exclude_hv(on.into());
        self
    }

    /// No overflow while a CPU runs its idle task (the software clocks honour it before
    /// the overflow handler, so no eBPF program runs on an idle CPU).
    pub fn set_exclude_idle(&mut self, on: bool) -> &mut Self {
        self.raw.set_exclude_idle(on.into());
        self
    }

    pub fn set_inherit(&mut self, on: bool) -> &mut Self {
        self.raw.set_inherit(on.into());
        self
    }

    /// Inherit only into new threads (clone with CLONE_THREAD), not forked children.
    pub fn set_inherit_thread(&mut self, on: bool) -> &mut Self {
        self.raw.set_inherit_thread(on.into());
        self
    }

    pub fn set_precise_ip(&mut self, level: u8) -> &mut Self {
        self.raw.set_precise_ip(u64::from(level.min(3)));
        self
    }

    pub fn set_read_format(&mut self, format: u64) -> &mut Self {
        self.raw.read_format = format;
        self
    }

    pub fn set_sample_type(&mut self, sample_type: u64) -> &mut Self {
        self.raw.sample_type = sample_type;
        self
    }

    pub fn set_disabled(&mut self, on: bool) -> &mut Self {
        self.raw.set_disabled(on.into());
        self
    }

    /// What a sideband event reports (perf's own way of tracking processes): executable
    /// mmaps as PERF_RECORD_MMAP2 (device, inode, offset, path), exec's and renames' COMM,
    /// FORK and EXIT, each with the task and time (`sample_id_all`).
    pub fn set_sideband(&mut self) -> &mut Self {
        self.raw.set_mmap(1);
        self.raw.set_mmap2(1);
        self.raw.set_comm(1);
        self.raw.set_comm_exec(1);
        self.raw.set_task(1);
        self.raw.set_sample_id_all(1);
        self.raw.sample_type =
            u64::from(bindings::PERF_SAMPLE_TID) | u64::from(bindings::PERF_SAMPLE_TIME);
        self
    }

    pub fn type_(&self) -> u32 {
        self.raw.type_
    }

    pub fn config(&self) -> u64 {
        self.raw.config
    }

    pub fn raw(&self) -> &perf_event_attr {
        &self.raw
    }

    /// For the software clocks (cpu-clock, task-clock), the period of the hrtimer the kernel
    /// overflows them with: a frequency becomes NSEC_PER_SEC / Hz at open, and the timer
    /// never runs faster than every 10 µs (`perf_swevent_start_hrtimer`). None for others.
    pub fn clock_timer_ns(&self) -> Option<u64> {
        let clock = [SoftwareEvent::CpuClock, SoftwareEvent::TaskClock]
            .iter()
            .any(|&c| self.raw.config == c as u64);
        if self.raw.type_ != bindings::PERF_TYPE_SOFTWARE || !clock {
            return None;
        }
        let period = match self.sample_policy() {
            SamplePolicy::Counting => return None,
            SamplePolicy::Frequency(hz) => 1_000_000_000 / hz.max(1),
            SamplePolicy::Period(n) => n,
        };
        Some(period.max(10_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_overflows_on_its_timer_and_other_events_have_none() {
        let mut attr = EventAttr::software(SoftwareEvent::CpuClock);
        attr.set_sample_policy(SamplePolicy::Frequency(999));
        assert_eq!(attr.clock_timer_ns(), Some(1_001_001));
        attr.set_sample_policy(SamplePolicy::Period(40_000));
        assert_eq!(attr.clock_timer_ns(), Some(40_000));
        attr.set_sample_policy(SamplePolicy::Period(2_000));
        assert_eq!(attr.clock_timer_ns(), Some(10_000), "the kernel's floor");
        attr.set_sample_policy(SamplePolicy::Counting);
        assert_eq!(attr.clock_timer_ns(), None);
        let mut faults = EventAttr::software(SoftwareEvent::PageFaults);
        faults.set_sample_policy(SamplePolicy::Period(100));
        assert_eq!(faults.clock_timer_ns(), None);
    }

    #[test]
    fn software_cpu_clock_at_frequency() {
        let mut a = EventAttr::software(SoftwareEvent::CpuClock);
        a.set_sample_policy(SamplePolicy::Frequency(999));
        let r = a.raw();
        assert_eq!(r.type_, 1, "PERF_TYPE_SOFTWARE");
        assert_eq!(r.config, 0, "PERF_COUNT_SW_CPU_CLOCK");
        assert_eq!(r.freq(), 1);
        // SAFETY: reading the plain integer member of the period/frequency union.
        let freq = unsafe { r.__bindgen_anon_1.sample_freq };
        assert_eq!(freq, 999);
        assert_eq!(r.disabled(), 1, "events start disabled");
        assert_eq!(r.size as usize, std::mem::size_of::<perf_event_attr>());
        assert_eq!(a.sample_policy(), SamplePolicy::Frequency(999));
    }

    #[test]
    fn period_and_counting_round_trip() {
        let mut a = EventAttr::software(SoftwareEvent::PageFaults);
        a.set_sample_policy(SamplePolicy::Period(1000));
        assert_eq!(a.sample_policy(), SamplePolicy::Period(1000));
        assert_eq!(a.raw().freq(), 0);
        a.set_sample_policy(SamplePolicy::Counting);
        assert_eq!(a.sample_policy(), SamplePolicy::Counting);
    }

    #[test]
    fn exclude_bits_and_precise_ip() {
        let mut a = EventAttr::new(bindings::PERF_TYPE_HARDWARE, 0);
        a.set_exclude_kernel(true)
            .set_exclude_hv(true)
            .set_precise_ip(7);
        let r = a.raw();
        assert_eq!(
            (r.exclude_user(), r.exclude_kernel(), r.exclude_hv()),
            (0, 1, 1)
        );
        assert_eq!(r.precise_ip(), 3, "precise_ip is a 2-bit field, clamped");
    }

    #[test]
    fn software_configs_match_the_kernel_abi() {
        // Values from include/uapi/linux/perf_event.h; they are ABI and never change.
        let expected = [
            (SoftwareEvent::CpuClock, 0),
            (SoftwareEvent::TaskClock, 1),
            (SoftwareEvent::PageFaults, 2),
            (SoftwareEvent::ContextSwitches, 3),
            (SoftwareEvent::CpuMigrations, 4),
            (SoftwareEvent::MinorFaults, 5),
            (SoftwareEvent::MajorFaults, 6),
            (SoftwareEvent::AlignmentFaults, 7),
            (SoftwareEvent::EmulationFaults, 8),
            (SoftwareEvent::Dummy, 9),
            (SoftwareEvent::CgroupSwitches, 11),
        ];
        for (event, config) in expected {
            assert_eq!(EventAttr::software(event).config(), config, "{event:?}");
        }
    }
}
