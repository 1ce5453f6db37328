/*
 * The perfmon(4) usage the seed describes, as a FreeBSD program would write it: set up
 * counter 0, start it, run code, stop it, read it, and read the time-stamp counter around
 * the run. Run it under LD_PRELOAD=libperfmon.so.
 *
 *   perfmon [-u] [-o] [-e] [-i] [-s] [-U unit] [-m mask] [-l loops] [-p pages] event
 *
 * -u/-o count user/kernel mode (default both), -e edge (PMCF_E), -i invert (PMCF_INV),
 * -s: event is a Linux software event (PMCF_SW; 2 = page faults). The code run: `loops`
 * times, map `pages` fresh pages, write one byte to each, unmap them; `loops * pages` page
 * faults. It runs once on one page before the counter starts, so the first execution of
 * mmap/madvise/munmap (a libc text page not yet mapped) is not in the count.
 */
#include <machine/perfmon.h>

#include <err.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static void run(int loops, long pages) {
	long size = pages * sysconf(_SC_PAGESIZE);
	for (int i = 0; i < loops; i++) {
		volatile char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		                        -1, 0);
		if (p == MAP_FAILED)
			err(1, "mmap");
		madvise((void *)p, size, MADV_NOHUGEPAGE);
		for (long off = 0; off < size; off += sysconf(_SC_PAGESIZE))
			p[off] = 1;
		munmap((void *)p, size);
	}
}

static void usage(void) {
	fprintf(stderr, "usage: perfmon [-uoeis] [-U unit] [-m mask] [-l loops] [-p pages] event\n");
	exit(2);
}

int main(int argc, char **argv) {
	struct pmc pmc = {0};
	struct pmc_data pmcd;
	struct pmc_tstamp before, after;
	int c, fd, num = 0, loops = 1;
	long pages = 1000;
	unsigned char flags = 0;

	while ((c = getopt(argc, argv, "uoeisU:m:l:p:")) != -1) {
		switch (c) {
		case 'u': flags |= PMCF_USR; break;
		case 'o': flags |= PMCF_OS; break;
		case 'e': flags |= PMCF_E; break;
		case 'i': flags |= PMCF_INV; break;
		case 's': flags |= PMCF_SW; break;
		case 'U': pmc.pmc_unit = strtoul(optarg, NULL, 0); break;
		case 'm': pmc.pmc_mask = strtoul(optarg, NULL, 0); break;
		case 'l': loops = atoi(optarg); break;
		case 'p': pages = atol(optarg); break;
		default: usage();
		}
	}
	if (optind != argc - 1)
		usage();
	if (!(flags & (PMCF_USR | PMCF_OS)))
		flags |= PMCF_USR | PMCF_OS;
	pmc.pmc_num = num;
	pmc.pmc_event = strtoul(argv[optind], NULL, 0);
	pmc.pmc_flags = flags;

	fd = open("/dev/perfmon", O_RDWR);
	if (fd < 0)
		err(1, "/dev/perfmon");
	if (ioctl(fd, PMIOSETUP, &pmc) < 0)
		err(1, "PMIOSETUP");
	if (ioctl(fd, PMIOGET, &pmc) < 0)
		err(1, "PMIOGET");
	printf("counter %d: event %#x unit %#x flags %#x mask %#x\n", pmc.pmc_num, pmc.pmc_event,
	       pmc.pmc_unit, pmc.pmc_flags, pmc.pmc_mask);
	run(1, 1);
	if (ioctl(fd, PMIOTSTAMP, &before) < 0)
		err(1, "PMIOTSTAMP");
	if (ioctl(fd, PMIOSTART, &num) < 0)
		err(1, "PMIOSTART");
	run(loops, pages);
	if (ioctl(fd, PMIOSTOP, &num) < 0)
		err(1, "PMIOSTOP");
	if (ioctl(fd, PMIOTSTAMP, &after) < 0)
		err(1, "PMIOTSTAMP");
	pmcd.pmcd_num = num;
	if (ioctl(fd, PMIOREAD, &pmcd) < 0)
		err(1, "PMIOREAD");
	printf("%d x %ld pages: %lld events\n", loops, pages, (long long)pmcd.pmcd_value);
	printf("tsc: %lld ticks at %d MHz = %.3f ms\n", (long long)(after.pmct_value - before.pmct_value),
	       after.pmct_rate, (after.pmct_value - before.pmct_value) / (after.pmct_rate * 1000.0));
	close(fd);
	return 0;
}
