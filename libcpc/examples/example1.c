/*
 * libcpc(3CPC) Example 1, "Use hardware performance counters to measure events in a
 * process", as the man page prints it, with its typos fixed and the UltraSPARC events
 * (EC_ref, EC_hit) replaced through EVENT0/EVENT1. Build: cc example1.c -lcpc
 *
 * Fixes: error() is defined (the page assumes a user-provided one); <string.h> for
 * strerror; the second request's message said "first"; _lwp_self() is gettid() on Linux;
 * the values are unsigned (PRIu64, not PRId64). The computation to be measured, which the
 * page leaves out, touches 10 * iter fresh pages, so with page-faults as EVENT0 the first
 * column is exactly 10, 20, ..., 200 (a warm-up call before binding keeps the first
 * call's own faults out of iteration 1).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <libcpc.h>
#include <errno.h>

#ifndef EVENT0
#define EVENT0 "page-faults"
#endif
#ifndef EVENT1
#define EVENT1 "task-clock"
#endif

static void
error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	(void) fprintf(stderr, "example1: ");
	(void) vfprintf(stderr, fmt, ap);
	(void) fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

/* The computation: touch `pages` fresh pages once each. */
static void
compute(long pages)
{
	long sz = sysconf(_SC_PAGESIZE);
	volatile char *p = mmap(NULL, pages * sz, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		error("mmap: %s", strerror(errno));
	for (long i = 0; i < pages; i++)
		p[i * sz] = 1;
	(void) munmap((void *)p, pages * sz);
}

int
main(int argc, char *argv[])
{
	int iter;
	char *event0 = NULL, *event1 = NULL;
	cpc_t *cpc;
	cpc_set_t *set;
	cpc_buf_t *diff, *after, *before;
	int ind0, ind1;
	uint64_t val0, val1;

	(void) argc;
	(void) argv;

	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL)
		error("perf counters unavailable: %s", strerror(errno));

	if ((event0 = getenv("EVENT0")) == NULL)
		event0 = EVENT0;
	if ((event1 = getenv("EVENT1")) == NULL)
		event1 = EVENT1;

	if ((set = cpc_set_create(cpc)) == NULL)
		error("could not create set: %s", strerror(errno));

	if ((ind0 = cpc_set_add_request(cpc, set, event0, 0, CPC_COUNT_USER, 0,
	    NULL)) == -1)
		error("could not add first request: %s", strerror(errno));

	if ((ind1 = cpc_set_add_request(cpc, set, event1, 0, CPC_COUNT_USER, 0,
	    NULL)) == -1)
		error("could not add second request: %s", strerror(errno));

	if ((diff = cpc_buf_create(cpc, set)) == NULL)
		error("could not create buffer: %s", strerror(errno));
	if ((after = cpc_buf_create(cpc, set)) == NULL)
		error("could not create buffer: %s", strerror(errno));
	if ((before = cpc_buf_create(cpc, set)) == NULL)
		error("could not create buffer: %s", strerror(errno));

	/*
	 * Not in the page: one warm-up call before counting, so that the first
	 * iteration does not also count the first call's own faults (binding mmap and
	 * munmap lazily, first touches of their code).
	 */
	compute(1);

	if (cpc_bind_curlwp(cpc, set, 0) == -1)
		error("cannot bind lwp%d: %s", (int)gettid(), strerror(errno));

	/*
	 * Not in the page either: one sample before the loop, for the same reason
	 * (the sampling code's own first touches, after its read of the counters,
	 * would otherwise be counted in iteration 1).
	 */
	if (cpc_set_sample(cpc, set, before) == -1)
		error("cannot sample set: %s", strerror(errno));

	for (iter = 1; iter <= 20; iter++) {

		if (cpc_set_sample(cpc, set, before) == -1)
			break;

		/* ==> Computation to be measured goes here <== */
		compute(10L * iter);

		if (cpc_set_sample(cpc, set, after) == -1)
			break;

		cpc_buf_sub(cpc, diff, after, before);
		cpc_buf_get(cpc, diff, ind0, &val0);
		cpc_buf_get(cpc, diff, ind1, &val1);

		(void) printf("%3d: %" PRIu64 " %" PRIu64 "\n", iter,
		    val0, val1);
	}

	if (iter != 21)
		error("cannot sample set: %s", strerror(errno));

	cpc_close(cpc);

	return (0);
}
