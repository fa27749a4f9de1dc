/* VLESS server core (PROTOCOLS.md §5): UUID table, request, addons and UDP datagram parsing. */
#include "config.h"

#include "supervisor/proto/vless.h"
#include "supervisor/util/digits.h"
#include "supervisor/proto/mux.h"
#include "supervisor/proto/vision.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

/* ---------------------------------------------------------------------------------------- */
/* Credential table: 16-byte UUID → user index                                               */
/* ---------------------------------------------------------------------------------------- */

/* One slot of the open-addressing table: user index + 1 (0 = empty) and 32 bits of the hash. */
typedef struct vless_slot {
    uint32_t tag;
    uint32_t user1;
} vless_slot;

typedef struct vless_creds {
    size_t n;    /* users */
    size_t mask; /* slots - 1 (a power of two, at least 2n) */
    vless_slot *slots;
    uint8_t (*id)[SV_VLESS_UUID_LEN]; /* each user's UUID, by user index */
    bool fallback;                    /* the inbound has a fallback: failed clients go there */
    bool vision;                      /* every user's flow is xtls-rprx-vision (§2.2) */
} vless_creds;

/*
 * Hash of the 16 bytes. The keys are ids the panel made (random v4 UUIDs), not ids the client
 * chooses, so a probe's cost is bounded by the table's own clusters whatever the query is.
 */
static uint64_t hash_id(const uint8_t *id)
{
    uint64_t a, b;
    memcpy(&a, id, 8);
    memcpy(&b, id + 8, 8);
    uint64_t x = (a ^ 0x243f6a8885a308d3u) * 0x9e3779b97f4a7c15u;
    x ^= x >> 29;
    x = (x ^ b) * 0xbf58476d1ce4e5b9u;
    x ^= x >> 31;
    return x;
}

int sv_vless_uuid_parse(const char *text, uint8_t *out)
{
    size_t len = text != NULL ? strlen(text) : 0;
    bool dashed = len == 36;
    memset(out, 0, SV_VLESS_UUID_LEN);
    if (len != 36 && len != 32)
        return -EINVAL;
    size_t at = 0;
    for (size_t i = 0; i < SV_VLESS_UUID_LEN; i++) {
        if (dashed && (at == 8 || at == 13 || at == 18 || at == 23)) {
            if (text[at] != '-')
                goto bad;
            at++;
        }
        int hi = sv_hex_digit(text[at]), lo = sv_hex_digit(text[at + 1]);
        if (hi < 0 || lo < 0)
            goto bad;
        out[i] = (uint8_t)(hi << 4 | lo);
        at += 2;
    }
    return 0;
bad:
    memset(out, 0, SV_VLESS_UUID_LEN);
    return -EINVAL;
}

int sv_vless_creds_lookup(const void *creds, const uint8_t *uuid)
{
    const vless_creds *t = creds;
    if (t == NULL)
        return -1;
    uint64_t h = hash_id(uuid);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        const vless_slot *s = &t->slots[i];
        if (s->user1 == 0)
            return -1;
        if (s->tag == tag && CRYPTO_memcmp(t->id[s->user1 - 1], uuid, SV_VLESS_UUID_LEN) == 0)
            return (int)(s->user1 - 1);
    }
}

static void creds_free(void *creds)
{
    vless_creds *t = creds;
    if (t == NULL)
        return;
    if (t->id != NULL)
        OPENSSL_cleanse(t->id, t->n * SV_VLESS_UUID_LEN);
    free(t->id);
    free(t->slots);
    free(t);
}

/* Insert user @p u. @return 0, or the index + 1 of a user with the same UUID. */
static uint32_t creds_insert(vless_creds *t, uint32_t u)
{
    uint64_t h = hash_id(t->id[u]);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & t->mask;
    for (; t->slots[i].user1 != 0; i = (i + 1) & t->mask) {
        const vless_slot *s = &t->slots[i];
        if (s->tag == tag && memcmp(t->id[s->user1 - 1], t->id[u], SV_VLESS_UUID_LEN) == 0)
            return s->user1;
    }
    t->slots[i].tag = tag;
    t->slots[i].user1 = u + 1;
    return 0;
}

