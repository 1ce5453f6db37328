/*
 * perfmon.h: the FreeBSD perfmon(4) interface (FreeBSD 2.2, i386) on Linux.
 *
 * Programs written for /dev/perfmon build unchanged against this header (also installed as
 * <machine/perfmon.h>) and run under LD_PRELOAD=libperfmon.so, which intercepts open(2) of
 * "/dev/perfmon", ioctl(2) on the descriptor it returns, and close(2), and serves each
 * request from Linux perf events. Written for this project from the perfmon(4) manual page;
 * the request numbers use Linux's _IOW/_IOR/_IOWR encoding, so they differ from FreeBSD's.
 *
 * Differences from FreeBSD (details in the project's docs/perfmon.md):
 *  - Counters are CPU-wide as on FreeBSD. PERFMON_SCOPE in the environment chooses where:
 *      cpu      (default) the CPU the thread calling the first PMIOSETUP runs on; that thread
 *               is pinned to it (sched_setaffinity) until the writer closes the device.
 *      all      every online CPU, summed.
 *      process  extension: the thread calling PMIOSETUP and the threads and children it
 *               creates afterwards, on any CPU (what a program measuring its own work wants).
 *  - pmc_event/pmc_unit/pmc_mask and PMCF_E/PMCF_INV go to the CPU's PMU as a raw event;
 *    PMCF_USR/PMCF_OS choose user/kernel counting. Without a hardware PMU, PMIOSETUP of such
 *    an event fails with ENXIO (what the driver's open gives on a CPU without counters).
 *  - Extension PMCF_SW: pmc_event is a Linux software event (PMC_SW_* below); unit and
 *    counter mask must be 0 and PMCF_INV clear (EINVAL otherwise).
 *  - PMIOTSTAMP's "time-stamp counter" is CLOCK_MONOTONIC in nanoseconds: pmct_rate is 1000.
 *  - Values are 64-bit (FreeBSD's counters are 40-bit).
 *  - The device is per process: the "one writer" rule and the counters are the process's.
 *
 * Errors, as the FreeBSD driver gives them: EINVAL a counter number outside 0..NPMC-1;
 * EBUSY a counter not set up (PMIOGET, PMIOSTART, PMIOSTOP, PMIORESET, PMIOREAD) or a second
 * open for writing; EPERM PMIOSETUP/START/STOP/RESET on a descriptor opened read-only; ENOTTY
 * an unknown request; EFAULT a NULL argument. Beyond the driver: ENXIO a raw event without a
 * hardware PMU; EACCES where perf refuses the counting (CPU-wide scopes need root or
 * CAP_PERFMON); EINVAL from open(2) for a PERFMON_SCOPE it does not know.
 * LIBPERFMON_DEBUG=1 in the environment explains each refusal on stderr.
 */
#ifndef _MACHINE_PERFMON_H_
#define _MACHINE_PERFMON_H_

#include <stdint.h>
#include <sys/ioctl.h>

/* The device, as FreeBSD's header names it. */
#define _PATH_PERFMON "/dev/perfmon"

/* FreeBSD's <sys/cdefs.h> gives its programs this one; glibc's does not. */
#ifndef __dead2
#define __dead2 __attribute__((__noreturn__))
#endif

/* Counters per CPU. */
#define NPMC 2

struct pmc {
	int pmc_num; /* counter, 0 .. NPMC - 1 */
	union {
		struct {
			unsigned char pmcus_event; /* event number */
			unsigned char pmcus_unit;  /* unit mask */
			unsigned char pmcus_flags; /* PMCF_* */
			unsigned char pmcus_mask;  /* counter mask (threshold) */
		} pmcu_s;
		unsigned int pmcu_val; /* the four above as the event-select register's low 32 bits */
	} pmc_pmcu;
};

#define pmc_event pmc_pmcu.pmcu_s.pmcus_event
#define pmc_unit pmc_pmcu.pmcu_s.pmcus_unit
#define pmc_flags pmc_pmcu.pmcu_s.pmcus_flags
#define pmc_mask pmc_pmcu.pmcu_s.pmcus_mask
#define pmc_val pmc_pmcu.pmcu_val

