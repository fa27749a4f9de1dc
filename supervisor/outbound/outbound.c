/* The table of outbound implementations: a new outbound adds one entry. */
#include "config.h"

#include "supervisor/outbound/outbound.h"

const sv_outbound_ops *sv_outbound_ops_for(enum sv_outbound_kind kind)
{
    switch (kind) {
    case SV_OUTBOUND_DIRECT: return &sv_ob_direct;
    case SV_OUTBOUND_BLACKHOLE: return &sv_ob_blackhole;
    }
    return NULL;
}