static int creds_fill(vless_creds *t, const sv_user_set *users, sv_error *err)
{
    const char *set = users->tag != NULL ? users->tag : "";
    for (size_t i = 0; i < users->n_users; i++) {
        const sv_user *u = &users->users[i];
        if (sv_vless_uuid_parse(u->secret, t->id[i]) != 0)
            return sv_error_set(err, -EINVAL, "user set %s: user %" PRIu64 " has a uuid that "
                                "is not a UUID", set, u->id);
        uint32_t dup = creds_insert(t, (uint32_t)i);
        if (dup != 0)
            return sv_error_set(err, -EINVAL, "user set %s: users %" PRIu64 " and %" PRIu64
                                " have the same uuid", set, users->users[dup - 1].id, u->id);
    }
    return 0;
}

static int creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                     sv_error *err)
{
    *out = NULL;
    size_t n = users->n_users;
    const char *set = users->tag != NULL ? users->tag : "";
    if (n > SV_USERS_MAX)
        return sv_error_set(err, -EINVAL, "user set %s: more than %d users", set, SV_USERS_MAX);
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    vless_creds *t = calloc(1, sizeof *t);
    if (t != NULL) {
        t->n = n;
        t->mask = cap - 1;
        t->slots = calloc(cap, sizeof *t->slots);
        t->id = calloc(n > 0 ? n : 1, sizeof *t->id);
        t->fallback = in != NULL && in->fallback != NULL;
        t->vision = in != NULL && in->reality.vision;
    }
    if (t == NULL || t->slots == NULL || t->id == NULL) {
        creds_free(t);
        return sv_error_set(err, -ENOMEM, "user set %s: out of memory", set);
    }
    int rc = creds_fill(t, users, err);
    if (rc < 0) {
        creds_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Per-connection state and feed                                                             */
/* ---------------------------------------------------------------------------------------- */

enum vless_phase { PH_REQUEST = 0, PH_TCP, PH_UDP, PH_MUX, PH_FAILED };

typedef struct vless_conn {
    uint8_t phase;  /* enum vless_phase */
    bool replied;   /* the response header went out */
    int error;      /* PH_FAILED: the error that ended the connection */
    uint32_t skip;  /* PH_UDP: bytes of an oversized datagram still to drop */
    sv_dest dest;   /* PH_UDP: the request's destination, every datagram's */
    sv_mux *mux;    /* PH_MUX: the Mux.Cool decoder of the body (command 3) */
    sv_vision *vision; /* the body is Vision-framed (PROTOCOLS-2.md §2); NULL: plain */
    uint8_t *held;  /* Vision under Mux: un-padded bytes the decoder has not taken */
    size_t held_off, held_len, held_cap;
    bool full;      /* Vision under Mux: the last feed filled its effect list */
    uint8_t *answers; /* Mux: the last feed's End answers as sent (send_answers), or NULL */
} vless_conn;

static int conn_init(void *state, const sv_inbound_spec *in)
{
    (void)in;
    memset(state, 0, sizeof(vless_conn));
    return 0;
}

static void conn_deinit(void *state)
{
    vless_conn *c = state;
    sv_mux_free(c->mux);
    c->mux = NULL;
    free(c->vision);
    c->vision = NULL;
    free(c->held);
    c->held = NULL;
    c->held_off = c->held_len = c->held_cap = 0;
    free(c->answers);
    c->answers = NULL;
}

/*
 * Parse a protobuf varint at @p p (at most 10 bytes, within @p n).
 * @return its length, or -EPROTO when it does not end within @p n bytes.
 */
static ssize_t varint(const uint8_t *p, size_t n, uint64_t *v)
{
    *v = 0;
    for (size_t i = 0; i < n && i < 10; i++) {
        *v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80))
            return (ssize_t)(i + 1);
    }
    return -EPROTO;
}

/*
 * Check the addons (§5.4): protobuf Addons{string Flow = 1; bytes Seed = 2;}, unknown fields
 * skipped. @return the flow (enum sv_vision_request_flow: none, xtls-rprx-vision, another), or
 * -EPROTO when malformed.
 */
