/* A growable byte buffer (textbuf.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/util/textbuf.h"

int sv_textbuf_append(char **buf, size_t *len, size_t *cap, size_t first_cap, const void *p,
                      size_t n)
{
    if (n > (size_t)-1 / 2 - *len - 1)
        return -ENOMEM;
    if (*len + n + 1 > *cap) {
        size_t c = *cap != 0 ? *cap : (first_cap != 0 ? first_cap : 1);
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (b == NULL)
            return -ENOMEM;
        *buf = b;
        *cap = c;
    }
    if (n > 0)
        memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}
