/*
 * A connection's chain of transport layers: see layer.h. Bytes go up
 * depth first, one piece at a time, so that a piece leaves the top before the next one is
 * unwrapped and no boundary needs more than one stage buffer; output goes down by pumping each
 * layer's pending bytes into the layer below.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "supervisor/transport/layer.h"

int sv_chain_open(sv_chain *ch, const sv_layer_conf *conf, unsigned n)
{
    memset(ch, 0, sizeof *ch);
    if (n > SV_CHAIN_MAX)
        return -EINVAL;
    ch->conf = conf;
    for (unsigned i = 0; i < n; i++) {
        int rc = conf[i].ops->open(conf[i].conf, &ch->state[i]);
        if (rc != 0) {
            sv_chain_free(ch);
            return rc;
        }
        ch->n = (uint8_t)(i + 1);
    }
    return 0;
}

void sv_chain_free(sv_chain *ch)
{
    for (unsigned i = 0; i < ch->n; i++) {
        ch->conf[i].ops->free(ch->state[i]);
        ch->state[i] = NULL;
    }
    ch->n = 0;
}

/* Unwrap @p n bytes at layer @p i and push what it produces further up. Each buffer is filled
 * as far as the layer goes before it moves up, so that the protocol above gets one piece per
 * read (one write to the outbound), not one per TLS record or WebSocket frame. */
static int push_up(sv_chain *ch, unsigned i, const uint8_t *in, size_t n, uint8_t *stage,
                   sv_chain_alloc_cb alloc, sv_chain_deliver_cb deliver, void *ctx, bool *stop)
{
    const sv_layer_ops *ops = ch->conf[i].ops;
    bool top = i + 1 == ch->n;
    size_t off = 0;
    for (;;) {
        uint8_t *out = stage + (size_t)i * SV_CHAIN_STAGE;
        size_t cap = SV_CHAIN_STAGE, w = 0;
        int err = 0;
        if (top)
            out = alloc(ctx, &cap);
        while (w < cap) {
            size_t used = 0;
            ssize_t m = ops->unwrap(ch->state[i], in + off, n - off, &used, out + w, cap - w);
            if (m < 0) {
                err = (int)m; /* what came before the error still goes up first */
                break;
            }
            off += used;
            w += (size_t)m;
            if (m == 0 && used == 0)
                break; /* the layer needs more bytes */
            if (m > 0 && (ops->status(ch->state[i]) & SV_LAYER_RECORDS))
                break; /* this piece goes up before the next is unwrapped */
        }
        if (w == 0)
            return err < 0 ? err : off < n ? -EPROTO : 0; /* stuck: a unit over the bound */
        if (top && !deliver(ctx, out, w)) {
            *stop = true;
            return 0;
        }
        if (!top) {
            int rc = push_up(ch, i + 1, out, w, stage, alloc, deliver, ctx, stop);
            if (rc < 0 || *stop)
                return rc;
        }
        if (err < 0)
            return err;
    }
}

int sv_chain_unwrap(sv_chain *ch, const uint8_t *in, size_t n, uint8_t *stage,
                    sv_chain_alloc_cb alloc, sv_chain_deliver_cb deliver, void *ctx)
{
    bool stop = false;
    if (ch->n == 0)
        return 0;
    return push_up(ch, 0, in, n, stage, alloc, deliver, ctx, &stop);
}

int sv_chain_pump(sv_chain *ch)
{
    for (unsigned i = ch->n; i-- > 1;) {
        const sv_layer_ops *up = ch->conf[i].ops, *down = ch->conf[i - 1].ops;
        for (;;) {
            size_t len = 0;
            const uint8_t *p = up->out_peek(ch->state[i], &len);
            if (len == 0)
                break;
            ssize_t w = down->wrap(ch->state[i - 1], p, len);
            if (w < 0)
                return (int)w;
            if (w == 0)
                break;
            up->out_consume(ch->state[i], (size_t)w);
        }
    }
    return 0;
}

ssize_t sv_chain_wrap(sv_chain *ch, const uint8_t *p, size_t n)
{
    if (ch->n == 0)
        return -EINVAL;
    ssize_t a = ch->conf[ch->n - 1].ops->wrap(ch->state[ch->n - 1], p, n);
    if (a < 0)
        return a;
    int rc = sv_chain_pump(ch);
    return rc < 0 ? rc : a;
}

int sv_chain_shutdown(sv_chain *ch)
{
    for (unsigned i = ch->n; i-- > 0;) {
        int rc = ch->conf[i].ops->shutdown(ch->state[i]);
        if (rc == 0)
            rc = sv_chain_pump(ch);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int sv_chain_direct(sv_chain *ch, unsigned bits)
{
    if (ch->n == 0)
        return 0; /* no layer: the socket's bytes are the core's already */
    if (ch->n != 1 || ch->conf[0].ops->direct == NULL)
        return bits == 0 ? 0 : -EOPNOTSUPP;
    return ch->conf[0].ops->direct(ch->state[0], bits);
}

/* The layer waiting for its target, or -1. */
static int target_layer(const sv_chain *ch)
{
    for (unsigned i = 0; i < ch->n; i++)
        if ((ch->conf[i].ops->status(ch->state[i]) & SV_LAYER_TARGET) &&
            ch->conf[i].ops->target_ask != NULL && ch->conf[i].ops->target_reply != NULL)
            return (int)i;
    return -1;
}

const uint8_t *sv_chain_target_ask(const sv_chain *ch, size_t *len)
{
    int i = target_layer(ch);
    *len = 0;
    return i < 0 ? NULL : ch->conf[i].ops->target_ask(ch->state[i], len);
}

int sv_chain_target_reply(sv_chain *ch, const uint8_t *p, size_t n, bool final)
{
    int i = target_layer(ch);
    if (i < 0)
        return 0;
    int rc = ch->conf[i].ops->target_reply(ch->state[i], p, n, final);
    return rc < 0 ? rc : rc == 1 ? 1 : sv_chain_pump(ch);
}

const uint8_t *sv_chain_out_peek(const sv_chain *ch, size_t *len)
{
    *len = 0;
    if (ch->n == 0)
        return NULL;
    return ch->conf[0].ops->out_peek(ch->state[0], len);
}

void sv_chain_out_consume(sv_chain *ch, size_t n)
{
    if (ch->n > 0)
        ch->conf[0].ops->out_consume(ch->state[0], n);
}

unsigned sv_chain_status(const sv_chain *ch)
{
    unsigned all = ch->n > 0 ? SV_LAYER_UP | SV_LAYER_PASS : SV_LAYER_UP, any = 0;
    for (unsigned i = 0; i < ch->n; i++) {
        unsigned s = ch->conf[i].ops->status(ch->state[i]);
        any |= s & (SV_LAYER_EOF | SV_LAYER_REFUSED | SV_LAYER_TARGET);
        if (s & SV_LAYER_REFUSED)
            break; /* the layers above never see a byte: their handshakes do not count */
        all &= s | ~(SV_LAYER_UP | SV_LAYER_PASS);
    }
    if (any & (SV_LAYER_EOF | SV_LAYER_REFUSED | SV_LAYER_TARGET))
        all &= ~SV_LAYER_PASS;
    return (any & SV_LAYER_REFUSED ? SV_LAYER_UP : all) | any;
}

const char *sv_chain_forwarded(const sv_chain *ch)
{
    for (unsigned i = 0; i < ch->n; i++) {
        const sv_layer_ops *ops = ch->conf[i].ops;
        const char *f = ops->forwarded != NULL ? ops->forwarded(ch->state[i]) : NULL;
        if (f != NULL)
            return f;
    }
    return NULL;
}