static int check_addons(const uint8_t *p, size_t n)
{
    size_t at = 0;
    int flow = SV_VISION_REQ_NONE;
    while (at < n) {
        uint64_t key, len;
        ssize_t k = varint(p + at, n - at, &key);
        if (k < 0)
            return (int)k;
        at += (size_t)k;
        if (key >> 3 == 0)
            return -EPROTO;
        switch (key & 7) {
        case 0:
            k = varint(p + at, n - at, &len);
            if (k < 0)
                return (int)k;
            at += (size_t)k;
            break;
        case 1:
        case 5:
            len = (key & 7) == 1 ? 8 : 4;
            if (n - at < len)
                return -EPROTO;
            at += len;
            break;
        case 2:
            k = varint(p + at, n - at, &len);
            if (k < 0 || n - at - (size_t)k < len)
                return -EPROTO;
            if (key >> 3 == 1 && len > 0)
                flow = len == strlen(SV_VISION_FLOW) &&
                               memcmp(p + at + k, SV_VISION_FLOW, len) == 0
                           ? SV_VISION_REQ_VISION
                           : SV_VISION_REQ_OTHER;
            at += (size_t)k + len;
            break;
        default:
            return -EPROTO;
        }
        if (key >> 3 == 1 && (key & 7) != 2)
            return -EPROTO;
    }
    return flow;
}

/*
 * Parse the request header (§5.1), checking each field as soon as its bytes are there, in wire
 * order, so that whole and piecewise input fail with the same error. *@p user is set once the
 * UUID is known (an error after that is a client's, not a prober's).
 * @return header length; 0 when more bytes are needed; -EPROTO, -EACCES or -EPROTONOSUPPORT.
 */
static ssize_t parse_request(const void *creds, const uint8_t *p, size_t n, int *user,
                             uint8_t *cmd, sv_dest *d, bool *framed)
{
    const vless_creds *t = creds;
    if (n < 1)
        return 0;
    if (p[0] != 0)
        return -EPROTO;
    size_t at = 1 + SV_VLESS_UUID_LEN;
    if (n < at)
        return 0;
    *user = sv_vless_creds_lookup(creds, p + 1);
    if (*user < 0)
        return -EACCES;
    if (n < at + 1)
        return 0;
    size_t m = p[at++];
    if (n < at + m)
        return 0;
    int flow = check_addons(p + at, m);
    if (flow < 0)
        return flow;
    if (flow == SV_VISION_REQ_OTHER) /* refused as soon as seen (§2.2: any command) */
        return -EPROTONOSUPPORT;
    if (flow == SV_VISION_REQ_VISION && (t == NULL || !t->vision))
        return -EPERM;
    at += m;
    if (n < at + 1)
        return 0;
    *cmd = p[at++];
    if (*cmd != SV_VLESS_MUX && *cmd != SV_VLESS_TCP && *cmd != SV_VLESS_UDP)
        return -EPROTONOSUPPORT;
    if (*cmd != SV_VLESS_MUX) { /* Mux has no address: the frames name each session's (§7.1) */
        ssize_t a = sv_dest_parse_b(p + at, n - at, d);
        if (a <= 0)
            return a;
        at += (size_t)a;
    }
    /* the flow rules (PROTOCOLS-2.md §2.2); a Mux without flow on a Vision node must be XUDP */
    int r = sv_vision_check(t != NULL && t->vision, (enum sv_vision_request_flow)flow, *cmd,
                            p + at, n - at, framed);
    if (r <= 0)
        return r;
    return (ssize_t)at;
}

static ssize_t fail(vless_conn *c, sv_effects *fx, int error, enum sv_probe_policy policy,
                    uint8_t *data, size_t len)
{
    c->phase = PH_FAILED;
    c->error = error;
    sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
    if (e != NULL) {
        e->error = error;
        e->policy = policy;
        e->data = data;
        e->len = len;
    }
    return error;
}

/* Emit whole datagrams from @p p + @p at while @p fx has room; drop oversized ones as they
 * come. @return bytes consumed. */
