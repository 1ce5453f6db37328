/*
 * Every perfmon(4) request and each errno case, through /dev/perfmon under
 * LD_PRELOAD=libperfmon.so. Counts are exact with PERFMON_SCOPE=process (the program's own
 * page faults); in the CPU-wide scopes (cpu, all) other tasks' faults add to them, so there
 * they are checked as lower bounds, and `cpu` also checks the pinning.
 * Prints one line per failed check and "perfmon_test: N checks, F failed" last.
 */
#define _GNU_SOURCE
#include <perfmon.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int checks, failed;
static int exact; /* PERFMON_SCOPE=process */

#define CHECK(cond)                                                                        \
	do {                                                                                   \
		checks++;                                                                          \
		if (!(cond)) {                                                                     \
			failed++;                                                                      \
			printf("FAIL line %d: %s (errno %d %s)\n", __LINE__, #cond, errno,             \
			       strerror(errno));                                                       \
		}                                                                                  \
	} while (0)

/* The call fails with -1 and the errno. */
#define FAILS(call, e)                                                                     \
	do {                                                                                   \
		errno = 0;                                                                         \
		int rc_ = (call);                                                                  \
		checks++;                                                                          \
		if (rc_ != -1 || errno != (e)) {                                                   \
			failed++;                                                                      \
			printf("FAIL line %d: %s gave %d errno %d (%s), want -1 errno %d\n", __LINE__, \
			       #call, rc_, errno, strerror(errno), (e));                               \
		}                                                                                  \
	} while (0)

/* A count of the known workload: exact in process scope, at least `want` CPU-wide. */
#define COUNT_IS(got, want)                                                                \
	do {                                                                                   \
		long long g_ = (got), w_ = (want);                                                 \
		checks++;                                                                          \
		if (exact ? g_ != w_ : g_ < w_) {                                                  \
			failed++;                                                                      \
			printf("FAIL line %d: %s = %lld, want %s%lld\n", __LINE__, #got, g_,           \
			       exact ? "" : ">= ", w_);                                                \
		}                                                                                  \
	} while (0)

static long page;

/* The known workload: `n` fresh pages, one write each, `n` page faults. */
static void touch(long n) {
	if (n == 0)
		return;
	volatile char *p = mmap(NULL, n * page, PROT_READ | PROT_WRITE,
	                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	madvise((void *)p, n * page, MADV_NOHUGEPAGE);
	for (long i = 0; i < n; i++)
		p[i * page] = 1;
	munmap((void *)p, n * page);
}

static long long value(int fd, int num) {
	struct pmc_data d = {.pmcd_num = num, .pmcd_value = -1};
	if (ioctl(fd, PMIOREAD, &d) < 0)
		return -1;
	return d.pmcd_value;
}

static struct pmc sw(int num, int event, int flags) {
	struct pmc p = {.pmc_num = num};
	p.pmc_event = event;
	p.pmc_flags = PMCF_SW | flags;
	return p;
}

static int cpus_allowed(void) {
	cpu_set_t s;
	CPU_ZERO(&s);
	sched_getaffinity(0, sizeof s, &s);
	return CPU_COUNT(&s);
}

int main(void) {
	const char *scope = getenv("PERFMON_SCOPE");
	exact = scope && strcmp(scope, "process") == 0;
	int cpu_scope = !scope || strcmp(scope, "cpu") == 0;
	page = sysconf(_SC_PAGESIZE);
	touch(1); /* the workload's own code, faulted in once */
	int allowed = cpus_allowed();

	/* Sizes and codes as perfmon.h defines them. */
	CHECK(sizeof(struct pmc) == 8 && sizeof(struct pmc_data) == 16 &&
	      sizeof(struct pmc_tstamp) == 16);
	CHECK(PMIOSETUP == 0x40083501 && PMIOGET == 0xc0083507 && PMIOREAD == 0xc0103504 &&
	      PMIOTSTAMP == 0x80103506);

	/* Only /dev/perfmon is the device; everything else passes through. */
	FAILS(open("/dev/perfmon-not", O_RDWR), ENOENT);
	char tmp[] = "/tmp/perfmon_test.XXXXXX";
	CHECK(mkdtemp(tmp) != NULL);
	char file[64];
	snprintf(file, sizeof file, "%s/f", tmp);
	int other = open(file, O_CREAT | O_RDWR | O_EXCL, 0640); /* the variadic mode */
	struct stat st;
	CHECK(other >= 0 && fstat(other, &st) == 0 && (st.st_mode & 0777) == 0640);
	int pipefd[2];
	CHECK(pipe(pipefd) == 0 && write(pipefd[1], "abc", 3) == 3);
	int avail = 0;
	CHECK(ioctl(pipefd[0], FIONREAD, &avail) == 0 && avail == 3);
	CHECK(close(pipefd[0]) == 0 && close(pipefd[1]) == 0 && close(other) == 0);
	unlink(file);
	rmdir(tmp);

	/* A bad PERFMON_SCOPE refuses the writer's open. */
	char *saved = scope ? strdup(scope) : NULL;
	setenv("PERFMON_SCOPE", "thread", 1);
	FAILS(open("/dev/perfmon", O_RDWR), EINVAL);
	if (saved)
		setenv("PERFMON_SCOPE", saved, 1);
	else
		unsetenv("PERFMON_SCOPE");

	/* One writer; readers as many as wanted. */
	int fd = open("/dev/perfmon", O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
	FAILS(open("/dev/perfmon", O_WRONLY), EBUSY);
	FAILS(openat(AT_FDCWD, "/dev/perfmon", O_RDWR), EBUSY);
	int rd = openat(AT_FDCWD, "/dev/perfmon", O_RDONLY);
	CHECK(rd >= 0 && rd != fd);
	CHECK((fcntl(rd, F_GETFD) & FD_CLOEXEC) == 0);
	int rd64 = open64("/dev/perfmon", O_RDONLY);
	CHECK(rd64 >= 0);
	CHECK(close(rd64) == 0);

	int zero = 0, one = 1, two = 2;
	struct pmc pmc = sw(0, PMC_SW_PAGE_FAULTS, PMCF_USR | PMCF_OS);
	struct pmc_data pd;
	struct pmc_tstamp ts;

	/* EPERM: the writing requests on a read-only descriptor (checked first, as the driver). */
	FAILS(ioctl(rd, PMIOSETUP, &pmc), EPERM);
	FAILS(ioctl(rd, PMIOSTART, &zero), EPERM);
	FAILS(ioctl(rd, PMIOSTOP, &zero), EPERM);
	FAILS(ioctl(rd, PMIORESET, &zero), EPERM);
	FAILS(ioctl(rd, PMIOSTART, &two), EPERM);

	/* EBUSY: a counter not set up, for every request but PMIOSETUP. */
	struct pmc got = {.pmc_num = 0};
	FAILS(ioctl(fd, PMIOGET, &got), EBUSY);
	FAILS(ioctl(fd, PMIOSTART, &zero), EBUSY);
	FAILS(ioctl(fd, PMIOSTOP, &zero), EBUSY);
	FAILS(ioctl(fd, PMIORESET, &one), EBUSY);
	pd.pmcd_num = 1;
	FAILS(ioctl(fd, PMIOREAD, &pd), EBUSY);
	FAILS(ioctl(rd, PMIOREAD, &pd), EBUSY);

	/* EINVAL: counter numbers outside 0..NPMC-1, for every request. */
	int bad[] = {-1, NPMC, 1000};
	for (int i = 0; i < 3; i++) {
		struct pmc b = sw(bad[i], PMC_SW_PAGE_FAULTS, PMCF_USR);
		FAILS(ioctl(fd, PMIOSETUP, &b), EINVAL);
		FAILS(ioctl(fd, PMIOGET, &b), EINVAL);
		FAILS(ioctl(fd, PMIOSTART, &bad[i]), EINVAL);
		FAILS(ioctl(fd, PMIOSTOP, &bad[i]), EINVAL);
		FAILS(ioctl(fd, PMIORESET, &bad[i]), EINVAL);
		pd.pmcd_num = bad[i];
		FAILS(ioctl(fd, PMIOREAD, &pd), EINVAL);
	}

	/* EINVAL: the software extension with qualifiers, or an event it does not have. */
	struct pmc q = sw(0, PMC_SW_PAGE_FAULTS, PMCF_USR);
	q.pmc_unit = 1;
	FAILS(ioctl(fd, PMIOSETUP, &q), EINVAL);
	q = sw(0, PMC_SW_PAGE_FAULTS, PMCF_USR);
	q.pmc_mask = 3;
	FAILS(ioctl(fd, PMIOSETUP, &q), EINVAL);
	q = sw(0, PMC_SW_PAGE_FAULTS, PMCF_USR | PMCF_INV);
	FAILS(ioctl(fd, PMIOSETUP, &q), EINVAL);
	q = sw(0, 10, PMCF_USR);
	FAILS(ioctl(fd, PMIOSETUP, &q), EINVAL);
	q = sw(0, 200, PMCF_USR);
	FAILS(ioctl(fd, PMIOSETUP, &q), EINVAL);

	/* Raw PMU events: ENXIO where the host has no hardware PMU (the driver's answer on a
	 * CPU without counters), set up where it has one. */
	struct pmc raw = {.pmc_num = 1};
	raw.pmc_event = PMC6_INST_RETIRED;
	raw.pmc_flags = PMCF_USR;
	if (access("/sys/bus/event_source/devices/cpu", F_OK) != 0) {
		FAILS(ioctl(fd, PMIOSETUP, &raw), ENXIO);
		FAILS(ioctl(fd, PMIOGET, &raw), EBUSY); /* a failed setup sets nothing up */
	} else {
		CHECK(ioctl(fd, PMIOSETUP, &raw) == 0);
	}

	/* ENOTTY: requests perfmon does not have; EFAULT: NULL arguments. */
	FAILS(ioctl(fd, _IOW('5', 99, int), &zero), ENOTTY);
	FAILS(ioctl(fd, FIONREAD, &avail), ENOTTY);
	FAILS(ioctl(fd, PMIOSETUP, NULL), EFAULT);
	FAILS(ioctl(fd, PMIOGET, NULL), EFAULT);
	FAILS(ioctl(fd, PMIOSTART, NULL), EFAULT);
	FAILS(ioctl(fd, PMIOSTOP, NULL), EFAULT);
	FAILS(ioctl(fd, PMIORESET, NULL), EFAULT);
	FAILS(ioctl(fd, PMIOREAD, NULL), EFAULT);
	FAILS(ioctl(fd, PMIOTSTAMP, NULL), EFAULT);

	/* PMIOSETUP clears the driver's flags; PMIOGET returns the setup, PMCF_EN while running. */
	pmc = sw(0, PMC_SW_PAGE_FAULTS, PMCF_USR | PMCF_OS | PMCF_E | PMCF_INT | PMCF_EN);
	CHECK(ioctl(fd, PMIOSETUP, &pmc) == 0);
	if (cpu_scope)
		CHECK(cpus_allowed() == 1); /* the caller is pinned to the counted CPU */
	got = (struct pmc){.pmc_num = 0};
	CHECK(ioctl(fd, PMIOGET, &got) == 0);
	CHECK(got.pmc_num == 0 && got.pmc_event == PMC_SW_PAGE_FAULTS && got.pmc_unit == 0 &&
	      got.pmc_mask == 0 && got.pmc_flags == (PMCF_SW | PMCF_USR | PMCF_OS | PMCF_E));
	CHECK(value(fd, 0) == 0);
	CHECK(ioctl(fd, PMIOSTART, &zero) == 0);
	CHECK(ioctl(fd, PMIOGET, &got) == 0 && (got.pmc_flags & PMCF_EN));
	CHECK(ioctl(rd, PMIOGET, &got) == 0 && (got.pmc_flags & PMCF_EN)); /* readers may */

	/* The count of a known workload: 500 pages, read running and stopped. */
	touch(500);
	COUNT_IS(value(fd, 0), 500);
	CHECK(ioctl(fd, PMIOSTOP, &zero) == 0);
	long long stopped = value(fd, 0);
	COUNT_IS(stopped, 500);
	touch(50); /* not counted: stopped */
	CHECK(value(fd, 0) == stopped);
	CHECK(value(rd, 0) == stopped); /* a reader reads the same counter */
	CHECK(ioctl(fd, PMIOSTOP, &zero) == 0 && value(fd, 0) == stopped); /* stop again: no-op */
	CHECK(ioctl(fd, PMIOGET, &got) == 0 && !(got.pmc_flags & PMCF_EN));
	/* Started again, it goes on from the stopped value. */
	CHECK(ioctl(fd, PMIOSTART, &zero) == 0);
	touch(25);
	CHECK(ioctl(fd, PMIOSTOP, &zero) == 0);
	COUNT_IS(value(fd, 0), stopped + 25);
	/* PMIORESET of a stopped counter. */
	CHECK(ioctl(fd, PMIORESET, &zero) == 0 && value(fd, 0) == 0);

	/* Counter 1 beside counter 0: user mode only. */
	struct pmc c1 = sw(1, PMC_SW_PAGE_FAULTS, PMCF_USR);
	CHECK(ioctl(fd, PMIOSETUP, &c1) == 0);
	CHECK(ioctl(fd, PMIOSTART, &one) == 0);
	touch(100);
	COUNT_IS(value(fd, 1), 100);
	CHECK(value(fd, 0) == 0); /* counter 0 stays stopped */
	/* PMIORESET of a running counter: it goes on from 0. */
	CHECK(ioctl(fd, PMIORESET, &one) == 0);
	touch(10);
	COUNT_IS(value(fd, 1), 10);
	/* PMIOSTART of a running counter: back to its value at the last reset or stop (0). */
	CHECK(ioctl(fd, PMIOSTART, &one) == 0);
	touch(7);
	COUNT_IS(value(fd, 1), 7);
	/* PMIOSETUP of a running counter: reconfigured, stopped, zeroed. */
	c1 = sw(1, PMC_SW_PAGE_FAULTS, PMCF_OS);
	CHECK(ioctl(fd, PMIOSETUP, &c1) == 0);
	got.pmc_num = 1;
	CHECK(ioctl(fd, PMIOGET, &got) == 0 && got.pmc_flags == (PMCF_SW | PMCF_OS));
	touch(5);
	CHECK(value(fd, 1) == 0);
	/* Kernel mode only: the workload's faults are taken in user mode, none count. */
	CHECK(ioctl(fd, PMIOSTART, &one) == 0);
	touch(100);
	CHECK(ioctl(fd, PMIOSTOP, &one) == 0);
	if (exact)
		CHECK(value(fd, 1) == 0);
	/* Neither USR nor OS counts nothing, as on the hardware. */
	c1 = sw(1, PMC_SW_PAGE_FAULTS, 0);
	CHECK(ioctl(fd, PMIOSETUP, &c1) == 0 && ioctl(fd, PMIOSTART, &one) == 0);
	touch(100);
	CHECK(value(fd, 1) == 0);

	/* Other software events. */
	struct pmc tc = sw(0, PMC_SW_TASK_CLOCK, PMCF_USR | PMCF_OS);
	CHECK(ioctl(fd, PMIOSETUP, &tc) == 0 && ioctl(fd, PMIOSTART, &zero) == 0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
	while (t1.tv_sec == 0 && t1.tv_nsec < 20000000); /* 20 ms of this thread's CPU time */
	CHECK(ioctl(fd, PMIOSTOP, &zero) == 0);
	CHECK(value(fd, 0) > 1000000); /* task-clock: ns, > 1 ms of the 20 */
	struct pmc cs = sw(0, PMC_SW_CONTEXT_SWITCHES, PMCF_USR | PMCF_OS);
	CHECK(ioctl(fd, PMIOSETUP, &cs) == 0 && ioctl(fd, PMIOSTART, &zero) == 0);
	struct timespec nap = {0, 1000000};
	for (int i = 0; i < 5; i++)
		nanosleep(&nap, NULL);
	CHECK(ioctl(fd, PMIOSTOP, &zero) == 0);
	CHECK(value(fd, 0) >= 5); /* each sleep switches out at least once */

	/* PMIOTSTAMP: CLOCK_MONOTONIC ns at 1000 MHz, on any descriptor. */
	struct pmc_tstamp ts2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(ioctl(rd, PMIOTSTAMP, &ts) == 0 && ts.pmct_rate == 1000);
	nanosleep(&(struct timespec){0, 10000000}, NULL);
	CHECK(ioctl(fd, PMIOTSTAMP, &ts2) == 0 && ts2.pmct_rate == 1000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long lo = t0.tv_sec * 1000000000LL + t0.tv_nsec, hi = t1.tv_sec * 1000000000LL + t1.tv_nsec;
	CHECK(ts.pmct_value >= lo && ts2.pmct_value <= hi);
	CHECK(ts2.pmct_value - ts.pmct_value >= 10000000);

	/* A request code passed through an int (sign-extended to unsigned long) still works. */
	int as_int = (int)PMIOREAD;
	pd.pmcd_num = 0;
	CHECK(ioctl(fd, as_int, &pd) == 0);

	/* The writer's close releases every counter (and the pinning); the device is free. */
	CHECK(close(fd) == 0);
	CHECK(cpus_allowed() == allowed);
	got.pmc_num = 0;
	FAILS(ioctl(rd, PMIOGET, &got), EBUSY);
	pd.pmcd_num = 1;
	FAILS(ioctl(rd, PMIOREAD, &pd), EBUSY);
	FAILS(ioctl(fd, PMIOGET, &got), EBADF); /* a closed descriptor is no longer the device */
	int fd2 = open("/dev/perfmon", O_WRONLY);
	CHECK(fd2 >= 0);
	/* A reader's close leaves the writer's counters. */
	pmc = sw(0, PMC_SW_PAGE_FAULTS, PMCF_USR | PMCF_OS);
	CHECK(ioctl(fd2, PMIOSETUP, &pmc) == 0 && ioctl(fd2, PMIOSTART, &zero) == 0);
	CHECK(close(rd) == 0);
	touch(30);
	CHECK(ioctl(fd2, PMIOSTOP, &zero) == 0);
	COUNT_IS(value(fd2, 0), 30);
	CHECK(close(fd2) == 0);

	printf("perfmon_test: %d checks, %d failed\n", checks, failed);
	return failed != 0;
}
