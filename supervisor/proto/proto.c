/* Helpers of the protocol-core seam shared by every core (proto.h). */
#include "config.h"

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
