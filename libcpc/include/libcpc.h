/*
 * libcpc.h - libcpc(3LIB), the Solaris CPU performance counter library, for Linux.
 *
 * Link with -lcpc (pkg-config: libcpc). Implemented over perf_event_open(2) and an eBPF
 * overflow program by the Rust crate profiler::cpc; see the project's docs/libcpc.md,
 * section "libcpc for C programs".
 *
 * Every function, type and constant of libcpc(3LIB) is here with libcpc's value and return
 * convention: functions returning int give 0 (or an index) on success and -1 with errno on
 * failure, functions returning pointers give NULL with errno. Errors that libcpc reports
 * with a subcode (CPC_INVALID_EVENT, ...) also go to the error handler; the default handler
 * prints "libcpc: <function>: <text>" to stderr. errno survives the handler call.
 *
 * Differences from Solaris (each one deliberate; the Linux reason follows it):
 *
 *  1. SIGEMT. x86 and arm64 Linux have no SIGEMT, so where <signal.h> lacks it SIGEMT is
 *     the real-time signal SIGRTMIN + 4 (not a constant expression: glibc computes
 *     SIGRTMIN at run time, so it cannot label a switch case). The overflow signal is sent by
 *     the eBPF program with bpf_send_signal_thread(), whose si_code is SI_KERNEL; EMT_CPCOVF
 *     is therefore SI_KERNEL (0x80). Install the handler with SA_SIGINFO, as on Solaris.
 *  2. si_addr is 0: the kernel fills no address for this signal. The overflow PC (Solaris's
 *     si_addr: the user PC when the overflow was handled, after any skid) is the interrupted
 *     PC in the handler's ucontext: cpc_overflow_pc(ucontext) returns it. For page-faults it
 *     is the faulting instruction exactly.
 *  3. Freeze. As on Solaris, an overflow of a CPC_OVF_NOTIFY_EMT request stops the whole set
 *     until cpc_set_restart(). With CPC_BIND_LWP_INHERIT the kernel cannot freeze inherited
 *     counters: they keep counting, reload their period and signal every period.
 *  4. Inheritance (CPC_BIND_LWP_INHERIT): threads created later count into their creator's
 *     context (Linux perf sums inherited counts into the parent); Solaris gives each new LWP
 *     an independent copy and an immediate SIGEMT with the counters at UINT64_MAX. Overflow
 *     signals go to the thread whose counter overflowed. cpc_set_restart() on such a binding
 *     restarts every thread's counters, so one thread's restart also restarts the others'
 *     countdown to the next overflow (4 threads x 3000 page faults, a period of 100: 116
 *     overflows rather than 120).
 *  5. cpc_set_restart() uses its set argument (Solaris ignores it and restarts the calling
 *     LWP's set), so a thread that inherited a binding can restart it from its handler.
 *     cpc_request_preset() acts on the calling thread's set, as on Solaris.
 *  6. Async-signal safety. cpc_set_restart() and cpc_request_preset() may be called from the
 *     overflow handler: the library blocks the overflow signal while it holds any lock those
 *     two take, so the handler never waits for a lock its own thread holds, and on success
 *     they do not allocate (ioctls and a BPF map update). cpc_set_sample() and
 *     cpc_buf_get() work in the handler too (Example 2), but cpc_set_sample() allocates, so
 *     call it there only when the interrupted code cannot be inside malloc.
 *  7. cpc_bind_pctx(): Linux perf needs no stopped process or agent LWP. pctx_capture() and
 *     pctx_release() are provided here (libpctx's signatures) and only name the process; id
 *     is a Linux thread id (the main thread's is the pid).
 *  8. cpc_bind_cpu(): flags must be 0 (illumos); the Solaris 11 CPC_FLAGS_NORELE and
 *     CPC_FLAGS_NOPBIND are defined but refused with EINVAL. No processor_bind() is needed
 *     (perf counts a CPU from any thread). Exclusivity (one set per CPU, EAGAIN for thread
 *     binds while a CPU binding exists) holds within this library, not system-wide.
 *  9. cpc_buf_get() and cpc_buf_set() check the index (EINVAL); illumos does not.
 * 10. Events are perf's names (page-faults, task-clock, cpu-clock, cycles, instructions,
 *     cache and raw events, sysfs PMU events, tracepoints) and libcpc's PAPI_* generic
 *     names; cpc_walk_events_all() lists those this host can count. A host without a
 *     hardware PMU has only software events: cpc_npic() is then 8 and cpc_cciname() says so.
 *     The tick (cpc_buf_tick) is cycles with a PMU, else task time converted at the nominal
 *     clock rate. cpc_buf_hrtime() is CLOCK_MONOTONIC nanoseconds.
 * 11. The error handler receives fmt "%s" and the message as its only argument.
 * 12. The obsolete CPCv1 interfaces and the Solaris 11 SMPL interfaces are not provided.
 */
#ifndef LIBCPC_H
#define LIBCPC_H

#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct __cpc cpc_t;
typedef struct __cpc_set cpc_set_t;
typedef struct __cpc_buf cpc_buf_t;
typedef struct __pctx pctx_t;

typedef unsigned int uint_t;
typedef long long hrtime_t;
typedef int processorid_t;

typedef struct {
	char *ca_name;
	uint64_t ca_val;
} cpc_attr_t;

#define CPC_VER_CURRENT 2

/* Request flags (cpc_set_add_request). */
#define CPC_OVF_NOTIFY_EMT 0x1
#define CPC_COUNT_USER 0x2
#define CPC_COUNT_SYSTEM 0x4
#define CPC_COUNT_HV 0x8

