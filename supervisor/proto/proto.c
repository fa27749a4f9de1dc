/* Helpers of the protocol-core seam shared by every core (proto.h). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "supervisor/proto/proto.h"

sv_effect *sv_effects_push(sv_effects *fx, enum sv_effect_kind kind)
{
    if (fx->n >= SV_EFFECTS_MAX)
        return NULL;
    sv_effect *e = &fx->v[fx->n++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    return e;
}

ssize_t sv_frame_copy(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                      size_t len, uint8_t *out, size_t cap)
{
    (void)state, (void)creds, (void)stream;
    if (cap < len)
        return -EMSGSIZE;
    memmove(out, in, len);
    return (ssize_t)len;
}

size_t sv_frame_copy_max(size_t len)
{
    return len;
}
