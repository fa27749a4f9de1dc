/*
 * The blackhole outbound: refuses every stream (the client sees its connection end, no answer, no
 * log line) and carries no datagram, so the fan-out drops what is routed here, unbilled
 * (seed 002 "被阻断的数据包被丢弃且不计费").
 */
#include "config.h"

#include <errno.h>

#include "supervisor/outbound/outbound.h"

static int blackhole_open(sv_ob_stream *s, const sv_dest *d)
{
    (void)s;
    (void)d;
    return -ECONNREFUSED;
}

static void blackhole_close(sv_ob_stream *s)
{
    if (s->closing)
        return;
    s->closing = true;
    s->ev->closed(s->owner); /* nothing was ever in flight */
}

const sv_outbound_ops sv_ob_blackhole = {
    .name = "blackhole",
    .refuses_all = true,
    .open = blackhole_open,
    .close = blackhole_close,
};