/* Bind flags. */
#define CPC_BIND_LWP_INHERIT 0x1
#define CPC_FLAGS_DEFAULT 0x0
#define CPC_FLAGS_NORELE 0x01  /* refused: see 8. */
#define CPC_FLAGS_NOPBIND 0x02 /* refused: see 8. */

/* cpc_caps() bits. */
#define CPC_CAP_OVERFLOW_INTERRUPT 0x1
#define CPC_CAP_OVERFLOW_PRECISE 0x2

/* Error handler subcodes. */
#define CPC_INVALID_EVENT 1
#define CPC_INVALID_PICNUM 2
#define CPC_INVALID_ATTRIBUTE 3
#define CPC_ATTRIBUTE_OUT_OF_RANGE 4
#define CPC_RESOURCE_UNAVAIL 5
#define CPC_PIC_NOT_CAPABLE 6
#define CPC_REQ_INVALID_FLAGS 7
#define CPC_CONFLICTING_REQS 8
#define CPC_ATTR_REQUIRES_PRIVILEGE 9
#define CPC_PBIND_FAILED 10
#define CPC_HV_NO_ACCESS 11

#define CPC_MAX_EVENT_LEN 512
#define CPC_MAX_ATTR_LEN 32

/* The overflow signal and its si_code: see 1. and 2. above. */
#ifndef SIGEMT
#define SIGEMT (SIGRTMIN + 4)
#endif
#ifndef EMT_CPCOVF
#define EMT_CPCOVF 0x80 /* SI_KERNEL */
#endif

typedef void(cpc_errhndlr_t)(const char *fn, int subcode, const char *fmt, va_list ap);

extern cpc_t *cpc_open(int ver);
extern int cpc_close(cpc_t *cpc);
extern uint_t cpc_npic(cpc_t *cpc);
extern uint_t cpc_caps(cpc_t *cpc);
extern const char *cpc_cciname(cpc_t *cpc);
extern const char *cpc_cpuref(cpc_t *cpc);
extern int cpc_seterrhndlr(cpc_t *cpc, cpc_errhndlr_t *fn);

extern void cpc_walk_events_all(cpc_t *cpc, void *arg, void (*action)(void *arg, const char *event));
extern void cpc_walk_events_pic(cpc_t *cpc, uint_t picno, void *arg,
				void (*action)(void *arg, uint_t picno, const char *event));
extern void cpc_walk_generic_events_all(cpc_t *cpc, void *arg,
					void (*action)(void *arg, const char *event));
extern void cpc_walk_generic_events_pic(cpc_t *cpc, uint_t picno, void *arg,
					void (*action)(void *arg, uint_t picno, const char *event));
extern void cpc_walk_attrs(cpc_t *cpc, void *arg, void (*action)(void *arg, const char *attr));

extern cpc_set_t *cpc_set_create(cpc_t *cpc);
extern int cpc_set_destroy(cpc_t *cpc, cpc_set_t *set);
extern int cpc_set_add_request(cpc_t *cpc, cpc_set_t *set, const char *event, uint64_t preset,
			       uint_t flags, uint_t nattrs, const cpc_attr_t *attrs);
extern void cpc_walk_requests(cpc_t *cpc, cpc_set_t *set, void *arg,
			      void (*action)(void *arg, int index, const char *event, uint64_t preset,
					     uint_t flags, int nattrs, const cpc_attr_t *attrs));

extern int cpc_bind_curlwp(cpc_t *cpc, cpc_set_t *set, uint_t flags);
extern int cpc_bind_pctx(cpc_t *cpc, pctx_t *pctx, id_t id, cpc_set_t *set, uint_t flags);
extern int cpc_bind_cpu(cpc_t *cpc, processorid_t id, cpc_set_t *set, uint_t flags);
extern int cpc_unbind(cpc_t *cpc, cpc_set_t *set);
extern int cpc_request_preset(cpc_t *cpc, int index, uint64_t preset);
extern int cpc_set_restart(cpc_t *cpc, cpc_set_t *set);
extern int cpc_enable(cpc_t *cpc);
extern int cpc_disable(cpc_t *cpc);

extern int cpc_set_sample(cpc_t *cpc, cpc_set_t *set, cpc_buf_t *buf);
extern cpc_buf_t *cpc_buf_create(cpc_t *cpc, cpc_set_t *set);
extern int cpc_buf_destroy(cpc_t *cpc, cpc_buf_t *buf);
extern int cpc_buf_get(cpc_t *cpc, cpc_buf_t *buf, int index, uint64_t *val);
extern int cpc_buf_set(cpc_t *cpc, cpc_buf_t *buf, int index, uint64_t val);
extern hrtime_t cpc_buf_hrtime(cpc_t *cpc, cpc_buf_t *buf);
extern uint64_t cpc_buf_tick(cpc_t *cpc, cpc_buf_t *buf);
extern void cpc_buf_sub(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *a, cpc_buf_t *b);
extern void cpc_buf_add(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *a, cpc_buf_t *b);
extern void cpc_buf_copy(cpc_t *cpc, cpc_buf_t *ds, cpc_buf_t *src);
extern void cpc_buf_zero(cpc_t *cpc, cpc_buf_t *buf);

/* Linux additions: see 2. and 7. */
extern void *cpc_overflow_pc(const void *ucontext);
extern pctx_t *pctx_capture(pid_t pid, void *arg, int verbose, void *errfn);
extern void pctx_release(pctx_t *pctx);

#ifdef __cplusplus
}
#endif

#endif /* LIBCPC_H */
