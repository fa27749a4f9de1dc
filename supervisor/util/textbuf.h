/* A growable, NUL-terminated byte buffer for bodies read in pieces (HTTP answers, SSE lines). */
#ifndef SV_UTIL_TEXTBUF_H
#define SV_UTIL_TEXTBUF_H

#include <stddef.h>

/**
 * Append @p n bytes of @p p to the buffer *@p buf holding *@p len bytes in *@p cap allocated,
 * keeping a NUL after them. The allocation grows by doubling, from @p first_cap bytes (at
 * least 1) when *@p buf is NULL. The caller frees *@p buf; the bound on *@p len is the
 * caller's (checked before the call).
 * @return 0, or -ENOMEM (the buffer is unchanged).
 */
int sv_textbuf_append(char **buf, size_t *len, size_t *cap, size_t first_cap, const void *p,
                      size_t n);

#endif
