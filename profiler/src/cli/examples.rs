//! The examples each subcommand's `--help` ends with: real command lines, each one tested
//! (`tests/tests/cli.rs`) to run as shown.

pub const RECORD: &str = "\
Examples:
  profiler record -F 999 ./myprog arg     profile a command until it exits (profile.pb.gz)
  profiler record -a -d 5 -o system.svg   the whole system for 5 s, as a flame graph
  profiler record -e page-faults -c 100 -o - make | profiler report -i -";

pub const REPORT: &str = "\
Examples:
  profiler report                         the table of profile.pb.gz (record's default output)
  profiler report run.pb.gz --by comm     samples per command name (or -i run.pb.gz)
  profiler report -i me.folded -e page-faults --limit 10";

pub const FLAMEGRAPH: &str = "\
Examples:
  profiler flamegraph                     profile.pb.gz to flamegraph.svg
  profiler flamegraph run.pb.gz --folded -o -   folded stacks on stdout
  profiler flamegraph --diff before.pb.gz after.pb.gz -o diff.svg";

pub const TRACK: &str = "\
Examples:
  profiler track -- ./myprog              the default events (perf stat's), per thread
  profiler track -c page-faults,sys -T 0.5 -- make -j2
  profiler track -c task-clock -p 1234 -N 10   a running process, 10 samples";

pub const STAT: &str = "\
Examples:
  profiler stat -c page-faults 1 5        every CPU, a row per second, 5 rows and a total
  profiler stat -c cpu-clock -C 0-1 --json 2
  profiler stat -c task-clock --for-each-cgroup=system.slice/* 1 3";

pub const LIST: &str = "\
Examples:
  profiler list                           what this host can count
  profiler list --json | jq '.events[].name'";

pub const SYMBOLIZE: &str = "\
Examples:
  profiler record --symbolize none -o raw.pb.gz -- ./myprog
  profiler symbolize -i raw.pb.gz -o named.pb.gz --debug-dir ./debug";
