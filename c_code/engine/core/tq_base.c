/* tq_base.c: the error setter and the clock (see tq_base.h). */
#include "tq_base.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

tq_code tq_set_error(tq_error *err, tq_code code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

double tq_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
