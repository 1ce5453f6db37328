/*
 * dprof: the LD_PRELOAD overflow profiler of the "Process(or) Forensics" article, rebuilt
 * on libcpc for Linux. Preloaded into an unmodified program, it counts an event (DPROF_EVENT,
 * default page-faults) in every thread, takes SIGEMT every DPROF_PERIOD (default 100)
 * events, records the overflow PC, and at exit prints where the event overflowed, one line
 * per function, most first:
 *
 *   cc -shared -fPIC -o dprof.so dprof.c -lcpc
 *   LD_PRELOAD=./dprof.so ./program
 *
 * Differences from the article: the handler only stores the PC (dladdr is not
 * async-signal-safe; PCs are resolved at exit); the PC comes from cpc_overflow_pc()
 * (si_addr is 0 on Linux); the binding uses CPC_BIND_LWP_INHERIT so the program's threads
 * are counted too; add_request is checked with == -1, not != 0. dladdr names the object and
 * exported symbols; for functions it cannot name (static functions, executables without
 * -rdynamic) the object's ELF symbol table is read.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libcpc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PCS 65536

static cpc_t *cpc;
static cpc_set_t *set;
static void *pcs[MAX_PCS];
static volatile int npcs;        /* updated with __atomic builtins: any thread may overflow */
static volatile int restart_failures;

static void
dprof_emt_handler(int sig, siginfo_t *sip, void *arg)
{
	/* sig should be SIGEMT and sip->si_code should be EMT_CPCOVF */
	if (sig != SIGEMT || sip->si_code != EMT_CPCOVF)
		return;
	int i = __atomic_fetch_add(&npcs, 1, __ATOMIC_RELAXED);
	if (i < MAX_PCS)
		pcs[i] = cpc_overflow_pc(arg);
	/* Restart counter */
	if (cpc_set_restart(cpc, set) != 0)
		__atomic_fetch_add(&restart_failures, 1, __ATOMIC_RELAXED);
}

/* The function containing `off` (an offset in the object file's address space) from the
 * object's .symtab; NULL if none. The name points into a mapping kept for the process. */
static const char *
symtab_lookup(const char *path, uintptr_t off)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof (Elf64_Ehdr)) {
		close(fd);
		return NULL;
	}
	const unsigned char *m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return NULL;
	const Elf64_Ehdr *eh = (const void *)m;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
		return NULL;
	const Elf64_Shdr *sh = (const void *)(m + eh->e_shoff);
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB)
			continue;
		const Elf64_Sym *sym = (const void *)(m + sh[i].sh_offset);
		const char *names = (const char *)(m + sh[sh[i].sh_link].sh_offset);
		size_t n = sh[i].sh_size / sizeof (Elf64_Sym);
		for (size_t k = 0; k < n; k++) {
			if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_value <= off &&
			    off < sym[k].st_value + sym[k].st_size)
				return names + sym[k].st_name;
		}
	}
	return NULL;
}

struct fn_count {
	char name[256];
	char object[256];
	int count;
};

static int
by_count(const void *a, const void *b)
{
	const struct fn_count *x = a, *y = b;
	return y->count - x->count;
}

__attribute__((constructor)) static void
dprof_init(void)
{
	struct sigaction emt_action;
	const char *event_name = getenv("DPROF_EVENT") ? getenv("DPROF_EVENT") : "page-faults";
	uint64_t period = getenv("DPROF_PERIOD") ? strtoull(getenv("DPROF_PERIOD"), NULL, 0) : 100;
	uint64_t preset = UINT64_MAX - period + 1;

	/* SIGEMT */
	memset(&emt_action, 0, sizeof (emt_action));
	emt_action.sa_sigaction = dprof_emt_handler;
	emt_action.sa_flags = SA_RESTART | SA_SIGINFO;
	if (sigaction(SIGEMT, &emt_action, NULL) == -1) {
		fprintf(stderr, "dprof: sigaction: %s\n", strerror(errno));
		return;
	}
	if ((cpc = cpc_open(CPC_VER_CURRENT)) == NULL) {
		fprintf(stderr, "dprof: perf. counters unavailable: %s\n", strerror(errno));
		return;
	}
	if ((set = cpc_set_create(cpc)) == NULL) {
		fprintf(stderr, "dprof: could not create set: %s\n", strerror(errno));
		return;
	}
	if (cpc_set_add_request(cpc, set, event_name, preset,
	    CPC_COUNT_USER | CPC_OVF_NOTIFY_EMT, 0, NULL) == -1) {
		fprintf(stderr, "dprof: cannot add request to set: %s\n", strerror(errno));
		return;
	}
	if (cpc_bind_curlwp(cpc, set, CPC_BIND_LWP_INHERIT) == -1) {
		fprintf(stderr, "dprof: cannot bind lwp%d: %s\n", (int)gettid(), strerror(errno));
		return;
	}
	fprintf(stderr, "dprof: %s, a signal every %" PRIu64 " events\n", event_name, period);
}

__attribute__((destructor)) static void
dprof_fini(void)
{
	if (cpc == NULL)
		return;
	cpc_close(cpc);  /* unbinds: no more signals */
	cpc = NULL;
	int n = npcs < MAX_PCS ? npcs : MAX_PCS;
	struct fn_count *fns = calloc(n + 1, sizeof (*fns));
	int nfns = 0;
	for (int i = 0; i < n && fns; i++) {
		Dl_info dlip;
		char name[256];
		const char *object = "?";
		snprintf(name, sizeof (name), "%p", pcs[i]);
		if (dladdr(pcs[i], &dlip)) {
			object = dlip.dli_fname;
			const char *s = dlip.dli_sname;
			if (s == NULL)
				s = symtab_lookup(dlip.dli_fname,
				    (uintptr_t)pcs[i] - (uintptr_t)dlip.dli_fbase);
			if (s != NULL)
				snprintf(name, sizeof (name), "%s", s);
		}
		int k;
		for (k = 0; k < nfns; k++)
			if (strcmp(fns[k].name, name) == 0 && strcmp(fns[k].object, object) == 0)
				break;
		if (k == nfns) {
			snprintf(fns[k].name, sizeof (fns[k].name), "%s", name);
			snprintf(fns[k].object, sizeof (fns[k].object), "%s", object);
			nfns++;
		}
		fns[k].count++;
	}
	qsort(fns, nfns, sizeof (*fns), by_count);
	fprintf(stderr, "dprof: %d overflows, %d restart failures\n", npcs, restart_failures);
	for (int k = 0; k < nfns; k++)
		fprintf(stderr, "dprof: %6d %s (%s)\n", fns[k].count, fns[k].name, fns[k].object);
	free(fns);
}