static ssize_t feed_datagrams(vless_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx)
{
    while (fx->n < SV_EFFECTS_MAX) {
        if (c->skip > 0) {
            size_t k = n - at < c->skip ? n - at : c->skip;
            c->skip -= (uint32_t)k;
            at += k;
            if (c->skip > 0)
                break;
            continue;
        }
        if (n - at < 2)
            break;
        size_t len = (size_t)p[at] << 8 | p[at + 1];
        if (len > SV_VLESS_UDP_PAYLOAD_MAX) {
            c->skip = (uint32_t)len;
            at += 2;
            continue;
        }
        if (n - at - 2 < len)
            break;
        sv_effect *e = sv_effects_push(fx, SV_FX_DATAGRAM);
        e->dest = c->dest;
        e->data = p + at + 2;
        e->len = len;
        at += 2 + len;
    }
    return (ssize_t)at;
}

static void push_data(sv_effects *fx, uint8_t *p, size_t n)
{
    if (n > 0) {
        sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
        e->data = p;
        e->len = n;
    }
}

/* Vision: un-pad @p p + @p at in place (PROTOCOLS-2.md §2.4) and run the TLS filter over the
 * content. @return the content length at @p p + @p at, -EAGAIN when the first frame's user id
 * is not whole yet (nothing consumed), or a negative errno with an error effect. */
static ssize_t unpad(vless_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx)
{
    size_t k = 0;
    ssize_t r = sv_vision_unpad(c->vision, p + at, n - at, &k);
    if (r < 0)
        return fail(c, fx, (int)r, SV_PROBE_CLOSE, NULL, 0);
    if (r == 0)
        return -EAGAIN;
    sv_vision_filter(c->vision, p + at, k);
    return (ssize_t)k;
}

static ssize_t send_answers(vless_conn *c, sv_effects *fx, unsigned first, ssize_t consumed);

/* The Mux.Cool decoder failed with @p rc after putting effects among fx->v[first ...]: its End
 * answers still go out as the downstream (as a feed split before the bad bytes sends them),
 * never raw, then the connection fails. */
static ssize_t mux_failed(vless_conn *c, sv_effects *fx, unsigned first, int rc)
{
    ssize_t w = send_answers(c, fx, first, 0);
    return w < 0 ? w : fail(c, fx, rc, SV_PROBE_CLOSE, NULL, 0);
}

/* Mux.Cool frames from @p p + @p at (§7): the decoder's effects, stream = session ID. Under
 * Vision the content is un-padded, then decoded from the core's own buffer (what the decoder
 * leaves there is already un-padded, so the runtime's carry cannot hold it).
 * @return bytes consumed (including @p at), or -EPROTO with an error effect. */
static ssize_t feed_mux(vless_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx)
{
    unsigned first = fx->n;
    if (c->vision == NULL) {
        ssize_t r = sv_mux_feed(c->mux, p + at, n - at, fx);
        if (r < 0)
            return mux_failed(c, fx, first, (int)r);
        return send_answers(c, fx, first, (ssize_t)at + r);
    }
    size_t k = 0;
    if (n > at) {
        ssize_t u = unpad(c, p, n, at, fx);
        if (u == -EAGAIN)
            return (ssize_t)at;
        if (u < 0)
            return u;
        k = (size_t)u;
    }
    if (c->held_off > 0) { /* the effects pointing here were applied */
        memmove(c->held, c->held + c->held_off, c->held_len);
        c->held_off = 0;
    }
    if (c->held_len + k > c->held_cap) {
        size_t cap = c->held_len + k + 4096;
        uint8_t *h = realloc(c->held, cap);
        if (h == NULL)
            return fail(c, fx, -ENOMEM, SV_PROBE_CLOSE, NULL, 0);
        c->held = h;
        c->held_cap = cap;
    }
    if (k > 0)
        memcpy(c->held + c->held_len, p + at, k);
    c->held_len += k;
    ssize_t r = c->held_len > 0 ? sv_mux_feed(c->mux, c->held, c->held_len, fx) : 0;
    if (r < 0)
        return mux_failed(c, fx, first, (int)r);
    c->held_off = (size_t)r;
    c->held_len -= (size_t)r;
    c->full = c->held_len > 0 && fx->n >= SV_EFFECTS_MAX;
    return send_answers(c, fx, first, (ssize_t)n);
}

