/* Shadowsocks over Mux.Cool (PROTOCOLS.md §2, §7): one Shadowsocks core per session. */
#include "config.h"

#include "supervisor/proto/ss_mux.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/mux.h"
#include "supervisor/proto/shadowsocks.h"
#include "supervisor/proto/ss_ops.h"

/* Most bytes a session's Shadowsocks core needs buffered (shadowsocks.h). */
#define CARRY_CAP (SV_SS_SALT_MAX + SV_SS_NEED_MAX)
/* Free effect slots before a step or a chunk: a chunk gives up to three (authenticated, open,
 * data), a failed stream two (End, close), a failed connection one. */
#define ROOM 4
/* Payload sealed into one Keep frame: three full chunks and the salt stay under 65535 bytes. */
#define SLICE (3 * SV_SS_CHUNK_MAX)

/* One Mux.Cool session: its Shadowsocks stream. */
typedef struct ssm_sub {
    uint16_t id;
    bool opened;      /* the runtime was given SV_FX_OPEN: it holds a sub-flow */
    sv_ss_tcp ss;
    uint8_t *carry;   /* CARRY_CAP bytes once a chunk straddled frames, else NULL */
    size_t carry_len; /* an incomplete chunk's bytes (never a whole one) */
    unsigned trials;  /* keys its trial decryptions tried, not yet told in an effect */
} ssm_sub;

typedef struct ssm_conn {
    enum sv_ss_cipher cipher;
    sv_mux *mux;       /* allocated by the first feed() */
    int user;          /* the connection's user (key index), -1 until a session opened */
    bool failed;
    bool answered;     /* scan_result() came: more() until the next feed() */
    uint16_t scanning; /* the session whose SV_FX_SCAN waits for scan_result() */
    sv_ss_guide guide; /* set_guide()'s: how a session walks the keyring before the connection
                          authenticated (index order, no limit without it) */
    ssm_sub **subs;
    unsigned n_subs, cap_subs;
    ssm_sub *spent;    /* the session whose carry the last feed() read from (effects may point
                          there until the next feed()) */
    uint8_t *stale;    /* that carry, when the session ended since: freed by the next feed() */
    uint8_t ends[SV_EFFECTS_MAX][SV_MUX_END_LEN]; /* End frames of this feed(), by effect slot */
} ssm_conn;

static int ssm_creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                         sv_error *err)
{
    return sv_shadowsocks_ops.creds_new(in, users, out, err);
}

static void ssm_creds_free(void *creds) { sv_shadowsocks_ops.creds_free(creds); }

static void ssm_attach_replay(void *creds, sv_replay *filter)
{
    sv_proto_replay(&sv_shadowsocks_ops)->attach_replay(creds, filter);
}

static int ssm_init(void *state, const sv_inbound_spec *in)
{
    ssm_conn *st = state;
    st->cipher = in->ss_cipher;
    st->user = -1;
    st->guide = sv_ss_guide_make(-1, NULL, 0);
    return 0;
}

/* the runtime's guide (the IP's hint, the worker's order, a limit past which the
 * session's first chunk is scanned off the loop) for the sessions before authentication. */
static void ssm_set_guide(void *state, int hint, struct sv_order *order, unsigned limit)
{
    ((ssm_conn *)state)->guide = sv_ss_guide_make(hint, order, limit);
}

static int ssm_scan(const void *creds, const uint8_t *in, size_t n, unsigned *trials)
{
    return sv_ss_creds_scan(creds, in, n, trials);
}

/* The keys session @p s tried that no effect told yet, now told. */
static unsigned take_trials(ssm_sub *s)
{
    unsigned t = s->trials;
    s->trials = 0;
    return t;
}

static void drop_sub(ssm_conn *st, ssm_sub *s)
{
    for (unsigned i = 0; i < st->n_subs; i++)
        if (st->subs[i] == s) {
            st->subs[i] = st->subs[--st->n_subs];
            break;
        }
    if (st->spent == s) { /* the runtime may not have read its data yet */
        free(st->stale);
        st->stale = s->carry;
        s->carry = NULL;
        st->spent = NULL;
    }
    sv_ss_tcp_deinit(&s->ss);
    free(s->carry);
    free(s);
}

