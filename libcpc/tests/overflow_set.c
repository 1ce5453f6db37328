/*
 * A set of one notifying request and plain ones (the seed article's profiler): page-faults
 * preset 1000 short of overflow with CPC_OVF_NOTIFY_EMT, and minor-faults counted beside it.
 * The overflow freezes the whole set, so the handler's cpc_set_sample reads the other
 * request's value at the overflow: each handler prints "minor=N" for the faults since the
 * last restart (999: the 1000th fault's minor count comes after the freeze). 20 x 500 fresh
 * pages: 10 overflows.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <libcpc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PRESET (UINT64_MAX - 999ull)

static cpc_t *cpc;
static cpc_set_t *set;
static cpc_buf_t *buf;
static int faults, minor;
static volatile sig_atomic_t overflows;

static void die(const char *what) {
    fprintf(stderr, "overflow_set: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void handler(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    uint64_t pf, mf;
    if (sig != SIGEMT || si->si_code != EMT_CPCOVF) return;
    if (cpc_set_sample(cpc, set, buf) != 0) die("cpc_set_sample");
    cpc_buf_get(cpc, buf, faults, &pf);
    cpc_buf_get(cpc, buf, minor, &mf);
    printf("page-faults=0x%" PRIx64 " minor=%" PRIu64 "\n", pf, mf);
    fflush(stdout);
    overflows++;
    if (cpc_request_preset(cpc, faults, PRESET) != 0) die("cpc_request_preset");
    if (cpc_set_restart(cpc, set) != 0) die("cpc_set_restart");
}

int main(void) {
    long sz = sysconf(_SC_PAGESIZE);
    struct sigaction act;
    memset(&act, 0, sizeof(act));
    act.sa_sigaction = handler;
    act.sa_flags = SA_RESTART | SA_SIGINFO;
    if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL) die("cpc_open");
    if ((set = cpc_set_create(cpc)) == NULL) die("cpc_set_create");
    if (sigaction(SIGEMT, &act, NULL) == -1) die("sigaction");
    faults = cpc_set_add_request(cpc, set, "page-faults", PRESET,
                                 CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL);
    minor = cpc_set_add_request(cpc, set, "minor-faults", 0, CPC_COUNT_USER, 0, NULL);
    if (faults == -1 || minor == -1) die("cpc_set_add_request");
    if ((buf = cpc_buf_create(cpc, set)) == NULL) die("cpc_buf_create");
    if (cpc_bind_curlwp(cpc, set, 0) == -1) die("cpc_bind_curlwp");
    for (int i = 0; i < 20; i++) {
        volatile char *p = mmap(NULL, 500 * sz, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) die("mmap");
        for (long j = 0; j < 500; j++) p[j * sz] = 1;
        munmap((void *)p, 500 * sz);
    }
    cpc_unbind(cpc, set);
    printf("%d overflows\n", (int)overflows);
    cpc_close(cpc);
    return 0;
}
