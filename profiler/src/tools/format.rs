//! cputrack's and cpustat's table rows, byte for byte as their printf formats make them
//! (libcpc-spec §2.2, §2.3), trailing spaces included. The only addition is the perf stat
//! style `(xx.xx%)` marker at the end of a row whose counters were multiplexed, whose
//! values are then scaled estimates.

use std::fmt::Write as _;

use super::sample::Sample;

/// The tick column's header: the register cputrack names (`tsc` on x86).
pub const TICK_NAME: &str = if cfg!(any(target_arch = "x86", target_arch = "x86_64")) {
    "tsc"
} else {
    "tick"
};

/// cputrack's optional columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackLayout {
    /// `-f`: a pid column.
    pub pid_column: bool,
    /// `-t`: a tick column.
    pub tick_column: bool,
    /// More than one `-c`: data rows end with ` # <spec>`.
    pub several_sets: bool,
}

/// cpustat's optional columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatLayout {
    pub tick_column: bool,
    pub several_sets: bool,
}

/// The counter columns' header: `"%8s%-2d "` of "pic" and the counter, cut to 10
/// characters, so two-digit counters fill the column and touch the next (`pic12     pic14`).
pub fn pic_header(pics: &[u32]) -> String {
    pics.iter()
        .map(|p| {
            let mut col = format!("{:>8}{:<2} ", "pic", p);
            col.truncate(10);
            col
        })
        .collect()
}

/// cputrack's header line.
pub fn track_header(layout: &TrackLayout, pics: &[u32]) -> String {
    let mut s = format!("{:>7} ", "time");
    if layout.pid_column {
        let _ = write!(s, "{:>6} ", "pid");
    }
    let _ = write!(s, "{:>3} {:>10} ", "lwp", "event");
    if layout.tick_column {
        let _ = write!(s, "{TICK_NAME:>9} ");
    }
    s.push_str(&pic_header(pics));
    s.push('\n');
    s
}

/// `"%9lld "` per value: printed as signed 64-bit, as the C tools do.
fn values(s: &mut String, sample: &Sample, tick_column: bool) {
    if tick_column {
        let _ = write!(s, "{:>9} ", sample.tick as i64);
    }
    for v in sample.shown() {
        let _ = write!(s, "{:>9} ", *v as i64);
    }
}

/// ` # <spec>` with several sets, the multiplexing marker, the newline.
fn row_end(s: &mut String, sample: &Sample, set: Option<&str>) {
    if let Some(set) = set {
        let _ = write!(s, " # {set}");
    }
    if let Some(pct) = sample.multiplexed_pct() {
        if set.is_some() {
            s.push(' ');
        }
        let _ = write!(s, "({pct:.2}%)");
    }
    s.push('\n');
}

fn track_prefix(layout: &TrackLayout, time: f64, pid: i32, lwp: i32, event: &str) -> String {
    let mut s = format!("{time:7.3} ");
    if layout.pid_column {
        let _ = write!(s, "{pid:6} ");
    }
    let _ = write!(s, "{lwp:3} {event:>10} ");
    s
}

/// A cputrack data row (`tick`, `init_lwp`, `fini_lwp`, `lwp_create`, `lwp_exit`, `exec`,
/// `exit`). `set` is the set's spec, printed when there are several sets.
pub fn track_row(
    layout: &TrackLayout,
    time: f64,
    pid: i32,
    lwp: i32,
    event: &str,
    sample: &Sample,
    set: &str,
) -> String {
    let mut s = track_prefix(layout, time, pid, lwp, event);
    values(&mut s, sample, layout.tick_column);
    row_end(&mut s, sample, layout.several_sets.then_some(set));
    s
}

/// Two blank counter fields: the fork and exec-argument rows have them whatever the set.
fn blanks(layout: &TrackLayout) -> String {
    let tick = if layout.tick_column {
        format!("{:9} ", "")
    } else {
        String::new()
    };
    format!("{tick}{:9} {:9} ", "", "")
}

/// cputrack's `fork` row: blank fields, then `# <child pid>`.
pub fn track_fork(layout: &TrackLayout, time: f64, pid: i32, lwp: i32, child: i32) -> String {
    let mut s = track_prefix(layout, time, pid, lwp, "fork");
    let _ = writeln!(s, "{}# {child}", blanks(layout));
    s
}

/// The `exec` row after the old image's totals: blank fields, then `# '<new argv>'`.
pub fn track_exec_args(layout: &TrackLayout, time: f64, pid: i32, lwp: i32, argv: &str) -> String {
    let mut s = track_prefix(layout, time, pid, lwp, "exec");
    let _ = writeln!(s, "{}# '{argv}'", blanks(layout));
    s
}

/// cpustat's header line.
pub fn stat_header(layout: &StatLayout, pics: &[u32]) -> String {
    let mut s = format!("{:>7} {:>3} {:>5} ", "time", "cpu", "event");
    if layout.tick_column {
        let _ = write!(s, "{TICK_NAME:>9} ");
    }
    s.push_str(&pic_header(pics));
    s.push('\n');
    s
}

