#!/usr/bin/env python3
"""Profile-store receivers for the export tests, built on the official definitions: the
`opentelemetry-proto` package's profiles v1development messages and collector service stubs,
served with `grpcio` (OTLP gRPC) and http.server (OTLP HTTP), and a Pyroscope-shaped server:
`/ingest` (pprof uploads) and the Push API's Connect unary call
`/push.v1.PusherService/Push` (a `push.v1.PushRequest`, its schema declared below from
grafana/pyroscope's push.proto), whose pprof files are decoded with Google's protobuf runtime
(`../pprof/decode_pprof.py`'s schema). Nothing here comes from the profiler's code.

    receiver.py serve --out FILE [--grpc-port N] [--http-port N] [--pyroscope-port N]
                      [--fail CODE[:COUNT]] [--max-seconds S] [--tls-cert PEM --tls-key PEM]
        Listens on 127.0.0.1 only (port 0: a free one), prints {"grpc":..,"http":..,
        "pyroscope":..} on stdout once serving, appends one JSON line per request to FILE
        (protocol, headers, the decoded samples in a normal form), and exits when stdin
        closes or after --max-seconds. --fail: answer the first COUNT requests of each
        protocol (all, without COUNT) with HTTP CODE (gRPC: the code OTLP maps it to; the
        Push API: Connect's JSON error with the code Connect maps it to). The Push API is
        served on the Pyroscope port and logged as protocol "push", with its series (labels,
        ID, rows) and, as its summary, all their rows together.
    receiver.py decode FILE
        Prints the normal form of a pprof file, to compare with what was received.

The normal form of a profile: one row per (sample, value type) with a non-zero value:
labels (pid, tid, comm, cpu, event, ...), the stack (leaf first; a named frame is its
functions, inlined first; an unnamed one is file, build id and file offset), the value's type
and unit, and the value; rows sorted. Plus the run's counters (pprof comments
`profiler.K=V`, OTLP profile attributes)."""

import argparse
import fcntl
import gzip
import hashlib
import json
import os
import ssl
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pprof"))
from decode_pprof import profile_class  # noqa: E402
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402


# --- Pyroscope's Push API ----------------------------------------------------------------------

PUSH_PATH = "/push.v1.PusherService/Push"


def push_request_class():
    """`push.v1.PushRequest` (api/push/v1/push.proto) with `types.v1.LabelPair`
    (api/types/v1/types.proto), declared field by field."""
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="push_test.proto", package="push.v1",
                                            syntax="proto3")
    schema = {
        "PushRequest": [("series", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, "RawProfileSeries")],
        "RawProfileSeries": [
            ("labels", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, "LabelPair"),
            ("samples", 2, F.TYPE_MESSAGE, F.LABEL_REPEATED, "RawSample"),
        ],
        "LabelPair": [("name", 1, F.TYPE_STRING, F.LABEL_OPTIONAL, None),
                      ("value", 2, F.TYPE_STRING, F.LABEL_OPTIONAL, None)],
        "RawSample": [("raw_profile", 1, F.TYPE_BYTES, F.LABEL_OPTIONAL, None),
                      ("ID", 2, F.TYPE_STRING, F.LABEL_OPTIONAL, None)],
    }
    for name, fields in schema.items():
        msg = fd.message_type.add(name=name)
        for fname, number, ftype, label, ref in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if ref:
                f.type_name = ".push.v1." + ref
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    descriptor = pool.FindMessageTypeByName("push.v1.PushRequest")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


# HTTP statuses the tests ask for, as the Connect codes that come with them.
CONNECT_CODES = {401: "unauthenticated", 403: "permission_denied", 400: "invalid_argument",
                 429: "resource_exhausted", 503: "unavailable", 500: "internal"}


# --- normal forms ---------------------------------------------------------------------------