static void ssm_deinit(void *state)
{
    ssm_conn *st = state;
    while (st->n_subs > 0)
        drop_sub(st, st->subs[st->n_subs - 1]);
    free(st->subs);
    st->subs = NULL;
    free(st->stale);
    st->stale = NULL;
    st->cap_subs = 0;
    sv_mux_free(st->mux);
    st->mux = NULL;
}

static ssm_sub *find(const ssm_conn *st, uint32_t id)
{
    for (unsigned i = 0; i < st->n_subs; i++)
        if (st->subs[i]->id == id)
            return st->subs[i];
    return NULL;
}

/* The scan's answer goes to the session that asked (no feed() came since). */
static void ssm_scan_result(void *state, int user)
{
    ssm_conn *st = state;
    ssm_sub *s = find(st, st->scanning);
    if (s != NULL)
        sv_ss_tcp_scan_result(&s->ss, user);
    st->answered = true;
}

/* The answer waits for the next feed (with the same bytes, which the runtime kept). */
static bool ssm_more(const void *state) { return ((const ssm_conn *)state)->answered; }

/* The connection fails: nothing more is read. The effect tells the keys every session tried
 * that no effect told. */
static ssize_t fail(ssm_conn *st, int error, sv_effects *fx)
{
    st->failed = true;
    sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
    if (e != NULL) {
        e->error = error;
        e->policy = st->user < 0 ? SV_PROBE_DRAIN : SV_PROBE_CLOSE;
        for (unsigned i = 0; i < st->n_subs; i++)
            e->trials += take_trials(st->subs[i]);
    }
    return error;
}

/* Tell the client session @p id ended (nothing is answered before the connection
 * authenticated: a probe learns nothing); the effect tells @p trials keys tried. */
static void push_end(ssm_conn *st, uint16_t id, bool error, unsigned trials, sv_effects *fx)
{
    if (st->user < 0)
        return;
    uint8_t *f = st->ends[fx->n];
    sv_mux_frame_end(id, error, f);
    sv_effect *e = sv_effects_push(fx, SV_FX_TO_CLIENT);
    e->data = f;
    e->len = SV_MUX_END_LEN;
    e->trials = trials;
}

/* A New for a TCP session. @return 0 or a negative errno (the connection fails). */
static int new_sub(ssm_conn *st, uint16_t id)
{
    if (st->user < 0 && st->n_subs >= SV_SS_MUX_UNAUTH_MAX)
        return -EPROTO;
    if (st->n_subs == st->cap_subs) {
        unsigned cap = st->cap_subs ? st->cap_subs * 2 : 4;
        ssm_sub **grown = realloc(st->subs, cap * sizeof *grown);
        if (grown == NULL)
            return -ENOMEM;
        st->subs = grown;
        st->cap_subs = cap;
    }
    ssm_sub *s = calloc(1, sizeof *s);
    if (s == NULL)
        return -ENOMEM;
    if (sv_ss_tcp_init(&s->ss, st->cipher) != 0) {
        sv_ss_tcp_deinit(&s->ss);
        free(s);
        return -ENOMEM;
    }
    s->id = id;
    st->subs[st->n_subs++] = s;
    return 0;
}

/* The server ends session @p s: the runtime's sub-flow closes, the client gets End (error). */
static void end_sub(ssm_conn *st, ssm_sub *s, sv_effects *fx)
{
    uint16_t id = s->id;
    push_end(st, id, true, take_trials(s), fx);
    if (s->opened)
        sv_effects_push(fx, SV_FX_CLOSE)->stream = id;
    sv_mux_session_gone(st->mux, id);
    drop_sub(st, s);
}

/*
 * One Shadowsocks step of session @p s over @p p: its effects appended to @p fx. A session's
 * first chunk walks the keyring as the runtime's guide says before the connection authenticated
 * (past its limit: SV_FX_SCAN of the salt and length chunk at @p p); after, it tries the
 * connection's user's key alone (one trial, never a scan).
 * @return bytes consumed (0: need more), -EAGAIN when SV_FX_SCAN was given (nothing consumed),
 *         -EPERM for another user than the connection's, or the core's error.
 */
