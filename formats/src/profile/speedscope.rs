//! speedscope's JSON file format (https://www.speedscope.app/file-format-schema.json): one
//! "sampled" profile per event, frames shared. The lost count is in each profile's name.

use std::{collections::HashMap, io};

use serde_json::{Value, json};

use super::Profile;

pub fn write_speedscope(profile: &Profile, out: &mut impl io::Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &speedscope(profile))?;
    writeln!(out)
}

fn speedscope(profile: &Profile) -> Value {
    let mut frames: Vec<Value> = Vec::new();
    let mut index: HashMap<(String, Option<String>, Option<u32>), usize> = HashMap::new();
    let mut profiles = Vec::new();
    for event in profile.events() {
        let mut samples = Vec::new();
        let mut weights = Vec::new();
        for s in profile.stacks.iter().filter(|s| s.event == event) {
            let mut stack = Vec::with_capacity(s.frames.len() + 1);
            // The command is the root frame, as in folded stacks.
            let names = std::iter::once((s.comm.to_string(), None, None)).chain(
                profile.frames_of(s).map(|f| {
                    (
                        f.function.to_string(),
                        f.file.as_deref().map(str::to_string),
                        f.line,
                    )
                }),
            );
            for key in names {
                let next = frames.len();
                let i = *index.entry(key.clone()).or_insert(next);
                if i == next {
                    let mut frame = json!({ "name": key.0 });
                    if let Some(file) = &key.1 {
                        frame["file"] = json!(file);
                    }
                    if let Some(line) = key.2 {
                        frame["line"] = json!(line);
                    }
                    frames.push(frame);
                }
                stack.push(i);
            }
            samples.push(stack);
            weights.push(s.count);
        }
        let total: u64 = weights.iter().sum();
        // Weights are the event's values: nanoseconds of time, or events.
        let unit = profile.unit(&event);
        profiles.push(json!({
            "type": "sampled",
            "name": format!(
                "{event}: {} {}, {} samples lost{}",
                total,
                unit.short(),
                profile.info.lost,
                untracked(profile)
            ),
            "unit": if unit == super::Unit::Nanoseconds { "nanoseconds" } else { "none" },
            "startValue": 0,
            "endValue": total,
            "samples": samples,
            "weights": weights,
        }));
    }
    json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "exporter": concat!("profiler ", env!("CARGO_PKG_VERSION")),
        "name": format!(
            "{} samples of {}; lost {}{}",
            profile.info.samples,
            profile.info.event,
            profile.info.lost,
            untracked(profile)
        ),
        "activeProfileIndex": 0,
        "shared": { "frames": frames },
        "profiles": profiles,
    })
}

/// "; N children not followed", when children of targets could not be followed.
fn untracked(profile: &Profile) -> String {
    match profile.info.untracked {
        0 => String::new(),
        n => format!("; {n} children not followed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::{Frame, FrameKind};

    #[test]
    fn frames_are_shared_and_weights_are_events() {
        let f = |n| Frame::named(n, FrameKind::User);
        let mut p = Profile::default();
        // Page faults: 9 and 1 events (of 3 and 1 samples).
        p.push("page-faults", "c", &[f("main"), f("leaf")], 9)
            .samples = 3;
        p.push("page-faults", "c", &[f("main")], 1);
        p.info.lost = 2;
        let v = speedscope(&p);
        let names: Vec<&str> = v["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["c", "main", "leaf"]);
        let prof = &v["profiles"][0];
        assert_eq!(prof["samples"], json!([[0, 1, 2], [0, 1]]));
        assert_eq!(prof["weights"], json!([9, 1]));
        assert_eq!(prof["endValue"], json!(10));
        assert_eq!(
            prof["name"],
            json!("page-faults: 10 events, 2 samples lost")
        );
        assert_eq!(prof["unit"], json!("none"));
    }
}