def pprof_rows(data):
    digest = hashlib.sha256(data).hexdigest()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    p = profile_class()()
    p.ParseFromString(data)
    s = p.string_table
    functions = {f.id: s[f.name] for f in p.function}
    mappings = {m.id: m for m in p.mapping}
    locations = {}
    for loc in p.location:
        if loc.line:
            locations[loc.id] = "|".join(functions[ln.function_id] for ln in loc.line)
        else:
            m = mappings.get(loc.mapping_id)
            if m is None:
                locations[loc.id] = "?+%x" % loc.address
            else:
                offset = loc.address - m.memory_start + m.file_offset
                locations[loc.id] = "%s@%s+%x" % (s[m.filename], s[m.build_id], offset)
    types = [(s[t.type], s[t.unit]) for t in p.sample_type]
    rows = []
    for sample in p.sample:
        labels = {s[l.key]: (s[l.str] if l.str else l.num) for l in sample.label}
        stack = [locations[i] for i in sample.location_id]
        for (ty, unit), value in zip(types, sample.value):
            if value:
                rows.append({"labels": labels, "stack": stack, "type": ty, "unit": unit,
                             "value": value})
    counters = {}
    for c in p.comment:
        key, _, value = s[c].partition("=")
        if key.startswith("profiler."):
            counters[key] = int(value) if value.lstrip("-").isdigit() else value
    out = normal(rows, counters if rows else None)
    out["sha256"] = digest
    return out


# OTLP sample attributes back to the pprof labels they were made from.
OTLP_LABELS = {"thread.id": "tid", "thread.name": "comm", "cpu.logical_number": "cpu"}
# The sampled code's own labels (a goroutine's): `process.context.label.KEY`, back to KEY,
# or `label:KEY` where KEY is one of the profiler's own labels.
OWN_LABEL = "process.context.label."
RESERVED = {"pid", "tid", "comm", "cpu", "cgroup", "cgroup_id", "event"}


def label_of(key):
    if key in OTLP_LABELS:
        return OTLP_LABELS[key]
    if key.startswith(OWN_LABEL):
        own = key[len(OWN_LABEL):]
        return "label:" + own if own in RESERVED else own
    return key.replace("profiler.", "", 1)


def any_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def otlp_rows(req):
    d = req.dictionary
    s = d.string_table

    def attrs(indices):
        out = {}
        for i in indices:
            kv = d.attribute_table[i]
            out[s[kv.key_strindex]] = any_value(kv.value)
        return out

    def frame(i):
        loc = d.location_table[i]
        if loc.lines:
            return "|".join(s[d.function_table[ln.function_index].name_strindex]
                            for ln in loc.lines)
        m = d.mapping_table[loc.mapping_index]
        build = attrs(m.attribute_indices).get("process.executable.build_id.gnu", "")
        offset = loc.address - m.memory_start + m.file_offset
        return "%s@%s+%x" % (s[m.filename_strindex], build, offset)

    rows, counters, resources, links = [], None, [], {}
    for rp in req.resource_profiles:
        res = {kv.key: any_value(kv.value) for kv in rp.resource.attributes}
        resources.append(res)
        for sp in rp.scope_profiles:
            for prof in sp.profiles:
                ty = s[prof.sample_type.type_strindex]
                unit = s[prof.sample_type.unit_strindex]
                counters = {k: v for k, v in attrs(prof.attribute_indices).items()}
                for sample in prof.samples:
                    labels = {"pid": res["process.pid"]}
                    for k, v in attrs(sample.attribute_indices).items():
                        labels[label_of(k)] = v
                    if sample.link_index:
                        link = d.link_table[sample.link_index]
                        key = link.trace_id.hex() + "/" + link.span_id.hex()
                        of = links.setdefault(key, {})
                        of[ty] = of.get(ty, 0) + sum(sample.values)
                    stack = [frame(i) for i in d.stack_table[sample.stack_index].location_indices]
                    for value in sample.values:
                        rows.append({"labels": labels, "stack": stack, "type": ty,
                                     "unit": unit, "value": value})
    out = normal(rows, counters)
    out["resources"] = resources
    # Each trace's linked samples ("TRACE/SPAN" in hex): their values by sample type.
    out["links"] = links
    return out


def normal(rows, counters):
    rows.sort(key=lambda r: json.dumps(r, sort_keys=True))
    return {"rows": rows, "counters": counters}


# --- behaviour --------------------------------------------------------------------------------