static ssize_t chunk(ssm_conn *st, const void *creds, ssm_sub *s, uint8_t *p, size_t n,
                     sv_effects *fx)
{
    sv_ss_out out = {0};
    bool auth = s->ss.state == SV_SS_AUTH;
    if (auth && !s->ss.scanned) {
        bool first = st->user < 0;
        s->ss.guide.hint = first ? st->guide.hint : st->user;
        s->ss.guide.order = first ? st->guide.order : NULL;
        s->ss.guide.limit = first ? st->guide.limit : 1;
    }
    ssize_t r = sv_ss_tcp_feed(&s->ss, sv_ss_creds_ring(creds), sv_ss_creds_replay(creds), p, n,
                               &out);
    if (auth && r != 0) /* a trial ran (the check of a scan's answer counts none) */
        s->trials += s->ss.guide.trials;
    if (r > 0 && st->user < 0 && s->ss.user >= 0)
        st->guide.hint = s->ss.user; /* found before its header came: the next first chunk of
                                        another session tries that key first, never a 2nd scan */
    if (r == -EAGAIN && st->user >= 0)
        return -EPERM; /* the connection's user's key does not open it */
    if (r == -EAGAIN) {
        sv_effect *e = sv_effects_push(fx, SV_FX_SCAN);
        e->data = p;
        e->len = sv_ss_key_len(st->cipher) + 2 + SV_SS_TAG;
        e->trials = take_trials(s);
        st->scanning = s->id;
        return -EAGAIN;
    }
    if (r <= 0)
        return r;
    /* the connection authenticates with its first session's header, not its first length
     * chunk, so that where the input is cut does not change what a failure does */
    if (out.open && st->user < 0) {
        st->user = s->ss.user;
        sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
        e->principal = st->user;
        e->multiplexed = true;
        e->trials = take_trials(s);
    } else if (out.open && s->ss.user != st->user) {
        return -EPERM;
    }
    if (out.open) {
        sv_effect *e = sv_effects_push(fx, SV_FX_OPEN);
        e->trials = take_trials(s);
        e->stream = s->id;
        e->dest = out.dest;
        e->dest.network = SV_NET_TCP;
        s->opened = true;
    }
    if (out.len > 0) {
        sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
        e->stream = s->id;
        e->data = out.data;
        e->len = out.len;
    }
    return r;
}

/* Session @p s failed with @p error: before the connection authenticated the connection fails
 * (negative return), after only the session ends. @return @p taken or the error. */
static ssize_t sub_failed(ssm_conn *st, ssm_sub *s, int error, size_t taken, sv_effects *fx)
{
    if (st->user < 0)
        return fail(st, error, fx);
    end_sub(st, s, fx);
    return (ssize_t)taken;
}

/*
 * A piece of session @p s's data (@p d, @p len bytes, inside the feed buffer). With a carry, the
 * piece completes it (the caller gave at most what fits) and the session's steps run in the carry;
 * their data points there, so feed() returns after (*@p stop) and the carry is reused or freed
 * only by a later call (st->spent, st->stale). Without, the steps run in place and an incomplete
 * tail goes to the carry.
 * @return bytes of the piece taken (the caller gives the rest back to the decoder), or a
 *         negative errno when the connection failed.
 */
