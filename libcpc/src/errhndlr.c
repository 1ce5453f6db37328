/* Calls a libcpc error handler, which takes a va_list: Rust passes "%s" and the message. */
#include <libcpc.h>

void libcpc_call_errhndlr(cpc_errhndlr_t *h, const char *fn, int subcode, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    h(fn, subcode, fmt, ap);
    va_end(ap);
}
