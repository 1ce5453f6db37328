/*
 * The descriptor table under threads: four threads open, ioctl and close other files and
 * reader descriptors of /dev/perfmon in a loop while the main thread counts its own page
 * faults (PERFMON_SCOPE=process; the threads exist before PMIOSETUP, so they are not
 * counted). Every call must give its own answer, the count must be exact, and no
 * descriptor may leak. Prints "threads: N ops, F failed" last.
 */
#define _GNU_SOURCE
#include <perfmon.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 3000

static atomic_int failed, ops, stop_flag;

static void *hammer(void *arg) {
	long id = (long)arg;
	int pipefd[2];
	if (pipe(pipefd) != 0 || write(pipefd[1], "xy", 2) != 2) {
		atomic_fetch_add(&failed, 1);
		return NULL;
	}
	for (int i = 0; i < ROUNDS || !atomic_load(&stop_flag); i++) {
		/* Not the device: open/ioctl/close pass through. */
		int fd = open("/dev/null", O_RDONLY);
		int n = -1;
		if (fd < 0 || ioctl(pipefd[0], FIONREAD, &n) != 0 || n != 2 || close(fd) != 0)
			atomic_fetch_add(&failed, 1);
		/* A reader of the device: counter 0 reads (set up or not yet), counter 5 is EINVAL. */
		int rd = openat(AT_FDCWD, "/dev/perfmon", O_RDONLY);
		struct pmc_data d = {.pmcd_num = 0};
		int rc = ioctl(rd, PMIOREAD, &d);
		if (rd < 0 || (rc != 0 && errno != EBUSY))
			atomic_fetch_add(&failed, 1);
		d.pmcd_num = 5 + (int)id;
		if (ioctl(rd, PMIOREAD, &d) != -1 || errno != EINVAL)
			atomic_fetch_add(&failed, 1);
		if (close(rd) != 0)
			atomic_fetch_add(&failed, 1);
		atomic_fetch_add(&ops, 7);
	}
	close(pipefd[0]);
	close(pipefd[1]);
	return NULL;
}

static int open_fds(void) {
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void touch(long pages) {
	long page = sysconf(_SC_PAGESIZE);
	volatile char *p = mmap(NULL, pages * page, PROT_READ | PROT_WRITE,
	                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	madvise((void *)p, pages * page, MADV_NOHUGEPAGE);
	for (long i = 0; i < pages; i++)
		p[i * page] = 1;
	munmap((void *)p, pages * page);
}

int main(void) {
	touch(1);
	int before = open_fds();
	pthread_t t[THREADS];
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, hammer, (void *)i);

	int fd = open("/dev/perfmon", O_RDWR);
	struct pmc pmc = {.pmc_num = 0};
	pmc.pmc_event = PMC_SW_PAGE_FAULTS;
	pmc.pmc_flags = PMCF_SW | PMCF_USR | PMCF_OS;
	int zero = 0;
	long long total = 0, want = 0;
	for (int round = 1; round <= 20; round++) {
		if (ioctl(fd, PMIOSETUP, &pmc) != 0 || ioctl(fd, PMIOSTART, &zero) != 0)
			atomic_fetch_add(&failed, 1);
		touch(50 * round);
		struct pmc_data d = {.pmcd_num = 0};
		if (ioctl(fd, PMIOSTOP, &zero) != 0 || ioctl(fd, PMIOREAD, &d) != 0)
			atomic_fetch_add(&failed, 1);
		if (d.pmcd_value != 50 * round) {
			printf("round %d: %lld faults, want %d\n", round, (long long)d.pmcd_value, 50 * round);
			atomic_fetch_add(&failed, 1);
		}
		total += d.pmcd_value;
		want += 50 * round;
	}
	atomic_store(&stop_flag, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	close(fd);
	int after = open_fds();
	if (after != before) {
		printf("descriptors: %d before, %d after\n", before, after);
		atomic_fetch_add(&failed, 1);
	}
	printf("page faults: %lld counted, %lld touched\n", total, want);
	printf("threads: %d ops, %d failed\n", atomic_load(&ops), atomic_load(&failed));
	return atomic_load(&failed) != 0;
}