static ssize_t sub_data(ssm_conn *st, const void *creds, ssm_sub *s, uint8_t *d, size_t len,
                        sv_effects *fx, bool *stop)
{
    if (s->carry_len > 0) {
        size_t old = s->carry_len, all = old + len, off = 0;
        memcpy(s->carry + old, d, len);
        s->carry_len = all;
        st->spent = s;
        *stop = true;
        while (off < all && fx->n + ROOM <= SV_EFFECTS_MAX) {
            ssize_t r = chunk(st, creds, s, s->carry + off, all - off, fx);
            if (r == -EAGAIN) { /* the session's first chunk (off is 0): the piece given back */
                s->carry_len = old;
                return 0;
            }
            if (r < 0)
                return sub_failed(st, s, (int)r, len, fx);
            if (r == 0)
                break;
            off += (size_t)r;
        }
        if (off == 0)
            return all < CARRY_CAP ? (ssize_t)len : sub_failed(st, s, -EPROTO, len, fx);
        if (off < old) /* the carry never holds a whole chunk */
            return sub_failed(st, s, -EPROTO, len, fx);
        /* what is left is the piece's own tail: given back, taken in place next time */
        s->carry_len = 0;
        return (ssize_t)(len - (all - off));
    }
    size_t off = 0;
    while (off < len && fx->n + ROOM <= SV_EFFECTS_MAX) {
        ssize_t r = chunk(st, creds, s, d + off, len - off, fx);
        if (r == -EAGAIN) { /* a scan: the rest given back, read again with its answer */
            *stop = true;
            return (ssize_t)off;
        }
        if (r < 0)
            return sub_failed(st, s, (int)r, len, fx);
        if (r == 0) {
            if (len - off >= CARRY_CAP)
                return sub_failed(st, s, -EPROTO, len, fx);
            if (s->carry == NULL && (s->carry = malloc(CARRY_CAP)) == NULL)
                return fail(st, -ENOMEM, fx);
            memcpy(s->carry, d + off, len - off);
            s->carry_len = len - off;
            return (ssize_t)len;
        }
        off += (size_t)r;
    }
    return (ssize_t)off;
}

/* Append a copy of the decoder's End answer @p e (valid until the next step) for the client. */
static void relay_end(ssm_conn *st, const sv_effect *e, sv_effects *fx)
{
    if (st->user < 0 || e->len != SV_MUX_END_LEN)
        return;
    uint8_t *f = st->ends[fx->n];
    memcpy(f, e->data, SV_MUX_END_LEN);
    sv_effect *o = sv_effects_push(fx, SV_FX_TO_CLIENT);
    o->data = f;
    o->len = SV_MUX_END_LEN;
}

/*
 * Apply one decoder effect @p e; @p piece_at is where its bytes start in the feed buffer.
 * @return bytes of a data piece to give back to the decoder (>= 0), or a negative errno when
 * the connection failed.
 */
static ssize_t apply_mux(ssm_conn *st, const void *creds, sv_effect *e, sv_effects *fx,
                         bool *stop)
{
    ssm_sub *s = find(st, e->stream);
    switch (e->kind) {
    case SV_FX_OPEN:
        if (e->dest.network == SV_NET_TCP) {
            int rc = new_sub(st, (uint16_t)e->stream);
            return rc < 0 ? fail(st, rc, fx) : 0;
        }
        sv_mux_session_gone(st->mux, (uint16_t)e->stream); /* no UDP inside v2ray-plugin */
        push_end(st, (uint16_t)e->stream, true, 0, fx);
        return 0;
    case SV_FX_TO_OUTBOUND: {
        if (s == NULL)
            return 0;
        ssize_t took = sub_data(st, creds, s, e->data, e->len, fx, stop);
        return took < 0 ? took : (ssize_t)(e->len - (size_t)took);
    }
    case SV_FX_CLOSE: /* the client's End: its sub-flow ends */
        if (s != NULL) {
            if (s->opened)
                sv_effects_push(fx, SV_FX_CLOSE)->stream = s->id;
            drop_sub(st, s);
        }
        return 0;
    case SV_FX_TO_CLIENT:
        relay_end(st, e, fx);
        return 0;
    default: /* a datagram of a session already ended */
        return 0;
    }
}

