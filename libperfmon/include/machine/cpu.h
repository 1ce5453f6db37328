/*
 * <machine/cpu.h> for FreeBSD perfmon(4) programs on Linux. FreeBSD's programs include it
 * beside <machine/perfmon.h> (share/examples/perfmon/perfmon.c does), for nothing the
 * counters need; what they do take through it is <sys/cdefs.h>'s __dead2, given here.
 */
#ifndef _LIBPERFMON_MACHINE_CPU_H_
#define _LIBPERFMON_MACHINE_CPU_H_

#include <sys/cdefs.h>

#ifndef __dead2
#define __dead2 __attribute__((__noreturn__))
#endif

#endif /* _LIBPERFMON_MACHINE_CPU_H_ */
