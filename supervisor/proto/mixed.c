/* The mixed core: SOCKS5 or the HTTP proxy, chosen by the first byte (mixed.h). */
#include "config.h"

#include "supervisor/proto/mixed.h"

#include <errno.h>
#include <stdlib.h>

#include "supervisor/proto/http_proxy.h"
#include "supervisor/proto/socks.h"

#define SOCKS_VERSION 0x05 /* RFC 1928 §3: the greeting's first byte */

typedef struct mixed_conn {
    const sv_inbound_spec *in;
    const sv_proto_ops *inner; /* NULL until the first byte came */
    void *state;               /* the inner core's, state_size bytes */
} mixed_conn;

static int creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                     sv_error *err)
{
    return sv_socks_ops.creds_new(in, users, out, err);
}

static void creds_free(void *creds)
{
    sv_socks_ops.creds_free(creds);
}

static int conn_init(void *state, const sv_inbound_spec *in)
{
    mixed_conn *c = state;
    c->in = in;
    c->inner = NULL;
    c->state = NULL;
    return 0;
}

static void conn_deinit(void *state)
{
    mixed_conn *c = state;
    if (c->state != NULL) {
        c->inner->deinit(c->state);
        free(c->state);
        c->state = NULL;
    }
}

/* Pick and start the inner core for first byte @p first. @return 0 or -ENOMEM. */
static int choose(mixed_conn *c, uint8_t first)
{
    const sv_proto_ops *ops = first == SOCKS_VERSION ? &sv_socks_ops : &sv_http_proxy_ops;
    void *st = calloc(1, ops->state_size);
    if (st == NULL || ops->init(st, c->in) != 0) {
        free(st);
        return -ENOMEM;
    }
    c->inner = ops;
    c->state = st;
    return 0;
}

static ssize_t conn_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    mixed_conn *c = state;
    fx->n = 0;
    if (c->inner == NULL) {
        if (n == 0)
            return 0;
        int rc = choose(c, p[0]);
        if (rc < 0) {
            sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
            e->error = rc;
            e->policy = SV_PROBE_CLOSE;
            return rc;
        }
    }
    return c->inner->feed(c->state, creds, p, n, fx);
}

static ssize_t frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                     size_t len, uint8_t *out, size_t cap)
{
    mixed_conn *c = state;
    if (c->inner == NULL)
        return -EINVAL; /* nothing to frame before a flow opened */
    return c->inner->frame(c->state, creds, stream, in, len, out, cap);
}

/* UDP beside the stream: SOCKS5's (only the SOCKS5 core opens a UDP association). */
static ssize_t relay_ready(void *state, const struct sockaddr *bound, uint8_t *out, size_t cap)
{
    mixed_conn *c = state;
    const sv_proto_ext_relay *x = c->inner != NULL ? sv_proto_relay(c->inner) : NULL;
    return x != NULL ? x->relay_ready(c->state, bound, out, cap) : -EINVAL;
}

static ssize_t relay_failed(void *state, uint8_t *out, size_t cap)
{
    mixed_conn *c = state;
    const sv_proto_ext_relay *x = c->inner != NULL ? sv_proto_relay(c->inner) : NULL;
    return x != NULL ? x->relay_failed(c->state, out, cap) : -EINVAL;
}

static int relay_open(const uint8_t *p, size_t n, sv_dest *dest, size_t *payload_off)
{
    return sv_proto_relay(&sv_socks_ops)->relay_open(p, n, dest, payload_off);
}

static ssize_t frame_datagram(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap)
{
    mixed_conn *c = state;
    const sv_proto_ext_datagram *x = c->inner != NULL ? sv_proto_datagram(c->inner) : NULL;
    return x != NULL ? x->frame_datagram(c->state, creds, stream, from, payload, len, out, cap)
                     : -EINVAL;
}

static unsigned conn_direct(const void *state)
{
    const mixed_conn *c = state;
    const sv_proto_ext_direct *x = c->inner != NULL ? sv_proto_direct(c->inner) : NULL;
    return x != NULL ? x->direct(c->state) : 0;
}

static const sv_proto_ext_direct mixed_direct = {.direct = conn_direct};
static const sv_proto_ext_relay mixed_relay = {
    .relay_ready = relay_ready, .relay_failed = relay_failed, .relay_open = relay_open};
static const sv_proto_ext_datagram mixed_datagram = {.frame_datagram = frame_datagram};

#define MAX_OF(a, b) ((a) > (b) ? (a) : (b))

const sv_proto_ops sv_mixed_ops = {
    .name = "mixed",
    .creds_new = creds_new,
    .creds_free = creds_free,
    .state_size = sizeof(mixed_conn),
    .init = conn_init,
    .deinit = conn_deinit,
    .feed = conn_feed,
    .carry_max = MAX_OF(SV_SOCKS_CARRY_MAX, SV_HTTP_PROXY_HEAD_MAX),
    .frame = frame,
    .frame_max = sv_frame_copy_max, /* both inner cores copy */
    .ext =
        {
            [SV_PROTO_CAP_DATAGRAM] = &mixed_datagram,
            [SV_PROTO_CAP_RELAY] = &mixed_relay,
            [SV_PROTO_CAP_DIRECT] = &mixed_direct,
        },
};