static ssize_t ssm_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    ssm_conn *st = state;
    fx->n = 0;
    st->answered = false;
    if (st->failed)
        return fail(st, -EPROTO, fx);
    free(st->stale);
    st->stale = NULL;
    if (st->spent != NULL && st->spent->carry_len == 0) {
        free(st->spent->carry); /* an idle session holds no buffer */
        st->spent->carry = NULL;
    }
    st->spent = NULL;
    if (st->mux == NULL && (st->mux = sv_mux_new()) == NULL)
        return fail(st, -ENOMEM, fx);
    size_t at = 0;
    bool stop = false;
    while (!stop && at < n && fx->n + ROOM <= SV_EFFECTS_MAX) {
        uint16_t id = 0;
        size_t lim = n - at;
        if (sv_mux_data_left(st->mux, &id) > 0) {
            const ssm_sub *s = find(st, id);
            if (s != NULL && s->carry_len > 0 && lim > CARRY_CAP - s->carry_len)
                lim = CARRY_CAP - s->carry_len; /* what fits the carry */
        }
        sv_effects m = {.n = 0};
        ssize_t k = sv_mux_step(st->mux, p + at, lim, &m);
        if (k < 0)
            return fail(st, (int)k, fx);
        if (k == 0)
            break;
        at += (size_t)k;
        for (unsigned i = 0; i < m.n; i++) {
            ssize_t back = apply_mux(st, creds, &m.v[i], fx, &stop);
            if (back < 0)
                return back;
            if (back > 0) { /* a data piece is a step's only effect */
                sv_mux_unread(st->mux, (size_t)back);
                at -= (size_t)back;
            }
        }
    }
    return (ssize_t)at;
}

static size_t ssm_frame_max(size_t len)
{
    size_t slices = len == 0 ? 1 : (len + SLICE - 1) / SLICE;
    return SV_SS_SEALED_MAX(len) + slices * (SV_MUX_HEAD_LEN + SV_SS_SALT_MAX);
}

/* Seal in slices of at most SLICE bytes, each slice's chunks one Keep frame. */
static ssize_t ssm_frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                         size_t len, uint8_t *out, size_t cap)
{
    ssm_conn *st = state;
    if (cap < ssm_frame_max(len))
        return -EMSGSIZE;
    ssm_sub *s = find(st, stream);
    if (s == NULL || s->ss.user < 0)
        return 0; /* the stream ended here: its outbound's last bytes have nowhere to go */
    size_t at = 0;
    for (size_t off = 0; off < len;) {
        size_t k = len - off < SLICE ? len - off : SLICE;
        ssize_t w = sv_ss_tcp_seal_to(&s->ss, sv_ss_creds_ring(creds), in + off, k,
                                      out + at + SV_MUX_HEAD_LEN, cap - at - SV_MUX_HEAD_LEN);
        if (w < 0)
            return w;
        sv_mux_frame_head(s->id, (size_t)w, out + at);
        at += SV_MUX_HEAD_LEN + (size_t)w;
        off += k;
    }
    return (ssize_t)at;
}

static ssize_t ssm_frame_end(void *state, const void *creds, uint32_t stream, bool abort,
                             uint8_t *out, size_t cap)
{
    ssm_conn *st = state;
    (void)creds;
    ssm_sub *s = find(st, stream);
    if (s == NULL)
        return 0;
    if (cap < SV_MUX_END_LEN)
        return -EMSGSIZE;
    uint16_t id = s->id;
    sv_mux_session_gone(st->mux, id);
    drop_sub(st, s);
    return (ssize_t)sv_mux_frame_end(id, abort, out);
}

static const sv_proto_ext_replay ssm_replay = {.attach_replay = ssm_attach_replay};
static const sv_proto_ext_guide ssm_guide = {
    .set_guide = ssm_set_guide,
    .scan = ssm_scan,
    .scan_result = ssm_scan_result,
};
static const sv_proto_ext_backlog ssm_backlog = {.more = ssm_more};
static const sv_proto_ext_end ssm_end = {.frame_end = ssm_frame_end};

const sv_proto_ops sv_ss_mux_ops = {
    .name = "shadowsocks",
    .creds_new = ssm_creds_new,
    .creds_free = ssm_creds_free,
    .state_size = sizeof(ssm_conn),
    .init = ssm_init,
    .deinit = ssm_deinit,
    .feed = ssm_feed,
    .carry_max = SV_MUX_CARRY_MAX,
    .frame = ssm_frame,
    .frame_max = ssm_frame_max,
    .ext =
        {
            [SV_PROTO_CAP_REPLAY] = &ssm_replay,
            [SV_PROTO_CAP_GUIDE] = &ssm_guide,
            [SV_PROTO_CAP_BACKLOG] = &ssm_backlog,
            [SV_PROTO_CAP_END] = &ssm_end,
        },
};
