/*
 * Exercises every function libcpc.so exports, each errno case, the error handler and the
 * overflow signal path; prints one line per failed check and "capi_test: N checks, M
 * failed". Run as root (perf events, BPF). Build:
 *   cc -O1 -g -pthread capi_test.c -lcpc
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <libcpc.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int checks, failed;
#define CHECK(cond, ...)                                                                       \
	do {                                                                                   \
		checks++;                                                                      \
		if (!(cond)) {                                                                 \
			failed++;                                                              \
			printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
			printf(__VA_ARGS__);                                                   \
			printf("\n");                                                          \
		}                                                                              \
	} while (0)
/* A call that must fail with -1 (or NULL) and this errno. */
#define FAILS(call, err)                                                                       \
	do {                                                                                   \
		errno = 0;                                                                     \
		long r_ = (long)(call);                                                        \
		CHECK((r_ == -1 || r_ == 0) && errno == (err), "%s -> %ld, errno %d (%s), want %s", \
		      #call, r_, errno, strerror(errno), #err);                                \
	} while (0)

static void
touch(long pages)
{
	long sz = sysconf(_SC_PAGESIZE);
	volatile char *p = mmap(NULL, pages * sz, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (long i = 0; i < pages; i++)
		p[i * sz] = 1;
	munmap((void *)p, pages * sz);
}

/* Error handler: records the last call. */
static char last_fn[64], last_msg[512];
static int last_subcode, handler_calls;
static void
handler(const char *fn, int subcode, const char *fmt, va_list ap)
{
	snprintf(last_fn, sizeof (last_fn), "%s", fn);
	vsnprintf(last_msg, sizeof (last_msg), fmt, ap);
	last_subcode = subcode;
	handler_calls++;
	errno = ENOENT; /* the library must preserve the caller's errno */
}

static int nevents, saw_page_faults, npic_calls, ngeneric, generic_not_papi, nattrs_seen;
static char last_attr[64];
static void ev(void *arg, const char *e) { (void)arg; nevents++; saw_page_faults |= !strcmp(e, "page-faults"); }
static void ev_pic(void *arg, uint_t pic, const char *e) { (void)e; npic_calls++; *(uint_t *)arg = pic; }
static void gen(void *arg, const char *e) { (void)arg; ngeneric++; generic_not_papi += strncmp(e, "PAPI", 4) != 0; }
static void attr(void *arg, const char *a) { (void)arg; nattrs_seen++; snprintf(last_attr, sizeof (last_attr), "%s", a); }

static int walked[4], nwalked;
static uint64_t walked_preset[4];
static int walked_nattrs[4];
static char walked_attr[64];
static void
req(void *arg, int index, const char *event, uint64_t preset, uint_t flags, int nattrs,
    const cpc_attr_t *attrs)
{
	(void)arg; (void)event; (void)flags;
	if (nwalked < 4) {
		walked[nwalked] = index;
		walked_preset[nwalked] = preset;
		walked_nattrs[nwalked] = nattrs;
		if (nattrs > 0)
			snprintf(walked_attr, sizeof (walked_attr), "%s=%" PRIu64, attrs[0].ca_name, attrs[0].ca_val);
		nwalked++;
	}
}

static cpc_t *cpc;
static cpc_set_t *oset;
static volatile int signals, bad_signals, handler_errors;
static void *last_pc;
static void
emt(int sig, siginfo_t *si, void *uc)
{
	if (sig != SIGEMT || si->si_code != EMT_CPCOVF) {
		bad_signals++;
		return;
	}
	signals++;
	last_pc = cpc_overflow_pc(uc);
	/* After the first overflow, every 50 events. */
	if (cpc_request_preset(cpc, 0, UINT64_MAX - 49) != 0 || cpc_set_restart(cpc, oset) != 0)
		handler_errors++;
}

static cpc_set_t *tset;
static volatile int timer_signals;
static void
emt_timer(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (sig != SIGEMT || si->si_code != EMT_CPCOVF) {
		bad_signals++;
		return;
	}
	timer_signals++;
	if (cpc_request_preset(cpc, 0, UINT64_MAX - 49999) != 0 || cpc_set_restart(cpc, tset) != 0)
		handler_errors++;
}

struct other { cpc_set_t *set; cpc_buf_t *buf; int sample_errno, preset_errno, enable_errno; };
static void *
other_thread(void *p)
{
	struct other *o = p;
	errno = 0;
	o->sample_errno = cpc_set_sample(cpc, o->set, o->buf) == -1 ? errno : 0;
	o->preset_errno = cpc_request_preset(cpc, 0, 1) == -1 ? errno : 0;
	o->enable_errno = cpc_enable(cpc) == -1 ? errno : 0;
	return NULL;
}

int
main(void)
{
	uint64_t v, w;

	/* cpc_open */
	FAILS(cpc_open(1), EINVAL);
	FAILS(cpc_open(-1), EINVAL);
	cpc = cpc_open(CPC_VER_CURRENT);
	CHECK(cpc != NULL, "cpc_open: %s", strerror(errno));
	if (cpc == NULL)
		return 1;

	/* Queries. */
	uint_t npic = cpc_npic(cpc);
	CHECK(npic > 0, "npic %u", npic);
	CHECK((cpc_caps(cpc) & (CPC_CAP_OVERFLOW_INTERRUPT | CPC_CAP_OVERFLOW_PRECISE)) ==
	    (CPC_CAP_OVERFLOW_INTERRUPT | CPC_CAP_OVERFLOW_PRECISE), "caps %#x", cpc_caps(cpc));
	CHECK(cpc_cciname(cpc) && *cpc_cciname(cpc), "cciname");
	CHECK(cpc_cpuref(cpc) && strlen(cpc_cpuref(cpc)) > 10, "cpuref");
	int software = strstr(cpc_cciname(cpc), "software") != NULL;
	if (software)
		CHECK(npic == 8, "software-only hosts have 8 counters, not %u", npic);
	FAILS(cpc_set_create(NULL), EINVAL);
	CHECK(cpc_npic(NULL) == 0 && cpc_caps(NULL) == 0 && cpc_cciname(NULL) == NULL &&
	    cpc_cpuref(NULL) == NULL, "NULL handle queries");

	/* Walkers. */
	cpc_walk_events_all(cpc, NULL, ev);
	CHECK(nevents > 0 && saw_page_faults, "%d events, page-faults %d", nevents, saw_page_faults);
	uint_t pic = 99;
	cpc_walk_events_pic(cpc, npic - 1, &pic, ev_pic);
	CHECK(npic_calls == nevents && pic == npic - 1, "%d pic calls, pic %u", npic_calls, pic);
	npic_calls = 0;
	errno = 0;
	cpc_walk_events_pic(cpc, npic, &pic, ev_pic);
	CHECK(errno == EINVAL && npic_calls == 0, "walk_events_pic(npic): errno %d, %d calls", errno, npic_calls);
	cpc_walk_generic_events_all(cpc, NULL, gen);
	CHECK(generic_not_papi == 0, "%d generic names without PAPI", generic_not_papi);
	int all_generic = ngeneric;
	npic_calls = 0;
	cpc_walk_generic_events_pic(cpc, 0, &pic, ev_pic);
	CHECK(npic_calls == all_generic, "%d generic pic calls of %d", npic_calls, all_generic);
	npic_calls = 0;
	errno = 0;
	cpc_walk_generic_events_pic(cpc, npic, &pic, ev_pic);
	CHECK(errno == EINVAL && npic_calls == 0, "walk_generic_events_pic(npic): errno %d", errno);
	cpc_walk_attrs(cpc, NULL, attr);
	CHECK(nattrs_seen > 0 && !strcmp(last_attr, "picnum"), "attrs end with %s", last_attr);

	/* Error handler and add_request's errors, in libcpc's order. */
	CHECK(cpc_seterrhndlr(cpc, handler) == 0, "seterrhndlr");
	cpc_set_t *set = cpc_set_create(cpc);
	CHECK(set != NULL, "set_create");
	FAILS(cpc_set_add_request(cpc, set, "no-such-event", 0, CPC_COUNT_USER, 0, NULL), EINVAL);
	CHECK(last_subcode == CPC_INVALID_EVENT && !strcmp(last_fn, "cpc_set_add_request") &&
	    strstr(last_msg, "Unknown event"), "handler got %s/%d/%s", last_fn, last_subcode, last_msg);
	FAILS(cpc_set_add_request(cpc, set, NULL, 0, CPC_COUNT_USER, 0, NULL), EINVAL);
	cpc_attr_t bogus = { "bogus", 1 };
	FAILS(cpc_set_add_request(cpc, set, "page-faults", 0, CPC_COUNT_USER, 1, &bogus), EINVAL);
	CHECK(last_subcode == CPC_INVALID_ATTRIBUTE, "subcode %d", last_subcode);
	cpc_attr_t badpic = { "picnum", npic };
	FAILS(cpc_set_add_request(cpc, set, "page-faults", 0, CPC_COUNT_USER, 1, &badpic), EINVAL);
	CHECK(last_subcode == CPC_INVALID_PICNUM, "subcode %d", last_subcode);
	FAILS(cpc_set_add_request(cpc, set, "page-faults", 0, CPC_COUNT_USER, 1, NULL), EINVAL);
	FAILS(cpc_set_add_request(cpc, NULL, "page-faults", 0, CPC_COUNT_USER, 0, NULL), EINVAL);

	/* A buffer made before the requests is too small to sample into. */
	cpc_buf_t *small = cpc_buf_create(cpc, set);
	CHECK(small != NULL, "buf_create");
	cpc_attr_t pic1 = { "picnum", 1 };
	int i0 = cpc_set_add_request(cpc, set, "page-faults", 7, CPC_COUNT_USER, 0, NULL);
	int i1 = cpc_set_add_request(cpc, set, "task-clock", 0, CPC_COUNT_USER, 1, &pic1);
	CHECK(i0 == 0 && i1 == 1, "indexes %d %d", i0, i1);
	cpc_walk_requests(cpc, set, NULL, req);
	CHECK(nwalked == 2 && walked[0] == 1 && walked[1] == 0 && walked_preset[1] == 7 &&
	    walked_nattrs[0] == 1 && !strcmp(walked_attr, "picnum=1"),
	    "walk_requests: %d: %d %d preset %" PRIu64 " attr %s", nwalked, walked[0], walked[1],
	    walked_preset[1], walked_attr);

	/* Foreign handle. */
	cpc_t *cpc2 = cpc_open(CPC_VER_CURRENT);
	CHECK(cpc2 != NULL, "second handle");
	cpc_buf_t *before = cpc_buf_create(cpc, set), *after = cpc_buf_create(cpc, set),
	    *diff = cpc_buf_create(cpc, set);
	FAILS(cpc_set_add_request(cpc2, set, "page-faults", 0, CPC_COUNT_USER, 0, NULL), EINVAL);
	FAILS(cpc_set_destroy(cpc2, set), EINVAL);
	FAILS(cpc_buf_create(cpc2, set), EINVAL);
	FAILS(cpc_buf_destroy(cpc2, before), EINVAL);
	/* (cpc_bind_curlwp skips the ownership check, as libcpc's fast path does.) */
	FAILS(cpc_unbind(cpc2, set), EINVAL);
	FAILS(cpc_set_sample(cpc2, set, before), EINVAL);

	/* Binding errors. */
	FAILS(cpc_set_sample(cpc, set, before), EINVAL);           /* unbound */
	FAILS(cpc_set_restart(cpc, set), EINVAL);                  /* unbound */
	FAILS(cpc_unbind(cpc, set), EINVAL);                       /* unbound */
	FAILS(cpc_bind_curlwp(cpc, set, 0x2), EINVAL);             /* bad flags */
	cpc_set_t *empty = cpc_set_create(cpc);
	FAILS(cpc_bind_curlwp(cpc, empty, 0), EINVAL);             /* no requests */
	cpc_set_t *badflags = cpc_set_create(cpc);
	cpc_set_add_request(cpc, badflags, "page-faults", 0, 0x100, 0, NULL);
	FAILS(cpc_bind_curlwp(cpc, badflags, 0), EINVAL);
	CHECK(last_subcode == CPC_REQ_INVALID_FLAGS, "subcode %d", last_subcode);
	cpc_set_t *toomany = cpc_set_create(cpc);
	for (uint_t k = 0; k <= npic; k++)
		cpc_set_add_request(cpc, toomany, "page-faults", 0, CPC_COUNT_USER, 0, NULL);
	FAILS(cpc_bind_curlwp(cpc, toomany, 0), EINVAL);
	CHECK(last_subcode == CPC_RESOURCE_UNAVAIL, "subcode %d", last_subcode);
	if (software) {
		cpc_set_t *hw = cpc_set_create(cpc);
		cpc_set_add_request(cpc, hw, "cycles", 0, CPC_COUNT_USER, 0, NULL);
		FAILS(cpc_bind_curlwp(cpc, hw, 0), ENOTSUP);
	}
	cpc_set_t *hugeperiod = cpc_set_create(cpc);
	cpc_set_add_request(cpc, hugeperiod, "page-faults", 1, CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL);
	FAILS(cpc_bind_curlwp(cpc, hugeperiod, 0), EINVAL);

	/* Counting the calling thread: exact page faults (after a warm-up call, so that
	 * binding mmap and munmap lazily is not counted). */
	touch(1);
	CHECK(cpc_bind_curlwp(cpc, set, 0) == 0, "bind_curlwp: %s", strerror(errno));
	FAILS(cpc_bind_curlwp(cpc, set, 0), EINVAL);               /* already bound */
	FAILS(cpc_set_add_request(cpc, set, "page-faults", 0, CPC_COUNT_USER, 0, NULL), EINVAL);
	FAILS(cpc_set_sample(cpc, set, small), EINVAL);            /* wrong size */
	FAILS(cpc_set_sample(cpc, set, NULL), EINVAL);
	CHECK(cpc_set_sample(cpc, set, before) == 0, "sample");
	touch(100);
	CHECK(cpc_set_sample(cpc, set, after) == 0, "sample");
	cpc_buf_sub(cpc, diff, after, before);
	CHECK(cpc_buf_get(cpc, diff, 0, &v) == 0 && v == 100, "100 pages: %" PRIu64 " faults", v);
	CHECK(cpc_buf_get(cpc, before, 0, &v) == 0 && v >= 7, "preset 7 + faults: %" PRIu64, v);
	CHECK(cpc_buf_get(cpc, diff, 1, &v) == 0 && v > 0, "task-clock advanced: %" PRIu64, v);
	CHECK(cpc_buf_hrtime(cpc, after) > cpc_buf_hrtime(cpc, before) && cpc_buf_hrtime(cpc, before) > 0,
	    "hrtime");
	CHECK(cpc_buf_tick(cpc, after) >= cpc_buf_tick(cpc, before), "tick");
	CHECK(cpc_buf_hrtime(cpc, diff) == cpc_buf_hrtime(cpc, after), "sub keeps the later hrtime");
	CHECK(cpc_buf_tick(cpc, diff) == cpc_buf_tick(cpc, after) - cpc_buf_tick(cpc, before), "sub tick");
	CHECK(cpc_buf_hrtime(NULL, after) == 0 && cpc_buf_tick(cpc, NULL) == 0, "NULL buffers");

	/* Buffer arithmetic, including ds == a. */
	FAILS(cpc_buf_get(cpc, diff, 2, &v), EINVAL);
	FAILS(cpc_buf_get(cpc, diff, -1, &v), EINVAL);
	FAILS(cpc_buf_get(cpc, diff, 0, NULL), EINVAL);
	FAILS(cpc_buf_set(cpc, diff, 2, 1), EINVAL);
	FAILS(cpc_buf_set(cpc, diff, -1, 1), EINVAL);
	CHECK(cpc_buf_set(cpc, diff, 0, 40) == 0 && cpc_buf_set(cpc, diff, 1, 2) == 0, "buf_set");
	cpc_buf_add(cpc, diff, diff, diff);
	CHECK(cpc_buf_get(cpc, diff, 0, &v) == 0 && v == 80 && cpc_buf_get(cpc, diff, 1, &w) == 0 && w == 4,
	    "add in place: %" PRIu64 " %" PRIu64, v, w);
	cpc_buf_copy(cpc, before, diff);
	CHECK(cpc_buf_get(cpc, before, 0, &v) == 0 && v == 80, "copy: %" PRIu64, v);
	cpc_buf_sub(cpc, before, before, diff);
	CHECK(cpc_buf_get(cpc, before, 0, &v) == 0 && v == 0, "sub in place: %" PRIu64, v);
	cpc_buf_copy(cpc, small, diff); /* sizes differ: nothing */
	cpc_buf_zero(cpc, diff);
	CHECK(cpc_buf_get(cpc, diff, 0, &v) == 0 && v == 0 && cpc_buf_hrtime(cpc, diff) == 0, "zero");

	/* Another thread may not sample this thread's set, and has no set of its own. */
	struct other o = { set, after, 0, 0, 0 };
	pthread_t t;
	pthread_create(&t, NULL, other_thread, &o);
	pthread_join(t, NULL);
	CHECK(o.sample_errno == EINVAL && o.preset_errno == EINVAL && o.enable_errno == EINVAL,
	    "other thread: sample %d preset %d enable %d", o.sample_errno, o.preset_errno, o.enable_errno);

	/* Disable freezes, enable resumes; repeating either is EINVAL. */
	CHECK(cpc_disable(cpc) == 0, "disable");
	FAILS(cpc_disable(cpc), EINVAL);
	cpc_set_sample(cpc, set, before);
	touch(50);
	cpc_set_sample(cpc, set, after);
	cpc_buf_sub(cpc, diff, after, before);
	CHECK(cpc_buf_get(cpc, diff, 0, &v) == 0 && v == 0, "frozen: %" PRIu64 " faults", v);
	CHECK(cpc_enable(cpc) == 0, "enable");
	FAILS(cpc_enable(cpc), EINVAL);
	FAILS(cpc_enable(NULL), EINVAL);
	FAILS(cpc_disable(NULL), EINVAL);

	/* Presets: take effect at the restart; the set's own copy keeps the original. */
	FAILS(cpc_request_preset(cpc, -1, 0), EINVAL);
	FAILS(cpc_request_preset(cpc, 2, 0), EINVAL);
	FAILS(cpc_request_preset(NULL, 0, 0), EINVAL);
	CHECK(cpc_request_preset(cpc, 0, 1000) == 0, "request_preset");
	CHECK(cpc_set_restart(cpc, set) == 0, "restart");
	FAILS(cpc_set_restart(cpc, NULL), EINVAL);
	cpc_set_sample(cpc, set, before);
	touch(30);
	cpc_set_sample(cpc, set, after);
	CHECK(cpc_buf_get(cpc, before, 0, &v) == 0 && v == 1000, "restarted at the new preset: %" PRIu64, v);
	CHECK(cpc_buf_get(cpc, after, 0, &v) == 0 && v == 1030, "then 30 faults: %" PRIu64, v);
	nwalked = 0;
	cpc_walk_requests(cpc, set, NULL, req);
	CHECK(walked_preset[1] == 7, "the set keeps preset 7: %" PRIu64, walked_preset[1]);

	CHECK(cpc_unbind(cpc, set) == 0, "unbind");
	FAILS(cpc_unbind(cpc, set), EINVAL);
	FAILS(cpc_request_preset(cpc, 0, 0), EINVAL);              /* nothing bound */
	FAILS(cpc_disable(cpc), EINVAL);
	CHECK(cpc_set_sample(cpc, set, after) == -1, "sample after unbind");

	/* CPU binding: exclusive, and thread binds get EAGAIN while it exists. */
	FAILS(cpc_bind_cpu(cpc, -1, set, 0), EINVAL);
	FAILS(cpc_bind_cpu(cpc, 99999, set, 0), EINVAL);
	FAILS(cpc_bind_cpu(cpc, 0, set, CPC_FLAGS_NORELE), EINVAL);
	cpc_set_t *cpuset = cpc_set_create(cpc);
	cpc_set_add_request(cpc, cpuset, "page-faults", 0, CPC_COUNT_USER | CPC_COUNT_SYSTEM, 0, NULL);
	CHECK(cpc_bind_cpu(cpc, 0, cpuset, 0) == 0, "bind_cpu: %s", strerror(errno));
	FAILS(cpc_bind_cpu(cpc, 0, set, 0), EAGAIN);
	FAILS(cpc_bind_curlwp(cpc, set, 0), EAGAIN);
	cpc_buf_t *cb = cpc_buf_create(cpc, cpuset);
	CHECK(cpc_set_sample(cpc, cpuset, cb) == 0, "sample cpu set");
	CHECK(cpc_unbind(cpc, cpuset) == 0, "unbind cpu");

	/* pctx: this process's main thread. */
	FAILS(pctx_capture(0x3fffffff, NULL, 0, NULL), ESRCH);
	FAILS(pctx_capture(0, NULL, 0, NULL), ESRCH);
	pctx_t *pctx = pctx_capture(getpid(), NULL, 0, NULL);
	CHECK(pctx != NULL, "pctx_capture");
	FAILS(cpc_bind_pctx(cpc, pctx, 0x3fffffff, set, 0), ESRCH);
	FAILS(cpc_bind_pctx(cpc, pctx, getpid(), set, 1), EINVAL);
	FAILS(cpc_bind_pctx(cpc, NULL, getpid(), set, 0), EINVAL);
	CHECK(cpc_bind_pctx(cpc, pctx, getpid(), set, 0) == 0, "bind_pctx: %s", strerror(errno));
	cpc_set_sample(cpc, set, before);
	touch(20);
	cpc_set_sample(cpc, set, after);
	cpc_buf_sub(cpc, diff, after, before);
	CHECK(cpc_buf_get(cpc, diff, 0, &v) == 0 && v == 20, "pctx: 20 pages, %" PRIu64 " faults", v);
	CHECK(cpc_unbind(cpc, set) == 0, "unbind pctx");
	pctx_release(pctx);
	pctx_release(NULL);

	/* Overflow: SIGEMT with EMT_CPCOVF; the handler re-presets and restarts. 250 faults:
	 * the first overflow after 100, then every 50: at 100, 150, 200 and 250. */
	struct sigaction sa;
	memset(&sa, 0, sizeof (sa));
	sa.sa_sigaction = emt;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGEMT, &sa, NULL);
	oset = cpc_set_create(cpc);
	cpc_set_add_request(cpc, oset, "page-faults", UINT64_MAX - 99, CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL);
	CHECK(cpc_bind_curlwp(cpc, oset, 0) == 0, "bind notify: %s", strerror(errno));
	FAILS(cpc_request_preset(cpc, 0, 1), EINVAL);  /* a period of 2^64 - 1 */
	touch(250);
	CHECK(signals == 4 && bad_signals == 0 && handler_errors == 0, "signals %d bad %d errors %d",
	    signals, bad_signals, handler_errors);
	CHECK(last_pc != NULL, "overflow pc");
	CHECK(cpc_overflow_pc(NULL) == NULL, "overflow_pc(NULL)");
	CHECK(cpc_set_destroy(cpc, oset) == 0, "destroy a bound set");

	/*
	 * The handler runs wherever the thread is, also inside the library holding the lock
	 * that cpc_set_restart takes: a task-clock overflow every 50 us while this thread
	 * samples in a loop. The library blocks SIGEMT while it holds such a lock, so this
	 * ends (without that it deadlocks within a few hundred overflows).
	 */
	sa.sa_sigaction = emt_timer;
	sigaction(SIGEMT, &sa, NULL);
	tset = cpc_set_create(cpc);
	cpc_set_add_request(cpc, tset, "task-clock", UINT64_MAX - 49999, CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL);
	cpc_buf_t *tbuf = cpc_buf_create(cpc, tset);
	CHECK(cpc_bind_curlwp(cpc, tset, 0) == 0, "bind task-clock: %s", strerror(errno));
	long samples = 0;
	while (timer_signals < 500 && samples < 50000000)
		samples += cpc_set_sample(cpc, tset, tbuf) == 0;
	CHECK(timer_signals >= 500 && handler_errors == 0, "%d overflows in %ld samples, %d errors",
	    timer_signals, samples, handler_errors);
	CHECK(cpc_unbind(cpc, tset) == 0, "unbind task-clock");

	/* Default handler again; errno survived our handler (which set ENOENT). */
	int calls = handler_calls;
	FAILS(cpc_set_add_request(cpc, set, "still-no-such-event", 0, 0, 0, NULL), EINVAL);
	CHECK(handler_calls == calls + 1, "handler called");
	CHECK(cpc_seterrhndlr(cpc, NULL) == 0, "restore default handler");
	FAILS(cpc_seterrhndlr(NULL, NULL), EINVAL);
	fflush(stdout);
	FAILS(cpc_set_add_request(cpc, set, "default-handler-event", 0, 0, 0, NULL), EINVAL);
	CHECK(handler_calls == calls + 1, "own handler no longer called");

	/* Destroying. */
	CHECK(cpc_buf_destroy(cpc, small) == 0, "buf_destroy");
	FAILS(cpc_buf_destroy(cpc, small), EINVAL);
	CHECK(cpc_set_destroy(cpc, empty) == 0, "set_destroy");
	FAILS(cpc_set_destroy(cpc, empty), EINVAL);
	FAILS(cpc_set_destroy(NULL, set), EINVAL);
	CHECK(cpc_close(cpc2) == 0, "close");
	CHECK(cpc_close(cpc) == 0, "close with sets and buffers left");
	CHECK(cpc_close(NULL) == 0, "close(NULL)");

	printf("capi_test: %d checks, %d failed\n", checks, failed);
	return failed != 0;
}