class Failing:
    """Answers the first COUNT requests of each protocol with CODE (all of them without
    COUNT)."""

    def __init__(self, spec):
        self.code, self.left = None, {}
        if spec:
            code, _, count = spec.partition(":")
            self.code = int(code)
            self.count = int(count) if count else None
        self.lock = threading.Lock()

    def next(self, protocol):
        if self.code is None:
            return None
        with self.lock:
            if self.count is None:
                return self.code
            n = self.left.setdefault(protocol, self.count)
            if n == 0:
                return None
            self.left[protocol] = n - 1
            return self.code


class Log:
    """One JSON line per request. An accepted one is written after its answer is out: a
    test that stops the store on seeing an interval accepted must not cut that answer off
    (the profiler would then, rightly, send the interval again)."""

    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()
        self.in_flight = 0

    # While a request is between its arrival and its line (its answer may already be out),
    # the log is locked (flock): a test reading it after the profiler saw the answer waits
    # for the line instead of missing it (it read an empty log once: the profiler had its
    # 200 and had exited, the line was not written yet). Counted: the handlers' threads share
    # one open file, whose flock is one lock.
    def begin(self):
        with self.lock:
            self.in_flight += 1
            if self.in_flight == 1:
                fcntl.flock(self.f, fcntl.LOCK_EX)

    def end(self):
        with self.lock:
            self.in_flight -= 1
            if self.in_flight == 0:
                fcntl.flock(self.f, fcntl.LOCK_UN)

    def write(self, protocol, status, headers, summary=None, extra=None):
        line = {"protocol": protocol, "status": status, "headers": headers,
                "summary": summary, "time": time.time()}
        line.update(extra or {})
        with self.lock:
            self.f.write(json.dumps(line, sort_keys=True) + "\n")
            self.f.flush()


GRPC_CODES = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 400: "INVALID_ARGUMENT",
              429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 500: "INTERNAL"}


