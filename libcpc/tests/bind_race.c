/*
 * The first overflow of a set arrives while cpc_bind_curlwp is still returning: task-clock
 * with a 20 us first period, re-preset to 500 us by the handler, which restarts the set.
 * Each of BINDS binds must see its handler restart the set at the first overflow (no error)
 * and overflow again afterwards. Also measures the handler's own cost (request_preset +
 * set_restart), the shortest period a thread can run with and still leave its handler.
 * Prints "bind_race: N binds, M failed, handler NNN ns". Run as root. Build:
 *   cc -O1 -g bind_race.c -lcpc
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <libcpc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BINDS 200
#define FIRST_NS 20000ULL
#define NEXT_NS 500000ULL

static cpc_t *cpc;
static cpc_set_t *set;
static volatile sig_atomic_t overflows, errors, first_errno;
static volatile uint64_t handler_ns, handler_runs;

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void
emt(int sig, siginfo_t *si, void *uc)
{
	(void)sig; (void)si; (void)uc;
	int saved = errno;
	uint64_t t0 = now_ns();
	if (cpc_request_preset(cpc, 0, UINT64_MAX - (NEXT_NS - 1)) != 0 ||
	    cpc_set_restart(cpc, set) != 0) {
		if (!errors)
			first_errno = errno;
		errors++;
	}
	handler_ns += now_ns() - t0;
	handler_runs++;
	overflows++;
	errno = saved;
}

int
main(void)
{
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL) {
		perror("cpc_open");
		return 2;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof (sa));
	sa.sa_sigaction = emt;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGEMT, &sa, NULL);
	int failed = 0;
	for (int i = 0; i < BINDS; i++) {
		set = cpc_set_create(cpc);
		if (set == NULL || cpc_set_add_request(cpc, set, "task-clock",
		    UINT64_MAX - (FIRST_NS - 1), CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL) != 0) {
			perror("set");
			return 2;
		}
		overflows = 0;
		errors = 0;
		if (cpc_bind_curlwp(cpc, set, 0) != 0) {
			printf("FAIL bind %d: %s\n", i, strerror(errno));
			failed++;
			cpc_set_destroy(cpc, set);
			continue;
		}
		/* Two overflows: the first (inside or right after the bind) and one 500 us of
		 * CPU later, which only comes if the handler's restart worked. Bounded by wall
		 * time so a lost restart fails instead of spinning forever. */
		uint64_t deadline = now_ns() + 2000000000ULL;
		while (overflows < 2 && now_ns() < deadline)
			;
		int got = overflows, errs = errors;
		cpc_unbind(cpc, set);
		cpc_set_destroy(cpc, set);
		if (got < 2 || errs != 0) {
			printf("FAIL bind %d: %d overflows, %d handler errors (first errno %d: %s)\n",
			    i, got, errs, (int)first_errno, strerror(first_errno));
			failed++;
		}
	}
	uint64_t per = handler_runs ? handler_ns / handler_runs : 0;
	printf("bind_race: %d binds, %d failed, handler %" PRIu64 " ns\n", BINDS, failed, per);
	cpc_close(cpc);
	return failed != 0;
}