/// A cpustat row: `tick` with the CPU's id, or `total` with the number of CPUs measured.
pub fn stat_row(
    layout: &StatLayout,
    time: f64,
    cpu: i64,
    event: &str,
    sample: &Sample,
    set: &str,
) -> String {
    let mut s = format!("{time:7.3} {cpu:3} {event:>5} ");
    values(&mut s, sample, layout.tick_column);
    row_end(&mut s, sample, layout.several_sets.then_some(set));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(values: &[u64], tick: u64) -> Sample {
        Sample {
            values: values.to_vec(),
            scaled: values.to_vec(),
            tick,
            hrtime: 1,
            enabled: 10,
            running: 10,
        }
    }

    const PLAIN: TrackLayout = TrackLayout {
        pid_column: false,
        tick_column: false,
        several_sets: false,
    };

    #[test]
    fn pic_columns_are_cut_to_ten() {
        assert_eq!(pic_header(&[0, 1]), "     pic0      pic1 ");
        assert_eq!(pic_header(&[12, 14]), "     pic12     pic14");
        assert_eq!(pic_header(&[100]), "     pic10", "three digits lose one");
    }

    #[test]
    fn cputrack_man_page_example() {
        // $ cputrack -t -c pic0=Cycle_cnt,pic1=Instr_cnt sleep 10
        let t = TrackLayout {
            tick_column: true,
            ..PLAIN
        };
        assert_eq!(
            track_header(&t, &[0, 1]),
            format!(
                "   time lwp      event {:>9}      pic0      pic1 \n",
                TICK_NAME
            )
        );
        assert_eq!(
            track_row(
                &t,
                1.007,
                7,
                1,
                "tick",
                &sample(&[765308, 219233], 812345),
                "x"
            ),
            "  1.007   1       tick    812345    765308    219233 \n"
        );
        assert_eq!(
            track_row(
                &t,
                10.017,
                7,
                1,
                "exit",
                &sample(&[844703, 228058], 1650112),
                "x"
            ),
            " 10.017   1       exit   1650112    844703    228058 \n"
        );
    }

    #[test]
    fn cputrack_fork_exec_example() {
        // $ cputrack -fev -c EC_ref,EC_hit /bin/ulimit -c
        let f = TrackLayout {
            pid_column: true,
            ..PLAIN
        };
        assert_eq!(
            track_header(&f, &[0, 1]),
            "   time    pid lwp      event      pic0      pic1 \n"
        );
        assert_eq!(
            track_row(
                &f,
                0.007,
                101142,
                1,
                "init_lwp",
                &sample(&[805286, 20023], 0),
                ""
            ),
            "  0.007 101142   1   init_lwp    805286     20023 \n"
        );
        assert_eq!(
            track_fork(&f, 0.023, 101142, 1, 101143),
            "  0.023 101142   1       fork                     # 101143\n"
        );
        assert_eq!(
            track_exec_args(
                &f,
                0.029,
                101143,
                1,
                "/usr/bin/sh /usr/bin/basename /bin/ulimit"
            ),
            "  0.029 101143   1       exec                     \
             # '/usr/bin/sh /usr/bin/basename /bin/ulimit'\n"
        );
    }

    #[test]
    fn blank_fields_do_not_follow_the_set_size_but_do_follow_the_tick() {
        let t = TrackLayout {
            tick_column: true,
            ..PLAIN
        };
        assert_eq!(
            track_fork(&t, 1.0, 5, 3, 6),
            "  1.000   3       fork                               # 6\n"
        );
    }

    #[test]
    fn several_sets_name_the_set() {
        let s = TrackLayout {
            several_sets: true,
            ..PLAIN
        };
        assert_eq!(
            track_row(&s, 2.0, 1, 12345, "tick", &sample(&[9], 0), "page-faults"),
            "  2.000 12345       tick         9  # page-faults\n"
        );
    }

    #[test]
    fn values_print_as_signed_64_bit() {
        assert_eq!(
            track_row(&PLAIN, 0.5, 1, 1, "tick", &sample(&[u64::MAX], 0), ""),
            "  0.500   1       tick        -1 \n"
        );
    }

    #[test]
    fn multiplexed_rows_are_scaled_and_marked() {
        let mut m = sample(&[100], 0);
        m.scaled = vec![400];
        m.running = 25;
        m.enabled = 100;
        assert_eq!(
            track_row(&PLAIN, 1.0, 1, 1, "tick", &m, ""),
            "  1.000   1       tick       400 (25.00%)\n"
        );
        let s = StatLayout {
            tick_column: false,
            several_sets: true,
        };
        assert_eq!(
            stat_row(&s, 1.0, 0, "tick", &m, "cycles"),
            "  1.000   0  tick       400  # cycles (25.00%)\n"
        );
    }

    #[test]
    fn cpustat_man_page_example() {
        // $ cpustat -c EC_ref,EC_misses 1 2
        let s = StatLayout::default();
        assert_eq!(
            stat_header(&s, &[0, 1]),
            "   time cpu event      pic0      pic1 \n"
        );
        assert_eq!(
            stat_row(&s, 1.008, 0, "tick", &sample(&[69284, 1647], 0), ""),
            "  1.008   0  tick     69284      1647 \n"
        );
        assert_eq!(
            stat_row(&s, 2.008, 2, "total", &sample(&[494166, 16702], 0), ""),
            "  2.008   2 total    494166     16702 \n"
        );
        let t = StatLayout {
            tick_column: true,
            several_sets: false,
        };
        assert_eq!(
            stat_header(&t, &[0]),
            format!("   time cpu event {:>9}      pic0 \n", TICK_NAME)
        );
    }
}