/* Vision over TCP: the frames' content goes to the outbound. */
static ssize_t feed_vision_tcp(vless_conn *c, uint8_t *p, size_t n, size_t at, sv_effects *fx)
{
    if (n == at)
        return (ssize_t)n;
    ssize_t k = unpad(c, p, n, at, fx);
    if (k == -EAGAIN)
        return (ssize_t)at;
    if (k < 0)
        return k;
    push_data(fx, p + at, (size_t)k);
    return (ssize_t)n;
}

static ssize_t conn_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    vless_conn *c = state;
    fx->n = 0;
    free(c->answers); /* the last call's effects are applied */
    c->answers = NULL;
    switch ((enum vless_phase)c->phase) {
    case PH_FAILED:
        return fail(c, fx, c->error, SV_PROBE_CLOSE, NULL, 0);
    case PH_TCP:
        if (c->vision != NULL)
            return feed_vision_tcp(c, p, n, 0, fx);
        push_data(fx, p, n);
        return (ssize_t)n;
    case PH_UDP:
        return feed_datagrams(c, p, n, 0, fx);
    case PH_MUX:
        return feed_mux(c, p, n, 0, fx);
    case PH_REQUEST:
        break;
    }

    int user = -1;
    uint8_t cmd = 0;
    sv_dest d;
    bool framed = false;
    ssize_t h = parse_request(creds, p, n, &user, &cmd, &d, &framed);
    if (h < 0 && user < 0) {
        const vless_creds *t = creds;
        bool fb = t != NULL && t->fallback;
        return fail(c, fx, (int)h, fb ? SV_PROBE_FALLBACK : SV_PROBE_DRAIN, p, n);
    }
    if (h < 0)
        return fail(c, fx, (int)h, SV_PROBE_CLOSE, NULL, 0);
    if (h == 0)
        return 0;
    if (framed) {
        uint64_t seed = 0;
        c->vision = malloc(sizeof *c->vision);
        if (c->vision == NULL)
            return fail(c, fx, -ENOMEM, SV_PROBE_CLOSE, NULL, 0);
        (void)RAND_bytes((unsigned char *)&seed, sizeof seed); /* padding lengths only */
        sv_vision_init(c->vision, p + 1, cmd == SV_VLESS_TCP, seed);
    }
    sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
    e->principal = user;
    if (cmd == SV_VLESS_MUX) {
        c->mux = sv_mux_new();
        if (c->mux == NULL)
            return fail(c, fx, -ENOMEM, SV_PROBE_CLOSE, NULL, 0);
        e->multiplexed = true;
        c->phase = PH_MUX;
        return feed_mux(c, p, n, (size_t)h, fx);
    }
    d.network = cmd == SV_VLESS_TCP ? SV_NET_TCP : SV_NET_UDP;
    e = sv_effects_push(fx, SV_FX_OPEN);
    e->dest = d;
    if (cmd == SV_VLESS_TCP) {
        c->phase = PH_TCP;
        if (c->vision != NULL)
            return feed_vision_tcp(c, p, n, (size_t)h, fx);
        push_data(fx, p + h, n - (size_t)h);
        return (ssize_t)n;
    }
    c->phase = PH_UDP;
    c->dest = d;
    return feed_datagrams(c, p, n, (size_t)h, fx);
}

/* ---------------------------------------------------------------------------------------- */
/* Downstream                                                                                */
/* ---------------------------------------------------------------------------------------- */

static size_t frame_max(size_t len)
{
    /* room for Mux.Cool framing, and Vision's padding frames around it */
    return sv_vision_pad_max(sv_mux_frame_max(len)) + SV_VLESS_RESPONSE_LEN;
}

/* Write the response header at @p out unless it went out already. @return its length. */
static size_t put_response(vless_conn *c, uint8_t *out)
{
    if (c->replied)
        return 0;
    c->replied = true;
    out[0] = 0; /* version */
    out[1] = 0; /* addons length */
    return SV_VLESS_RESPONSE_LEN;
}

