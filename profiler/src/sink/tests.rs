use std::{cell::RefCell, io, rc::Rc, sync::Arc};

use super::*;
use crate::{
    profile::Format,
    symbolize::{Frame, FrameKind},
};

/// What the fake sinks saw and said, in order.
type Log = Rc<RefCell<Vec<String>>>;

/// A sink that logs what it is handed and fails where it is told to.
struct Fake {
    name: &'static str,
    log: Log,
    /// Fails the intervals of these sample counts.
    fail_interval: Vec<u64>,
    fail_finish: bool,
    /// The pprof message of each profile handed over, to compare across sinks.
    messages: Rc<RefCell<Vec<Arc<pprof::proto::Profile>>>>,
}

impl Fake {
    fn new(name: &'static str, log: &Log) -> Self {
        Self {
            name,
            log: log.clone(),
            fail_interval: Vec::new(),
            fail_finish: false,
            messages: Default::default(),
        }
    }

    fn error(&self, what: &str) -> SinkError {
        SinkError::Write {
            name: format!("{}-{what}", self.name),
            source: io::Error::other("disk full"),
        }
    }
}

impl Sink for Fake {
    fn interval(
        &mut self,
        profile: &Outgoing<'_>,
        tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        let n = profile.profile.info.samples;
        self.messages.borrow_mut().push(profile.pprof().clone());
        if self.fail_interval.contains(&n) {
            return Err(self.error(&format!("interval{n}")));
        }
        self.log
            .borrow_mut()
            .push(format!("{} interval {n}", self.name));
        tell(&Notice::OneEvent(format!("{} took {n}", self.name)));
        Ok(())
    }

