/* <machine/perfmon.h>, where FreeBSD programs include it: the same definitions. */
#include "../perfmon.h"