/* Vision: the response header if due, then @p inner (one write: a payload, a Mux.Cool frame)
 * in padding frames (§2.3, §2.5). @p inner may lie in @p out's tail, after room for the
 * padding overhead (sv_vision_pad's rule). */
static ssize_t vision_out(vless_conn *c, const uint8_t *inner, size_t inner_len, uint8_t *out,
                          size_t cap)
{
    size_t head = c->replied ? 0 : SV_VLESS_RESPONSE_LEN;
    if (cap < head)
        return -EMSGSIZE;
    ssize_t w = sv_vision_pad(c->vision, inner, inner_len, out + head, cap - head);
    if (w < 0)
        return w;
    put_response(c, out);
    return (ssize_t)head + w;
}

/* sv_mux_answer_fn: an End answer as the downstream's next bytes: after the response header
 * when it has not gone out (§5), in Vision padding frames while padding is on (PROTOCOLS-2.md
 * §2.3, §2.5). */
static ssize_t write_answer(void *core, const uint8_t *frame, size_t len, uint8_t *out,
                            size_t cap)
{
    vless_conn *c = core;
    if (c->vision != NULL)
        return vision_out(c, frame, len, out, cap);
    if (cap < SV_VLESS_RESPONSE_LEN + len)
        return -EMSGSIZE;
    size_t head = put_response(c, out);
    memcpy(out + head, frame, len);
    return (ssize_t)(head + len);
}

/* The Mux.Cool decoder's End answers (a Keep for a session that ended here while the client was
 * still sending, e.g. killed; a New beyond SV_MUX_SESSIONS_MAX) among fx->v[first ...], written
 * as the downstream (sv_mux_answers_write). @return @p consumed, or an error (the connection
 * fails). */
static ssize_t send_answers(vless_conn *c, sv_effects *fx, unsigned first, ssize_t consumed)
{
    int rc = sv_mux_answers_write(fx, first, frame_max(SV_MUX_END_LEN), write_answer, c,
                                  &c->answers);
    return rc < 0 ? fail(c, fx, rc, SV_PROBE_CLOSE, NULL, 0) : consumed;
}

static ssize_t frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                     size_t len, uint8_t *out, size_t cap)
{
    (void)creds;
    vless_conn *c = state;
    if (c->vision != NULL && c->mux != NULL) { /* the Keep frame in out's tail, then padded */
        size_t room = sv_mux_frame_max(len);
        if (cap < frame_max(len))
            return -EMSGSIZE;
        ssize_t w = sv_mux_frame_data((uint16_t)stream, in, len, out + cap - room, room);
        if (w < 0)
            return w;
        return vision_out(c, out + cap - room, (size_t)w, out, cap);
    }
    if (c->vision != NULL)
        return vision_out(c, in, len, out, cap);
    size_t head = c->replied ? 0 : SV_VLESS_RESPONSE_LEN;
    if (c->mux != NULL) { /* Keep frames of that session (§7.3) */
        if (cap < head)
            return -EMSGSIZE;
        ssize_t w = sv_mux_frame_data((uint16_t)stream, in, len, out + head, cap - head);
        if (w < 0)
            return w;
        put_response(c, out);
        return (ssize_t)head + w;
    }
    if (cap < head + len)
        return -EMSGSIZE;
    memmove(out + head, in, len);
    put_response(c, out);
    return (ssize_t)(head + len);
}