    fn finish(
        self: Box<Self>,
        last: &Outgoing<'_>,
        _tell: &mut dyn FnMut(&Notice<'_>),
    ) -> Result<(), SinkError> {
        let n = last.profile.info.samples;
        if self.fail_finish {
            return Err(self.error("finish"));
        }
        self.log
            .borrow_mut()
            .push(format!("{} finish {n}", self.name));
        Ok(())
    }

    fn abandon(self: Box<Self>) {
        self.log.borrow_mut().push(format!("{} abandon", self.name));
    }
}

fn profile(samples: u64) -> Profile {
    let mut p = Profile::default();
    p.info.event = "cpu-clock".into();
    p.info.frequency_hz = 99;
    p.info.samples = samples;
    let f = |n: &str| Frame::named(n, FrameKind::User);
    p.push("cpu-clock", "app", &[f("main"), f("work")], samples);
    p
}

/// A list whose notices are logged as the CLI prints them.
fn sinks(log: &Log) -> Sinks {
    let told = log.clone();
    Sinks::new(move |n| told.borrow_mut().push(format!("profiler: {n}")))
}

#[test]
fn a_sink_failing_an_interval_stops_neither_the_others_nor_itself() {
    let log = Log::default();
    let mut list = sinks(&log);
    let mut bad = Fake::new("bad", &log);
    bad.fail_interval = vec![2];
    list.push(bad);
    list.push(Fake::new("good", &log));
    for n in 1..=3 {
        list.interval(&profile(n));
    }
    let end = list.finish(&profile(4));
    assert_eq!(
        *log.borrow(),
        [
            "bad interval 1",
            "profiler: bad took 1",
            "good interval 1",
            "profiler: good took 1",
            // Told at once; the other sink still takes the interval.
            "profiler: error: writing bad-interval2: disk full",
            "good interval 2",
            "profiler: good took 2",
            // The failing sink is handed the next one.
            "bad interval 3",
            "profiler: bad took 3",
            "good interval 3",
            "profiler: good took 3",
            "bad finish 4",
            "good finish 4",
        ]
    );
    // The run fails at the end, with the interval's error.
    assert_eq!(
        end.unwrap_err().to_string(),
        "writing bad-interval2: disk full"
    );
}

#[test]
fn a_sink_failing_at_the_end_lets_the_rest_finish_and_its_error_comes_first() {
    let log = Log::default();
    let mut list = sinks(&log);
    let mut early = Fake::new("early", &log);
    early.fail_interval = vec![1];
    list.push(early);
    let mut bad = Fake::new("bad", &log);
    bad.fail_finish = true;
    list.push(bad);
    let mut worse = Fake::new("worse", &log);
    worse.fail_finish = true;
    list.push(worse);
    list.push(Fake::new("good", &log));
    list.interval(&profile(1));
    log.borrow_mut().clear();
    let end = list.finish(&profile(2));
    assert_eq!(*log.borrow(), ["early finish 2", "good finish 2"]);
    // The first failure of the end wins over the others and over the interval's.
    assert_eq!(
        end.unwrap_err().to_string(),
        "writing bad-finish: disk full"
    );
}

#[test]
fn abandoning_reaches_every_sink() {
    let log = Log::default();
    let mut list = sinks(&log);
    list.push(Fake::new("a", &log));
    list.push(Fake::new("b", &log));
    list.interval(&profile(1));
    log.borrow_mut().clear();
    list.abandon();
    assert_eq!(*log.borrow(), ["a abandon", "b abandon"]);
}

#[test]
fn every_sink_gets_the_same_pprof_message_encoded_once() {
    let log = Log::default();
    let mut list = sinks(&log);
    let (a, b) = (Fake::new("a", &log), Fake::new("b", &log));
    let (seen_a, seen_b) = (a.messages.clone(), b.messages.clone());
    list.push(a);
    list.push(b);
    list.interval(&profile(1));
    list.interval(&profile(2));
    let (seen_a, seen_b) = (seen_a.borrow(), seen_b.borrow());
    assert_eq!(seen_a.len(), 2);
    for (x, y) in seen_a.iter().zip(seen_b.iter()) {
        assert!(Arc::ptr_eq(x, y), "one message per profile");
    }
    assert!(!Arc::ptr_eq(&seen_a[0], &seen_a[1]), "one per interval");
    assert_eq!(
        seen_a[1].sample[0].value[0], 2,
        "the second interval's samples"
    );
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

#[test]
fn files_series_and_table_write_what_their_writers_write() {
    let dir = scratch();
    let log = Log::default();
    let mut list = sinks(&log);
    let folded = dir.path().join("out.folded");
    list.push(
        FileSink::create(&folded, Format::Folded, "t")
            .unwrap()
            .describing(),
    );
    let plain = dir.path().join("plain.folded");
    list.push(FileSink::create(&plain, Format::Folded, "t").unwrap());
    let pb = dir.path().join("out.pb.gz");
    list.push(FileSink::create(&pb, Format::Pprof, "t").unwrap());
    let series = dir.path().join("series");
    std::fs::create_dir(&series).unwrap();
    list.push(Series::open(&series, Format::Folded).unwrap());
    let table = Rc::new(RefCell::new(Vec::new()));
    list.push(TableSink::new(
        Default::default(),
        Box::new(Shared(table.clone())),
    ));
    // Nothing is visible before the end (atomic files).
    assert!(!folded.exists() && !pb.exists());
    list.interval(&profile(3));
    let last = profile(5);
    list.finish(&last).unwrap();

    let mut expected = Vec::new();
    crate::profile::write_folded(&last, &mut expected).unwrap();
    assert_eq!(std::fs::read(&folded).unwrap(), expected);
    assert_eq!(std::fs::read(&plain).unwrap(), expected);
    let read = crate::profile::read_pprof(&std::fs::read(&pb).unwrap()).unwrap();
    assert_eq!(read.total(), last.total());
    assert_eq!(read.stacks.len(), 1);
    let mut files: Vec<_> = std::fs::read_dir(&series)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "the interval and the last: {files:?}");
    assert!(
        std::fs::read_to_string(&files[1])
            .unwrap()
            .ends_with(" 5\n")
    );
    let expected_table = crate::profile::render_report(&last, Default::default());
    assert_eq!(
        String::from_utf8(table.borrow().clone()).unwrap(),
        expected_table
    );
    let log = log.borrow();
    assert_eq!(
        log[0],
        format!("profiler: wrote {} (3 samples, 0 lost)", files[0].display())
    );
    assert_eq!(
        log[1..],
        [
            format!("profiler: folded stacks written to {}", folded.display()),
            format!("profiler: wrote {}", plain.display()),
            format!("profiler: wrote {}", pb.display()),
            format!("profiler: wrote {} (5 samples, 0 lost)", files[1].display()),
        ]
    );
}

#[test]
fn a_file_that_cannot_be_put_in_place_fails_and_the_next_sink_still_finishes() {
    let dir = scratch();
    let log = Log::default();
    let mut list = sinks(&log);
    let sub = dir.path().join("gone");
    std::fs::create_dir(&sub).unwrap();
    let lost = sub.join("out.svg");
    list.push(FileSink::create(&lost, Format::Svg, "t").unwrap());
    let kept = dir.path().join("out.folded");
    list.push(FileSink::create(&kept, Format::Folded, "t").unwrap());
    // Its directory goes away under it.
    std::fs::remove_dir_all(&sub).unwrap();
    let e = list.finish(&profile(2)).unwrap_err();
    assert!(
        matches!(e, SinkError::Write { .. } | SinkError::Commit { .. }),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .starts_with(&format!("writing {}: ", lost.display())),
        "{e}"
    );
    assert!(kept.exists());
    assert_eq!(
        *log.borrow(),
        [format!("profiler: wrote {}", kept.display())]
    );
}

/// A table stream the test can read back.
struct Shared(Rc<RefCell<Vec<u8>>>);

impl io::Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