/* pmc_flags */
#define PMCF_USR 0x01 /* count events in user mode */
#define PMCF_OS 0x02  /* count events in kernel mode */
#define PMCF_E 0x04   /* count events rather than their duration (edge detect) */
#define PMCF_SW 0x20  /* extension: pmc_event is a Linux software event (PMC_SW_*) */
#define PMCF_INV 0x80 /* invert the sense of the counter mask comparison */
/* Set by the driver, never by the caller (PMIOSETUP clears them; PMIOGET shows PMCF_EN
 * while the counter runs). */
#define PMCF_INT 0x10
#define PMCF_EN 0x40
#define PMCF_SYS_FLAGS (PMCF_INT | PMCF_EN)

struct pmc_data {
	int pmcd_num;       /* counter to read */
	int64_t pmcd_value; /* its value */
};

struct pmc_tstamp {
	int pmct_rate;      /* approximate rate of the counter, MHz (here 1000) */
	int64_t pmct_value; /* the time-stamp counter (here CLOCK_MONOTONIC, ns) */
};

#define PMIOSETUP _IOW('5', 1, struct pmc)
#define PMIOSTART _IOW('5', 2, int)
#define PMIOSTOP _IOW('5', 3, int)
#define PMIOREAD _IOWR('5', 4, struct pmc_data)
#define PMIORESET _IOW('5', 5, int)
#define PMIOTSTAMP _IOR('5', 6, struct pmc_tstamp)
#define PMIOGET _IOWR('5', 7, struct pmc)

/* Linux software events for PMCF_SW (perf's PERF_COUNT_SW_* numbers). */
#define PMC_SW_CPU_CLOCK 0
#define PMC_SW_TASK_CLOCK 1
#define PMC_SW_PAGE_FAULTS 2
#define PMC_SW_CONTEXT_SWITCHES 3
#define PMC_SW_CPU_MIGRATIONS 4
#define PMC_SW_PAGE_FAULTS_MIN 5
#define PMC_SW_PAGE_FAULTS_MAJ 6
#define PMC_SW_ALIGNMENT_FAULTS 7
#define PMC_SW_EMULATION_FAULTS 8
#define PMC_SW_DUMMY 9
#define PMC_SW_CGROUP_SWITCHES 11

/*
 * Some Pentium Pro (P6) event numbers, from Intel's manual (pmc_event, unit mask 0 unless
 * noted). The NOTA BENE of perfmon(4) holds: the numbers differ between CPU models.
 */
#define PMC6_DATA_MEM_REFS 0x43
#define PMC6_DCU_LINES_IN 0x45
#define PMC6_DCU_M_LINES_IN 0x46
#define PMC6_DCU_M_LINES_OUT 0x47
#define PMC6_DCU_MISS_OUTSTANDING 0x48
#define PMC6_IFU_IFETCH 0x80
#define PMC6_IFU_IFETCH_MISS 0x81
#define PMC6_ITLB_MISS 0x85
#define PMC6_IFU_MEM_STALL 0x86
#define PMC6_L2_IFETCH 0x28 /* unit mask: MESI bits */
#define PMC6_L2_LD 0x29     /* unit mask: MESI bits */
#define PMC6_L2_ST 0x2a     /* unit mask: MESI bits */
#define PMC6_L2_LINES_IN 0x24
#define PMC6_L2_LINES_OUT 0x26
#define PMC6_L2_RQSTS 0x2e /* unit mask: MESI bits */
#define PMC6_CPU_CLK_UNHALTED 0x79
#define PMC6_INST_RETIRED 0xc0
#define PMC6_FLOPS 0xc1
#define PMC6_UOPS_RETIRED 0xc2
#define PMC6_BR_INST_RETIRED 0xc4
#define PMC6_BR_MISS_PRED_RETIRED 0xc5
#define PMC6_HW_INT_RX 0xc8
#define PMC6_BR_TAKEN_RETIRED 0xc9
#define PMC6_INST_DECODED 0xd0
#define PMC6_RESOURCE_STALLS 0xa2

#endif /* _MACHINE_PERFMON_H_ */