static ssize_t frame_datagram(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap)
{
    (void)creds;
    vless_conn *c = state;
    size_t head = c->replied ? 0 : SV_VLESS_RESPONSE_LEN;
    if (c->mux != NULL && c->vision != NULL) { /* the Keep frame in out's tail, then padded */
        if (len > SV_MUX_UDP_PAYLOAD_MAX)
            return -EINVAL;
        size_t room = SV_MUX_DGRAM_HEAD_MAX + len;
        if (cap < SV_VLESS_RESPONSE_LEN + sv_vision_pad_max(room))
            return -EMSGSIZE;
        uint8_t *at = out + cap - room;
        size_t h = sv_mux_frame_datagram_head((uint16_t)stream, from, len, at);
        memmove(at + h, payload, len);
        return vision_out(c, at, h + len, out, cap);
    }
    if (c->mux != NULL) { /* one Keep frame per datagram with its source (XUDP full cone) */
        if (len > SV_MUX_UDP_PAYLOAD_MAX)
            return -EINVAL;
        if (cap < head + SV_MUX_DGRAM_HEAD_MAX + len)
            return -EMSGSIZE;
        size_t h = sv_mux_frame_datagram_head((uint16_t)stream, from, len, out + head);
        memmove(out + head + h, payload, len);
        put_response(c, out);
        return (ssize_t)(head + h + len);
    }
    if (len > SV_VLESS_UDP_PAYLOAD_MAX)
        return -EINVAL;
    if (cap < head + 2 + len)
        return -EMSGSIZE;
    memmove(out + head + 2, payload, len);
    put_response(c, out);
    out[head] = (uint8_t)(len >> 8);
    out[head + 1] = (uint8_t)(len & 0xff);
    return (ssize_t)(head + 2 + len);
}

/* Mux.Cool only: the End frame of @p stream once its outbound is done (§7.3); the decoder
 * forgets the session. Single-flow VLESS has no end-of-stream bytes. */
static ssize_t frame_end(void *state, const void *creds, uint32_t stream, bool abort,
                         uint8_t *out, size_t cap)
{
    (void)creds;
    vless_conn *c = state;
    if (c->mux == NULL)
        return 0;
    size_t head = c->replied ? 0 : SV_VLESS_RESPONSE_LEN;
    if (c->vision != NULL) {
        uint8_t end[SV_MUX_END_LEN];
        if (cap < frame_max(0))
            return -EMSGSIZE;
        size_t w = sv_mux_frame_end((uint16_t)stream, abort, end);
        sv_mux_session_gone(c->mux, (uint16_t)stream);
        return vision_out(c, end, w, out, cap);
    }
    if (cap < head + SV_MUX_END_LEN)
        return -EMSGSIZE;
    sv_mux_session_gone(c->mux, (uint16_t)stream);
    put_response(c, out);
    return (ssize_t)(head + sv_mux_frame_end((uint16_t)stream, abort, out + head));
}

/* Vision under Mux: the decoder stopped on a full effect list with bytes left. */
static bool more(const void *state)
{
    const vless_conn *c = state;
    return c->full;
}

/* Vision (PROTOCOLS-2.md §2.6): watch the client's records while it may still switch, then
 * raw each way after its command 2 frame. */
static unsigned direct(const void *state)
{
    const vless_conn *c = state;
    if (c->vision == NULL)
        return 0;
    return (sv_vision_rx_watch(c->vision) ? SV_DIRECT_WATCH : 0u) |
           (sv_vision_rx_direct(c->vision) ? SV_DIRECT_IN : 0u) |
           (sv_vision_tx_direct(c->vision) ? SV_DIRECT_OUT : 0u);
}

static const sv_proto_ext_backlog vless_backlog = {.more = more};
static const sv_proto_ext_datagram vless_datagram = {.frame_datagram = frame_datagram};
static const sv_proto_ext_end vless_end = {.frame_end = frame_end};
static const sv_proto_ext_direct vless_direct = {.direct = direct};

const sv_proto_ops sv_vless_ops = {
    .name = "vless",
    .creds_new = creds_new,
    .creds_free = creds_free,
    .state_size = sizeof(vless_conn),
    .init = conn_init,
    .deinit = conn_deinit,
    .feed = conn_feed,
    .carry_max = SV_VLESS_CARRY_MAX,
    .frame = frame,
    .frame_max = frame_max,
    .ext =
        {
            [SV_PROTO_CAP_BACKLOG] = &vless_backlog,
            [SV_PROTO_CAP_DATAGRAM] = &vless_datagram,
            [SV_PROTO_CAP_END] = &vless_end,
            [SV_PROTO_CAP_DIRECT] = &vless_direct,
        },
};