def serve(args):
    import grpc
    from opentelemetry.proto.collector.profiles.v1development import (
        profiles_service_pb2 as pb, profiles_service_pb2_grpc as pb_grpc)

    log, failing = Log(args.out), Failing(args.fail)

    class Profiles(pb_grpc.ProfilesServiceServicer):
        def Export(self, request, context):
            headers = {k: v for k, v in context.invocation_metadata()
                       if k in ("authorization", "x-scope-orgid")}
            code = failing.next("grpc")
            if code is not None:
                log.write("grpc", code, headers)
                context.abort(getattr(grpc.StatusCode, GRPC_CODES.get(code, "UNAVAILABLE")),
                              "test receiver answers %d" % code)
            rows = otlp_rows(request)
            log.begin()

            # Logged as accepted once the answer is out (the RPC has ended), as for HTTP.
            def logged():
                try:
                    log.write("grpc", 200, headers, rows, {"bytes": request.ByteSize()})
                finally:
                    log.end()
            if not context.add_callback(logged):
                logged()  # the RPC has ended already
            return pb.ExportProfilesServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ProfilesServiceServicer_to_server(Profiles(), server)
    if args.tls_cert:
        creds = grpc.ssl_server_credentials(
            [(open(args.tls_key, "rb").read(), open(args.tls_cert, "rb").read())])
        grpc_port = server.add_secure_port("127.0.0.1:%d" % args.grpc_port, creds)
    else:
        grpc_port = server.add_insecure_port("127.0.0.1:%d" % args.grpc_port)
    server.start()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body=b"", ctype="text/plain"):
            self.send_response(code)
            if code in (429, 503):
                self.send_header("Retry-After", "1")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            log.begin()
            try:
                self.post()
            finally:
                log.end()

        def post(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            url = urlparse(self.path)
            protocol = self.server.protocol
            if protocol == "pyroscope" and url.path == PUSH_PATH:
                protocol = "push"
            headers = {k.lower(): v for k, v in self.headers.items()
                       if k.lower() in ("authorization", "x-scope-orgid")}
            code = failing.next(protocol)
            if code is not None:
                log.write(protocol, code, headers)
                text = b"test receiver answers %d" % code
                if protocol == "http":
                    # OTLP/HTTP: a google.rpc.Status (field 2: message), as a Collector
                    # answers; written by hand, the package does not ship that message.
                    status = b"\x12" + bytes([len(text)]) + text
                    return self.reply(code, status, "application/x-protobuf")
                if protocol == "push":
                    error = {"code": CONNECT_CODES.get(code, "unknown"), "message": text.decode()}
                    return self.reply(code, json.dumps(error).encode(), "application/json")
                return self.reply(code, text)
            if protocol == "http" and url.path == "/v1development/profiles":
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = pb.ExportProfilesServiceRequest()
                req.ParseFromString(body)
                self.reply(200, pb.ExportProfilesServiceResponse().SerializeToString(),
                           "application/x-protobuf")
                return log.write(protocol, 200, headers, otlp_rows(req), {"bytes": len(body)})
            if protocol == "pyroscope" and url.path == "/ingest":
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                pprof = multipart_file(self.headers.get("Content-Type", ""), body, "profile")
                self.reply(200)
                return log.write(protocol, 200, headers, pprof_rows(pprof),
                                 {"query": query, "bytes": len(pprof)})
            if protocol == "push":
                return self.push(body, headers)
            self.reply(404, b"no such endpoint")

        def push(self, body, headers):
            """A Connect unary call: protobuf in, an empty PushResponse out; anything else
            is a Connect error, as a Connect server answers it."""
            ctype = self.headers.get("Content-Type", "")
            if ctype != "application/proto":
                error = {"code": "unknown", "message": "content type %r" % ctype}
                return self.reply(415, json.dumps(error).encode(), "application/json")
            req = push_request_class()()
            req.ParseFromString(body)
            # A series per application, of one sample each: more would be two intervals in
            # one. The summary is the interval's: the series' rows together.
            rows, counters, series = [], None, []
            for s in req.series:
                (sample,) = s.samples
                summary = pprof_rows(sample.raw_profile)
                rows.extend(summary["rows"])
                counters = counters or summary["counters"]
                series.append({"labels": {l.name: l.value for l in s.labels}, "id": sample.ID,
                               "sha256": summary["sha256"], "rows": summary["rows"]})
            summary = normal(rows, counters)
            summary["sha256"] = series[0]["sha256"] if len(series) == 1 else None
            extra = {"series": series, "bytes": len(body),
                     "connect_version": self.headers.get("Connect-Protocol-Version")}
            self.reply(200, b"", "application/proto")
            log.write("push", 200, headers, summary, extra)

    def http_server(port, protocol):
        srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        srv.protocol = protocol
        if args.tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(args.tls_cert, args.tls_key)
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv

    http = http_server(args.http_port, "http")
    pyro = http_server(args.pyroscope_port, "pyroscope")
    print(json.dumps({"grpc": grpc_port, "http": http.server_address[1],
                      "pyroscope": pyro.server_address[1]}), flush=True)
    # Until the test closes our stdin (or dies), bounded in time whatever happens.
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait(args.max_seconds)
    server.stop(0)
    http.shutdown()
    pyro.shutdown()


def multipart_file(content_type, body, field):
    """The bytes of form field `field` in a multipart/form-data body."""
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    for part in body.split(b"--" + boundary):
        head, sep, data = part.partition(b"\r\n\r\n")
        if sep and b'name="%s"' % field.encode() in head:
            return data[:-2] if data.endswith(b"\r\n") else data
    raise ValueError("no %s field in the upload" % field)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--out", required=True)
    s.add_argument("--grpc-port", type=int, default=0)
    s.add_argument("--http-port", type=int, default=0)
    s.add_argument("--pyroscope-port", type=int, default=0)
    s.add_argument("--fail")
    s.add_argument("--max-seconds", type=float, default=300)
    s.add_argument("--tls-cert", help="serve TLS with this PEM certificate (and --tls-key)")
    s.add_argument("--tls-key")
    d = sub.add_parser("decode")
    d.add_argument("file")
    args = ap.parse_args()
    if args.cmd == "serve":
        serve(args)
    else:
        print(json.dumps(pprof_rows(open(args.file, "rb").read()), sort_keys=True))


if __name__ == "__main__":
    main()
