/*
 * libcpc(3CPC) Example 2, "Write a signal handler to catch overflow signals", as the man
 * page prints it, completed into a program and with its typos fixed. A counter (EVENT0,
 * default page-faults) is preset 1000 counts short of overflowing; each overflow freezes
 * the set and runs the handler, which samples, resets the preset and restarts.
 * Build: cc example2.c -lcpc
 *
 * Fixes: the handler's `(cpc_request_preset(...) != 0)` lacked its `if`, and used the
 * undefined ind1/val1 (now the request's index and PRESET); the global `index` collides
 * with index(3) and is `req`; add_request was tested with `!= 0`, which
 * fails for any index but 0 (now `== -1`); `event` was undefined (EVENT0); gregs[PC] and
 * gregs[SP] are REG_RIP and REG_RSP on x86-64 Linux (the stack pointer is UC_SP below, `sp` on
 * aarch64); _lwp_self() is gettid(); error() and
 * the computation are supplied. On Linux si_addr is 0 and the overflow PC comes from the
 * ucontext: cpc_overflow_pc() (libcpc.h, difference 2). The computation touches 500 fresh
 * pages per iteration: 10000 faults, so exactly 10 overflows, each with the value 0x0 (the
 * counter wrapped past 0 and froze there).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/mman.h>
#include <libcpc.h>
#include <errno.h>

#ifndef EVENT0
#define EVENT0 "page-faults"
#endif

static void
error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	(void) fprintf(stderr, "example2: ");
	(void) vfprintf(stderr, fmt, ap);
	(void) fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

cpc_t     *cpc;
cpc_set_t *set;
cpc_buf_t *buf;
int       req;  /* the page's `index` collides with index(3) in <strings.h> */
static volatile sig_atomic_t overflows;

#define PRESET (UINT64_MAX - 999ull)

/* The interrupted stack pointer: each architecture's mcontext names it differently. */
#if defined(__x86_64__)
#define UC_SP(uap) ((void *)(uap)->uc_mcontext.gregs[REG_RSP])
#elif defined(__aarch64__)
#define UC_SP(uap) ((void *)(uap)->uc_mcontext.sp)
#else
#error "UC_SP: add this architecture's stack pointer in mcontext_t"
#endif

void
emt_handler(int sig, siginfo_t *sip, void *arg)
{
	ucontext_t *uap = arg;
	uint64_t val;

	if (sig != SIGEMT || sip->si_code != EMT_CPCOVF) {
		psignal(sig, "example");
		psiginfo(sip, "example");
		return;
	}

	(void) printf("lwp%d - si_addr %p ucontext: %%pc %p %%sp %p\n",
	    (int)gettid(), (void *)sip->si_addr,
	    cpc_overflow_pc(uap),
	    UC_SP(uap));

	if (cpc_set_sample(cpc, set, buf) != 0)
		error("cannot sample: %s", strerror(errno));

	cpc_buf_get(cpc, buf, req, &val);

	(void) printf("0x%" PRIx64 "\n", val);
	(void) fflush(stdout);
	overflows++;

	/*
	 * Update a request's preset and restart the counters. Every counter restarts
	 * from its preset (the page's comment says the others resume from their current
	 * value; libcpc's kcpc_restart does not do that).
	 */
	if (cpc_request_preset(cpc, req, PRESET) != 0)
		error("cannot set preset for request %d: %s", req,
		    strerror(errno));
	if (cpc_set_restart(cpc, set) != 0)
		error("cannot restart lwp%d: %s", (int)gettid(), strerror(errno));
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
main(void)
{
	struct sigaction act;
	const char *event = getenv("EVENT0") ? getenv("EVENT0") : EVENT0;
	int iter;

	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL)
		error("perf counters unavailable: %s", strerror(errno));
	if ((set = cpc_set_create(cpc)) == NULL)
		error("could not create set: %s", strerror(errno));

	act.sa_sigaction = emt_handler;
	bzero(&act.sa_mask, sizeof (act.sa_mask));
	act.sa_flags = SA_RESTART|SA_SIGINFO;
	if (sigaction(SIGEMT, &act, NULL) == -1)
		error("sigaction: %s", strerror(errno));

	if ((req = cpc_set_add_request(cpc, set, event, PRESET,
	    CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL)) == -1)
		error("cannot add request to set: %s", strerror(errno));

	if ((buf = cpc_buf_create(cpc, set)) == NULL)
		error("cannot create buffer: %s", strerror(errno));

	if (cpc_bind_curlwp(cpc, set, 0) == -1)
		error("cannot bind lwp%d: %s", (int)gettid(), strerror(errno));

	for (iter = 1; iter <= 20; iter++) {
		/* ==> Computation to be measured goes here <== */
		compute(500);
	}

	cpc_unbind(cpc, set);      /* done */
	(void) printf("%d overflows\n", (int)overflows);
	cpc_close(cpc);
	return (0);
}
