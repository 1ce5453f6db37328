#!/usr/bin/env python3
"""An independent pprof decoder for the tests: Google's protobuf runtime, with the
perftools.profiles schema declared here field by field (the numbers of pprof's
profile.proto), no code from this project. Prints a JSON summary of a profile file:
total samples, samples per event label, per leaf function, sample types, comments,
mapping file names with build ids, and label keys; and each event's values (the column
named after the event label), per event and per (event, leaf function). With --stacks,
each sample instead: its tid, samples, event, value in its event's column, and frames
innermost first as [function, file, line, mapping file]."""

import gzip
import json
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
INT64, UINT64, STRING, BOOL, MESSAGE = (
    F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_MESSAGE)
REP, OPT = F.LABEL_REPEATED, F.LABEL_OPTIONAL

SCHEMA = {
    "Profile": [
        ("sample_type", 1, MESSAGE, REP, "ValueType"), ("sample", 2, MESSAGE, REP, "Sample"),
        ("mapping", 3, MESSAGE, REP, "Mapping"), ("location", 4, MESSAGE, REP, "Location"),
        ("function", 5, MESSAGE, REP, "Function"), ("string_table", 6, STRING, REP, None),
        ("drop_frames", 7, INT64, OPT, None), ("keep_frames", 8, INT64, OPT, None),
        ("time_nanos", 9, INT64, OPT, None), ("duration_nanos", 10, INT64, OPT, None),
        ("period_type", 11, MESSAGE, OPT, "ValueType"), ("period", 12, INT64, OPT, None),
        ("comment", 13, INT64, REP, None), ("default_sample_type", 14, INT64, OPT, None),
    ],
    "ValueType": [("type", 1, INT64, OPT, None), ("unit", 2, INT64, OPT, None)],
    "Sample": [
        ("location_id", 1, UINT64, REP, None), ("value", 2, INT64, REP, None),
        ("label", 3, MESSAGE, REP, "Label"),
    ],
    "Label": [
        ("key", 1, INT64, OPT, None), ("str", 2, INT64, OPT, None),
        ("num", 3, INT64, OPT, None), ("num_unit", 4, INT64, OPT, None),
    ],
    "Mapping": [
        ("id", 1, UINT64, OPT, None), ("memory_start", 2, UINT64, OPT, None),
        ("memory_limit", 3, UINT64, OPT, None), ("file_offset", 4, UINT64, OPT, None),
        ("filename", 5, INT64, OPT, None), ("build_id", 6, INT64, OPT, None),
        ("has_functions", 7, BOOL, OPT, None), ("has_filenames", 8, BOOL, OPT, None),
        ("has_line_numbers", 9, BOOL, OPT, None), ("has_inline_frames", 10, BOOL, OPT, None),
    ],
    "Location": [
        ("id", 1, UINT64, OPT, None), ("mapping_id", 2, UINT64, OPT, None),
        ("address", 3, UINT64, OPT, None), ("line", 4, MESSAGE, REP, "Line"),
        ("is_folded", 5, BOOL, OPT, None),
    ],
    "Line": [("function_id", 1, UINT64, OPT, None), ("line", 2, INT64, OPT, None)],
    "Function": [
        ("id", 1, UINT64, OPT, None), ("name", 2, INT64, OPT, None),
        ("system_name", 3, INT64, OPT, None), ("filename", 4, INT64, OPT, None),
        ("start_line", 5, INT64, OPT, None),
    ],
}


def profile_class():
    fd = descriptor_pb2.FileDescriptorProto(
        name="profile_test.proto", package="perftools.profiles", syntax="proto3")
    for name, fields in SCHEMA.items():
        msg = fd.message_type.add(name=name)
        for fname, number, ftype, label, ref in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if ref:
                f.type_name = ".perftools.profiles." + ref
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    descriptor = pool.FindMessageTypeByName("perftools.profiles.Profile")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    # Debian 12's python3-protobuf (4.21)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def stacks(p):
    s = p.string_table
    functions = {f.id: f for f in p.function}
    mappings = {m.id: s[m.filename] for m in p.mapping}
    locations = {l.id: l for l in p.location}
    columns = {s[t.type]: i for i, t in enumerate(p.sample_type)}
    out = []
    for sample in p.sample:
        labels = {s[l.key]: (s[l.str] if l.str else l.num) for l in sample.label}
        frames = []
        for loc_id in sample.location_id:
            loc = locations[loc_id]
            for line in loc.line:
                f = functions[line.function_id]
                frames.append([s[f.name], s[f.filename], line.line,
                               mappings.get(loc.mapping_id, "")])
        ev = labels.get("event", "")
        value = sample.value[columns[ev]] if ev in columns else sample.value[0]
        text = {s[l.key]: s[l.str] for l in sample.label if l.str}
        out.append({"tid": labels.get("tid", 0), "n": sample.value[0], "event": ev,
                    "value": value, "frames": frames, "labels": text})
    print(json.dumps({"stacks": out}))


def main(path, want_stacks=False):
    data = open(path, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    p = profile_class()()
    p.ParseFromString(data)
    if want_stacks:
        return stacks(p)
    s = p.string_table
    functions = {f.id: s[f.name] for f in p.function}
    locations = {l.id: l for l in p.location}
    by_event, by_leaf, label_keys = {}, {}, set()
    value_by_event, value_by_leaf = {}, {}
    columns = {s[t.type]: i for i, t in enumerate(p.sample_type)}
    total = 0
    for sample in p.sample:
        n = sample.value[0]
        total += n
        labels = {s[l.key]: (s[l.str] if l.str else l.num) for l in sample.label}
        label_keys.update(labels)
        ev = labels.get("event", "")
        by_event[ev] = by_event.get(ev, 0) + n
        leaf_loc = locations[sample.location_id[0]]
        leaf = functions[leaf_loc.line[0].function_id] if leaf_loc.line else "?"
        by_leaf[leaf] = by_leaf.get(leaf, 0) + n
        if ev in columns:
            v = sample.value[columns[ev]]
            value_by_event[ev] = value_by_event.get(ev, 0) + v
            key = ev + ":" + leaf
            value_by_leaf[key] = value_by_leaf.get(key, 0) + v
    print(json.dumps({
        "total": total,
        "by_event": by_event,
        "by_leaf": by_leaf,
        "sample_types": [[s[t.type], s[t.unit]] for t in p.sample_type],
        "comments": [s[c] for c in p.comment],
        "mappings": {s[m.filename]: s[m.build_id] for m in p.mapping},
        "label_keys": sorted(label_keys),
        "value_by_event": value_by_event,
        "value_by_leaf": value_by_leaf,
        "period": p.period,
        "period_type": [s[p.period_type.type], s[p.period_type.unit]],
        "default_sample_type": s[p.default_sample_type],
    }))


if __name__ == "__main__":
    main(sys.argv[1], "--stacks" in sys.argv[2:])
