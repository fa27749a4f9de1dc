/* Error results that carry text (validation, apply). Codes are 0 or -errno. */
#ifndef SV_UTIL_ERR_H
#define SV_UTIL_ERR_H

#include <stdarg.h>

/** The reason an apply or a user edit was refused, with the seed's exact text in msg. */
typedef struct sv_error {
    int code;       /**< 0 or a negative errno (-EINVAL for validation, -EADDRINUSE for a bind, ...) */
    char msg[512];  /**< the Display text, e.g. "duplicate outbound tag direct" (seed 001, ApplyError) */
} sv_error;

/**
 * Fill @p err (may be NULL) with @p code and a formatted message.
 * @return @p code, so callers can write `return sv_error_set(err, -EINVAL, "...")`.
 */
int sv_error_set(sv_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
