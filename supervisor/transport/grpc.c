/*
 * The gRPC transport as a core that wraps the inbound's core (PROTOCOLS-2.md §3; see
 * grpc.h for why it sits at the core seam). HTTP/2 is nghttp2 over its memory API: feed() hands
 * it the client's bytes, every stream's gun data is decoded into that stream's input buffer and
 * fed to the stream's own inner core; the inner effects are passed up tagged with the HTTP/2
 * stream ID, the inner core's bytes for the client are gun-framed into the stream's response.
 * Whatever nghttp2 has to send (settings, acks, window updates, responses, trailers) leaves as
 * SV_FX_TO_CLIENT from feed() or as the output of frame() / frame_end(); a response's DATA
 * frames are written by on_send_data straight from the stream's queue (NGHTTP2_DATA_FLAG_NO_COPY:
 * no copy through nghttp2's own buffer).
 */
#include "config.h"

#include "supervisor/transport/grpc.h"
#include "supervisor/util/digits.h"
#include "supervisor/util/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

/* ---- gun messages --------------------------------------------------------------------------- */

enum { GUN_PREFIX = 0, GUN_TAG, GUN_LEN, GUN_DATA, GUN_DEAD };

ssize_t sv_gun_decode(sv_gun_decoder *d, const uint8_t *in, size_t n, uint8_t *out)
{
    size_t w = 0, i = 0;
    while (i < n) {
        switch (d->phase) {
        case GUN_PREFIX:
            d->prefix[d->got++] = in[i++];
            if (d->got < 5)
                break;
            d->got = 0;
            d->msg_left = (uint32_t)d->prefix[1] << 24 | (uint32_t)d->prefix[2] << 16 |
                          (uint32_t)d->prefix[3] << 8 | d->prefix[4];
            if (d->prefix[0] != 0 || d->msg_left > SV_GUN_MSG_MAX)
                goto bad;
            if (d->msg_left > 0)
                d->phase = GUN_TAG;
            break;
        case GUN_TAG:
            if (in[i++] != 0x0A) /* field 1, length-delimited: Hunk.data, MultiHunk.data */
                goto bad;
            d->msg_left--;
            d->field_left = 0;
            d->got = 0;
            d->phase = GUN_LEN;
            break;
        case GUN_LEN: {
            uint8_t b = in[i++];
            if (d->msg_left == 0 || d->got >= 5)
                goto bad;
            d->msg_left--;
            d->field_left |= (uint64_t)(b & 0x7F) << (7 * d->got++);
            if (b & 0x80)
                break;
            d->got = 0; /* counts prefix bytes again once the message ends */
            if (d->field_left > d->msg_left)
                goto bad;
            d->phase = d->field_left > 0 ? GUN_DATA : d->msg_left > 0 ? GUN_TAG : GUN_PREFIX;
            break;
        }
        case GUN_DATA: {
            size_t k = n - i;
            if (k > d->field_left)
                k = (size_t)d->field_left;
            memmove(out + w, in + i, k);
            w += k;
            i += k;
            d->field_left -= k;
            d->msg_left -= (uint32_t)k;
            if (d->field_left == 0)
                d->phase = d->msg_left > 0 ? GUN_TAG : GUN_PREFIX;
            break;
        }
        default:
            return -EPROTO;
        }
    }
    return (ssize_t)w;
bad:
    d->phase = GUN_DEAD;
    return -EPROTO;
}

size_t sv_gun_header(size_t len, uint8_t hdr[SV_GUN_HDR_MAX])
{
    uint8_t v[5];
    size_t vn = 0;
    size_t x = len;
    do {
        v[vn] = (uint8_t)(x & 0x7F);
        x >>= 7;
        if (x != 0)
            v[vn] |= 0x80;
        vn++;
    } while (x != 0);
    size_t msg = 1 + vn + len;
    hdr[0] = 0;
    hdr[1] = (uint8_t)(msg >> 24);
    hdr[2] = (uint8_t)(msg >> 16);
    hdr[3] = (uint8_t)(msg >> 8);
    hdr[4] = (uint8_t)msg;
    hdr[5] = 0x0A;
    memcpy(hdr + 6, v, vn);
    return 6 + vn;
}

/* ---- credentials: the inner core's table and the served paths ------------------------------- */

#define GRPC_PATHS 2

typedef struct grpc_creds {
    const sv_proto_ops *inner;
    void *inner_creds;
    char *prefix;           /* "/<service>/" as configured (unescaped) */
    char *name[GRPC_PATHS]; /* the stream names: "Tun", "TunMulti" or a custom path's */
} grpc_creds;

static void grpc_creds_free(void *p)
{
    grpc_creds *cr = p;
    if (cr == NULL)
        return;
    if (cr->inner_creds != NULL)
        cr->inner->creds_free(cr->inner_creds);
    free(cr->prefix);
    for (int i = 0; i < GRPC_PATHS; i++)
        free(cr->name[i]);
    free(cr);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

int sv_grpc_creds_new(const sv_proto_ops *inner, const char *service, const sv_inbound_spec *in,
                      const sv_user_set *users, void **out, sv_error *err)
{
    grpc_creds *cr = calloc(1, sizeof *cr);
    if (cr == NULL)
        return -ENOMEM;
    cr->inner = inner;
    size_t len = strlen(service);
    if (service[0] == '/') { /* custom: "/a/b/t|m" serves /a/b/t and /a/b/m (§3.1) */
        const char *last = strrchr(service, '/');
        const char *bar = strchr(last, '|');
        cr->prefix = dup_n(service, (size_t)(last + 1 - service));
        cr->name[0] = dup_n(last + 1, bar != NULL ? (size_t)(bar - last - 1) : strlen(last + 1));
        cr->name[1] = bar != NULL ? strdup(bar + 1) : strdup(cr->name[0] ? cr->name[0] : "");
    } else {
        cr->prefix = malloc(len + 3);
        if (cr->prefix != NULL) {
            cr->prefix[0] = '/';
            memcpy(cr->prefix + 1, service, len);
            memcpy(cr->prefix + 1 + len, "/", 2);
        }
        cr->name[0] = strdup("Tun");
        cr->name[1] = strdup("TunMulti");
    }
    if (cr->prefix == NULL || cr->name[0] == NULL || cr->name[1] == NULL) {
        grpc_creds_free(cr);
        return -ENOMEM;
    }
    int rc = inner->creds_new(in, users, &cr->inner_creds, err);
    if (rc != 0) {
        cr->inner_creds = NULL;
        grpc_creds_free(cr);
        return rc;
    }
    *out = cr;
    return 0;
}

static int grpc_creds_new_direct(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                                 sv_error *err)
{
    (void)users;
    (void)out;
    return sv_error_set(err, -EINVAL, "inbound %s: the grpc core is built by sv_grpc_creds_new",
                        in->tag);
}

/* Does the request path @p p (@p n bytes, percent-escapes decoded on the fly, so that the raw
 * and the escaped forms of a name both match, §3.1) equal prefix + one of the names? */
static bool path_served(const grpc_creds *cr, const uint8_t *p, size_t n)
{
    char dec[2 * SV_GRPC_SERVICE_MAX + 16];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k + 1 >= sizeof dec)
            return false;
        int hi, lo;
        if (p[i] == '%' && i + 2 < n && (hi = sv_hex_digit(p[i + 1])) >= 0 && (lo = sv_hex_digit(p[i + 2])) >= 0) {
            dec[k++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            dec[k++] = (char)p[i];
        }
    }
    dec[k] = '\0';
    size_t pl = strlen(cr->prefix);
    if (k <= pl || memcmp(dec, cr->prefix, pl) != 0)
        return false;
    for (int i = 0; i < GRPC_PATHS; i++)
        if (strcmp(dec + pl, cr->name[i]) == 0)
            return true;
    return false;
}

/* ---- per-connection state ------------------------------------------------------------------- */

/* Bytes of a stream's response queued beyond what HTTP/2 flow control lets go: past this the
 * stream is reset (its client stopped reading it; the others go on). */
#define GRPC_QUEUE_MAX (4u * 1024u * 1024u)
/* HTTP/2 settings of ours: streams at once, receive windows (a stream's, the connection's). */
#define GRPC_STREAMS_MAX 100 /* < SV_MUX_SESSIONS_MAX: closed streams' sub-flows linger */
/* Streams we keep: the open ones and closed ones not yet swept. */
#define GRPC_STREAMS_CAP (GRPC_STREAMS_MAX + 64)
/* Effects held for the next feed() when one step produced more than fit: one inner feed()'s
 * list, and the CLOSE of every session and stream at most (a step starts only when none is
 * held, see stream_run). */
#define GRPC_DEFER_MAX (SV_EFFECTS_MAX + GRPC_STREAMS_MAX + GRPC_STREAMS_CAP)
/* Receive windows: nghttp2 sends a WINDOW_UPDATE once half a window was received (and every
 * byte received counts as taken: the runtime's own bound is the TCP read it stops), so their
 * size sets how often one leaves, each a record and a write of its own towards the client;
 * 512 KiB meant one per 256 KiB of upload. Memory is not theirs to bound: a stream's input
 * holds at most one client read, as before. */
#define GRPC_STREAM_WINDOW (8 * 1024 * 1024)
#define GRPC_CONN_WINDOW (16 * 1024 * 1024)
/* Most data bytes of one Mux.Cool Keep frame towards the client (see grpc_frame). */
#define GRPC_MUX_DATA_MAX 8192u

static const uint8_t h2_preface[24] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

typedef struct grpc_stream {
    int32_t id;
    bool path_ok, ctype_ok, answered, dead, authed, opened, told_close, ended, finished;
    bool told_half;         /* the runtime was told of the client's half-close */
    bool dirty;             /* work for stream_run: new input, or the end below */
    bool ran;               /* its inner core was fed in this feed() (once at most) */
    bool inner_full;        /* the inner core's last list came back full: it may hold more */
    bool client_end;        /* the client's END_STREAM came */
    bool gone;              /* nghttp2 closed it (reset, or both ends done) */
    bool mux;               /* its inner core said Mux.Cool: its sessions are the sub-flows */
    sv_gun_decoder dec;
    uint8_t *in;            /* decoded data not yet consumed by the inner core */
    size_t in_len, in_off, in_cap;
    uint8_t *q;             /* gun-framed response bytes nghttp2 has not taken */
    size_t q_len, q_off;
    _Alignas(max_align_t) uint8_t inner[];
} grpc_stream;

/* A Mux.Cool session inside a stream (VLESS / VMess command 3 over gRPC: Xray's XUDP): the
 * runtime knows it as sub-flow `id`, an even number, since a client's HTTP/2 stream IDs are
 * odd (RFC 9113 §5.1.1), so it never meets a plain stream's sub-flow. */
typedef struct grpc_sub {
    uint32_t id;
    int32_t h2;       /* its HTTP/2 stream */
    uint16_t session; /* its Mux.Cool session ID, the inner core's stream key */
} grpc_sub;

typedef struct grpc_state {
    const sv_inbound_spec *in;
    const grpc_creds *cr;
    nghttp2_session *h2;
    bool preface_ok, failed, have_time;
    bool again; /* feed() wants to be called before more bytes come (sv_proto_ext_backlog.more) */
    int principal; /* -1 until the first stream authenticates */
    int64_t now;
    grpc_stream **streams;
    unsigned n_streams;
    uintptr_t recv_at, recv_end; /* the bytes nghttp2 reads in this feed(), or 0 */
    uint8_t *out; /* nghttp2 output not yet handed out: out[out_off .. out_len) */
    size_t out_off, out_len, out_cap;
    sv_effects *fx;                       /* effects of the current feed(), or NULL */
    sv_effect *defer;                     /* effects that did not fit the last feed() (made on
                                             first use, GRPC_DEFER_MAX) */
    unsigned n_defer;
    grpc_sub *subs;   /* open Mux.Cool sessions of every stream (made on first use,
                         GRPC_STREAMS_MAX) */
    unsigned n_subs;
    uint32_t next_sub; /* the last sub-flow ID given to a session (even) */
} grpc_state;

static grpc_stream *stream_of(grpc_state *st, int32_t id)
{
    for (unsigned i = 0; i < st->n_streams; i++)
        if (st->streams[i]->id == id)
            return st->streams[i];
    return NULL;
}

static void stream_free(grpc_state *st, grpc_stream *s)
{
    st->cr->inner->deinit(s->inner);
    free(s->in);
    free(s->q);
    free(s);
}

/* Forget the streams nghttp2 closed and the input the inner cores consumed (not while
 * deferred effects may point into those buffers). */
static void streams_sweep(grpc_state *st)
{
    if (st->n_defer > 0)
        return;
    for (unsigned i = 0; i < st->n_streams;) {
        grpc_stream *s = st->streams[i];
        if (s->in != NULL && s->in_off == s->in_len) { /* an idle stream holds no buffer */
            free(s->in);
            s->in = NULL;
            s->in_off = s->in_len = s->in_cap = 0;
        }
        if (s->finished) {
            st->streams[i] = st->streams[--st->n_streams];
            stream_free(st, s);
        } else {
            i++;
        }
    }
}

static int grpc_init(void *state, const sv_inbound_spec *in)
{
    grpc_state *st = state;
    st->in = in;
    st->principal = -1;
    return 0;
}

static void grpc_deinit(void *state)
{
    grpc_state *st = state;
    if (st->cr != NULL)
        for (unsigned i = 0; i < st->n_streams; i++)
            stream_free(st, st->streams[i]);
    free(st->streams);
    st->streams = NULL;
    st->n_streams = 0;
    nghttp2_session_del(st->h2);
    st->h2 = NULL;
    free(st->out);
    st->out = NULL;
    free(st->defer);
    st->defer = NULL;
    free(st->subs);
    st->subs = NULL;
    st->n_subs = 0;
}

static void grpc_set_time(void *state, int64_t unix_s)
{
    grpc_state *st = state;
    st->now = unix_s;
    st->have_time = true;
}

/* An effect for the runtime: into this feed()'s list while it has room (one slot kept for the
 * HTTP/2 output), else held for the next call. @return false when even that is full. */
static bool push(grpc_state *st, const sv_effect *e)
{
    if (st->fx != NULL && st->fx->n + 1 < SV_EFFECTS_MAX) {
        st->fx->v[st->fx->n++] = *e;
        return true;
    }
    if (st->n_defer >= GRPC_DEFER_MAX)
        return false;
    if (st->defer == NULL && (st->defer = malloc(GRPC_DEFER_MAX * sizeof *st->defer)) == NULL)
        return false;
    st->defer[st->n_defer++] = *e;
    return true;
}

/* The stream ends towards the runtime (its sub-flow closes, or every Mux.Cool session it
 * carries), once; with @p half, a plain stream's client ended only its direction (the
 * sub-flow's outbound is half-closed and its download goes on: PROTOCOLS-2.md §3.3). */
static void tell_close(grpc_state *st, grpc_stream *s, bool half)
{
    if (s->mux) {
        for (unsigned i = 0; i < st->n_subs;) {
            if (st->subs[i].h2 != s->id) {
                i++;
                continue;
            }
            sv_effect e = {.kind = SV_FX_CLOSE, .stream = st->subs[i].id};
            if (!push(st, &e))
                st->failed = true;
            st->subs[i] = st->subs[--st->n_subs];
        }
        s->told_close = true;
        return;
    }
    if (!s->opened || s->told_close || (half && s->told_half))
        return;
    if (half)
        s->told_half = true;
    else
        s->told_close = true;
    sv_effect e = {.kind = SV_FX_CLOSE, .stream = (uint32_t)s->id, .half_close = half};
    if (!push(st, &e))
        st->failed = true;
}

/* Drop a stream that failed (inner error, another user, overflow): RST_STREAM with @p code,
 * its sub-flow ends. Said at debug level with @p why; no line at info
 * (refused without a log line per attempt). */
static void stream_reset(grpc_state *st, grpc_stream *s, uint32_t code, const char *why)
{
    if (s->dead)
        return;
    SV_LOG(SV_LOG_DEBUG, "sv.grpc", "gRPC stream %d reset (%s): %s", (int)s->id,
           nghttp2_http2_strerror(code), why);
    s->dead = true;
    s->in_off = s->in_len; /* dropped; freed by streams_sweep(): effects being applied (or
                              deferred) may still point into it */
    tell_close(st, s, false);
    if (!s->ended) {
        s->ended = true;
        nghttp2_submit_rst_stream(st->h2, NGHTTP2_FLAG_NONE, s->id, code);
    }
}

/* Queue @p n bytes of the inner core for the client as one Hunk on stream @p s (never an empty
 * message, §3.2). @return false when the stream was reset (its queue overflowed). */
static bool stream_send(grpc_state *st, grpc_stream *s, const uint8_t *p, size_t n)
{
    if (n == 0 || s->dead || s->ended)
        return true;
    size_t need = s->q_len + SV_GUN_HDR_MAX + n;
    if (need - s->q_off > GRPC_QUEUE_MAX) {
        stream_reset(st, s, NGHTTP2_FLOW_CONTROL_ERROR,
                     "its response queue passed GRPC_QUEUE_MAX (the client does not read it)");
        return false;
    }
    if (s->q_off > 0) { /* slide the unsent part to the front before growing */
        memmove(s->q, s->q + s->q_off, s->q_len - s->q_off);
        s->q_len -= s->q_off;
        s->q_off = 0;
        need = s->q_len + SV_GUN_HDR_MAX + n;
    }
    uint8_t *q = realloc(s->q, need);
    if (q == NULL) {
        stream_reset(st, s, NGHTTP2_INTERNAL_ERROR,
                     "no memory for its response");
        return false;
    }
    s->q = q;
    s->q_len += sv_gun_header(n, s->q + s->q_len);
    memcpy(s->q + s->q_len, p, n);
    s->q_len += n;
    nghttp2_session_resume_data(st->h2, s->id);
    return true;
}

/* The open Mux.Cool session @p session of stream @p h2, or NULL. */
static grpc_sub *sub_of_session(grpc_state *st, int32_t h2, uint32_t session)
{
    for (unsigned i = 0; i < st->n_subs; i++)
        if (st->subs[i].h2 == h2 && st->subs[i].session == session)
            return &st->subs[i];
    return NULL;
}

/* The open Mux.Cool session the runtime knows as sub-flow @p id, or NULL. */
static grpc_sub *sub_of_id(grpc_state *st, uint32_t id)
{
    for (unsigned i = 0; i < st->n_subs; i++)
        if (st->subs[i].id == id)
            return &st->subs[i];
    return NULL;
}

/* Sub-flows the runtime holds open for this connection: plain streams and sessions. */
static unsigned subflows_open(const grpc_state *st)
{
    unsigned n = st->n_subs;
    for (unsigned i = 0; i < st->n_streams; i++) {
        const grpc_stream *s = st->streams[i];
        n += !s->mux && s->opened && !s->told_close;
    }
    return n;
}

/* A Mux.Cool effect of stream @p s's inner core (stream = session ID) as the runtime's, on the
 * session's own sub-flow. A session beyond GRPC_STREAMS_MAX sub-flows gets its End frame
 * (abort) and its data is dropped, as the decoder treats one beyond its own bound. */
static void map_session(grpc_state *st, grpc_stream *s, sv_effect e)
{
    grpc_sub *sub = sub_of_session(st, s->id, e.stream);
    if (e.kind == SV_FX_OPEN) {
        if (st->subs == NULL)
            st->subs = malloc(GRPC_STREAMS_MAX * sizeof *st->subs);
        if (sub != NULL) { /* the decoder forgot it, we did not: should not happen */
            stream_reset(st, s, NGHTTP2_INTERNAL_ERROR,
                         "a Mux.Cool session opened twice");
            return;
        }
        if (st->subs == NULL || subflows_open(st) >= GRPC_STREAMS_MAX) {
            uint8_t end[64];
            const sv_proto_ops *inner = st->cr->inner;
            const sv_proto_ext_end *x = sv_proto_end(inner);
            ssize_t k = x == NULL ? 0
                      : x->frame_end(s->inner, st->cr->inner_creds, e.stream, true, end, sizeof end);
            if (k > 0)
                stream_send(st, s, end, (size_t)k);
            return;
        }
        st->next_sub += 2;
        if (st->next_sub == 0) /* after 2^31 sessions */
            st->next_sub = 2;
        sub = &st->subs[st->n_subs++];
        *sub = (grpc_sub){.id = st->next_sub, .h2 = s->id, .session = (uint16_t)e.stream};
    }
    if (sub == NULL) /* a refused session's bytes */
        return;
    e.stream = sub->id;
    if (e.kind == SV_FX_CLOSE) /* the client's End: the runtime's sub-flow drains and ends */
        *sub = st->subs[--st->n_subs];
    if (!push(st, &e))
        st->failed = true;
}

/* Map one inner feed()'s effects of stream @p s into the runtime's. */
static void map_effects(grpc_state *st, grpc_stream *s, const sv_effects *fx)
{
    for (unsigned i = 0; i < fx->n && !s->dead; i++) {
        sv_effect e = fx->v[i];
        if (s->mux && (e.kind == SV_FX_OPEN || e.kind == SV_FX_TO_OUTBOUND ||
                       e.kind == SV_FX_DATAGRAM || e.kind == SV_FX_CLOSE)) {
            map_session(st, s, e);
            continue;
        }
        e.stream = (uint32_t)s->id;
        switch (e.kind) {
        case SV_FX_AUTHENTICATED:
            if (st->principal >= 0 && e.principal != st->principal) {
                stream_reset(st, s, NGHTTP2_REFUSED_STREAM,
                             "another user than the connection's");
                break;
            }
            s->authed = true;
            s->mux = e.multiplexed;
            if (st->principal < 0) {
                st->principal = e.principal;
                e.multiplexed = true;
                if (!push(st, &e))
                    st->failed = true;
            }
            break;
        case SV_FX_OPEN:
            if (!s->authed || s->opened) {
                stream_reset(st, s, NGHTTP2_PROTOCOL_ERROR,
                             "an open before authentication, or a second one");
                break;
            }
            s->opened = true;
            /* fall through */
        case SV_FX_TO_OUTBOUND:
        case SV_FX_DATAGRAM:
            if (!s->opened)
                break;
            if (!push(st, &e))
                st->failed = true;
            break;
        case SV_FX_TO_CLIENT:
            stream_send(st, s, e.data, e.len);
            break;
        case SV_FX_CLOSE:
        case SV_FX_FINISH:
            tell_close(st, s, false);
            break;
        case SV_FX_SCAN:  /* an inner core is given no guide (set_guide), so never asks */
        case SV_FX_ERROR: /* this stream only: no fallback inside HTTP/2 */
            stream_reset(st, s, s->opened ? NGHTTP2_CANCEL : NGHTTP2_REFUSED_STREAM,
                         "its inner core refused it");
            break;
        }
    }
}

/* Feed stream @p s's pending input to its inner core, then act on the client's end of it or
 * nghttp2's. The inner core is fed once per feed() at most, and only when no effect is held:
 * its effects may point into its own state until its next call (VMess keeps the plaintext of
 * its Mux.Cool frames there); what is left waits in s->in, or in the inner core when its list
 * came back full, for the next feed() (sv_proto_ext_backlog.more). */
static void stream_run(grpc_state *st, grpc_stream *s)
{
    const sv_proto_ops *inner = st->cr->inner;
    if (!s->dead && (s->in_off < s->in_len || s->inner_full)) {
        if (st->n_defer > 0 || s->ran)
            return; /* still dirty */
        s->ran = true;
        sv_effects fx;
        static uint8_t none[1]; /* the input when the inner core only has more of its own */
        if (sv_proto_clock(inner) != NULL && !s->authed && st->have_time)
            sv_proto_clock(inner)->set_time(s->inner, st->now);
        ssize_t r = inner->feed(s->inner, st->cr->inner_creds,
                                s->in != NULL ? s->in + s->in_off : none, s->in_len - s->in_off,
                                &fx);
        s->inner_full = r >= 0 && fx.n + 3 > SV_EFFECTS_MAX; /* as the Mux.Cool decoder stops */
        map_effects(st, s, &fx);
        if (r < 0) {
            stream_reset(st, s, s->opened ? NGHTTP2_CANCEL : NGHTTP2_REFUSED_STREAM,
                         "its inner core failed");
        } else {
            s->in_off += (size_t)r;
            if (!s->dead && ((r > 0 && s->in_off < s->in_len) || s->inner_full))
                return; /* more next time */
        }
    }
    if (st->n_defer > 0 && (s->client_end || s->gone))
        return; /* its end after what is held */
    s->dirty = false;
    if (!s->dead && s->in_len - s->in_off > inner->carry_max)
        stream_reset(st, s, NGHTTP2_PROTOCOL_ERROR,
                     "more undecoded input than its inner core may carry");
    if (s->gone || (s->client_end && s->mux)) {
        /* the stream is gone, or the client is done with every session it carries: they end,
         * as for a Mux.Cool End, and so does the response (what is queued, then the trailers) */
        tell_close(st, s, false);
        if (s->answered && !s->dead && !s->ended) {
            s->ended = true;
            nghttp2_session_resume_data(st->h2, s->id);
        }
    } else if (s->client_end) {
        /* the client ended its direction: the outbound is half-closed, the download goes on
         * until it ends (frame_end: the trailers); one not opened yet ends here */
        tell_close(st, s, s->opened && !s->dead);
        if (!s->opened && s->answered && !s->dead && !s->ended) {
            s->ended = true;
            nghttp2_session_resume_data(st->h2, s->id);
        }
    }
    if (s->gone)
        s->dead = s->ended = s->finished = true;
}

/* Run every stream with work, in order, while no effect is held. */
static void streams_run(grpc_state *st)
{
    for (unsigned i = 0; i < st->n_streams && st->n_defer == 0; i++)
        if (st->streams[i]->dirty)
            stream_run(st, st->streams[i]);
}

/* Has feed() work left that needs no more client bytes? */
static bool backlog(const grpc_state *st)
{
    if (st->n_defer > 0)
        return true;
    for (unsigned i = 0; i < st->n_streams; i++)
        if (st->streams[i]->dirty)
            return true;
    return false;
}

/* ---- nghttp2 callbacks ---------------------------------------------------------------------- */

static ssize_t on_data_read(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    grpc_state *st = ud;
    grpc_stream *s = stream_of(st, id);
    (void)h2;
    (void)src;
    if (s == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t have = s->q_len - s->q_off;
    if (have == 0) {
        if (!s->ended)
            return NGHTTP2_ERR_DEFERRED;
        /* the outbound ended: trailers close the stream (§3.3) */
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        static const nghttp2_nv ok[] = {
            {(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1, NGHTTP2_NV_FLAG_NONE},
        };
        if (nghttp2_submit_trailer(st->h2, id, ok, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return 0;
    }
    (void)buf; /* on_send_data copies the bytes from s->q straight to the output */
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    return (ssize_t)(have < length ? have : length);
}

/* Room for @p k more bytes of output at st->out + st->out_len. @return false without memory. */
static bool out_room(grpc_state *st, size_t k)
{
    if (st->out_len + k <= st->out_cap)
        return true;
    size_t cap = st->out_cap ? st->out_cap : 16384;
    while (cap < st->out_len + k)
        cap *= 2;
    uint8_t *g = realloc(st->out, cap);
    if (g == NULL)
        return false;
    st->out = g;
    st->out_cap = cap;
    return true;
}

/* A DATA frame on_data_read let go of (NGHTTP2_DATA_FLAG_NO_COPY): its header, then @p length
 * bytes of the stream's response queue, written once, straight into the output (nghttp2 calls
 * this in order among the frames drain_h2 collects). */
static int on_send_data(nghttp2_session *h2, nghttp2_frame *f, const uint8_t *framehd,
                        size_t length, nghttp2_data_source *src, void *ud)
{
    grpc_state *st = ud;
    grpc_stream *s = stream_of(st, f->hd.stream_id);
    size_t pad = f->data.padlen; /* 0: no padding callback is set */
    (void)h2;
    (void)src;
    if (s == NULL || s->q_len - s->q_off < length)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (!out_room(st, 9 + pad + length))
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    uint8_t *w = st->out + st->out_len;
    memcpy(w, framehd, 9);
    w += 9;
    if (pad > 0)
        *w++ = (uint8_t)(pad - 1);
    memcpy(w, s->q + s->q_off, length);
    w += length;
    if (pad > 1)
        memset(w, 0, pad - 1);
    st->out_len += 9 + pad + length;
    s->q_off += length;
    if (s->q_off == s->q_len) { /* an idle stream holds no buffer */
        free(s->q);
        s->q = NULL;
        s->q_off = s->q_len = 0;
    }
    return 0;
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    grpc_state *st = ud;
    (void)h2;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    const sv_proto_ops *inner = st->cr->inner;
    grpc_stream *s = calloc(1, sizeof *s + inner->state_size);
    if (s == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (st->n_streams >= GRPC_STREAMS_CAP || inner->init(s->inner, st->in) != 0) {
        inner->deinit(s->inner);
        free(s);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
    }
    s->id = f->hd.stream_id;
    st->streams[st->n_streams++] = s;
    return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    grpc_state *st = ud;
    (void)h2;
    (void)flags;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    grpc_stream *s = stream_of(st, f->hd.stream_id);
    if (s == NULL)
        return 0;
    if (namelen == 5 && memcmp(name, ":path", 5) == 0)
        s->path_ok = path_served(st->cr, value, valuelen);
    else if (namelen == 12 && memcmp(name, "content-type", 12) == 0)
        s->ctype_ok = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0;
    return 0;
}

/* The request's headers are in: answer a served path with the response headers (the body
 * follows as the inner core writes), any other with grpc-status 12 and the end of the stream. */
static void answer(grpc_state *st, grpc_stream *s)
{
    s->answered = true;
    if (!s->path_ok || !s->ctype_ok) {
        static const nghttp2_nv no[] = {
            {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
            {(uint8_t *)"grpc-status", (uint8_t *)"12", 11, 2, NGHTTP2_NV_FLAG_NONE},
        };
        s->dead = s->ended = true;
        nghttp2_submit_response(st->h2, s->id, no, 3, NULL);
        return;
    }
    static const nghttp2_nv yes[] = {
        {(uint8_t *)":status", (uint8_t *)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
    };
    nghttp2_data_provider dp = {.source.ptr = s, .read_callback = on_data_read};
    if (nghttp2_submit_response(st->h2, s->id, yes, 2, &dp) != 0)
        stream_reset(st, s, NGHTTP2_INTERNAL_ERROR,
                     "its response could not be submitted");
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    grpc_state *st = ud;
    (void)h2;
    grpc_stream *s = stream_of(st, f->hd.stream_id);
    if (s == NULL)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST && !s->answered)
        answer(st, s);
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        s->client_end = s->dirty = true; /* after its input: stream_run */
    return 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud)
{
    grpc_state *st = ud;
    (void)h2;
    (void)flags;
    grpc_stream *s = stream_of(st, id);
    if (s == NULL || s->dead)
        return 0;
    if (s->in_off > 0) { /* compact: no effect points into it while nghttp2 reads */
        memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
        s->in_len -= s->in_off;
        s->in_off = 0;
    }
    if (s->in_len + len > s->in_cap) {
        /* room for the rest of the client's bytes at once (a stream's data is never more):
         * one allocation per stream and read, not one copy per DATA frame; in_trim() gives
         * back what was not used */
        size_t cap = s->in_len + len;
        uintptr_t at = (uintptr_t)data;
        if (at >= st->recv_at && at < st->recv_end && st->recv_end - at > len)
            cap = s->in_len + (size_t)(st->recv_end - at);
        uint8_t *grown = realloc(s->in, cap);
        if (grown == NULL) {
            stream_reset(st, s, NGHTTP2_INTERNAL_ERROR,
                         "no memory for its input");
            return 0;
        }
        s->in = grown;
        s->in_cap = cap;
    }
    ssize_t k = sv_gun_decode(&s->dec, data, len, s->in + s->in_len);
    if (k < 0) {
        stream_reset(st, s, NGHTTP2_PROTOCOL_ERROR,
                     "a malformed gun message");
        return 0;
    }
    s->in_len += (size_t)k;
    if (k > 0)
        s->dirty = true;
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code, void *ud)
{
    grpc_state *st = ud;
    (void)h2;
    grpc_stream *s = stream_of(st, id);
    if (s == NULL)
        return 0;
    if (code != NGHTTP2_NO_ERROR && !s->dead) /* the client's RST_STREAM (or nghttp2's) */
        SV_LOG(SV_LOG_DEBUG, "sv.grpc", "gRPC stream %d closed by a reset (%s)", (int)id,
               nghttp2_http2_strerror(code));
    /* what came before the reset still counts, however the bytes were cut: stream_run ends
     * it after its input */
    s->gone = s->dirty = s->ended = true;
    return 0;
}

static int session_open(grpc_state *st, const grpc_creds *cr)
{
    nghttp2_session_callbacks *cb;
    st->cr = cr;
    st->streams = calloc(GRPC_STREAMS_CAP, sizeof *st->streams);
    if (st->streams == NULL || nghttp2_session_callbacks_new(&cb) != 0)
        return -ENOMEM;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_send_data_callback(cb, on_send_data);
    int rc = nghttp2_session_server_new(&st->h2, cb, st);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0)
        return -ENOMEM;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_STREAMS_MAX},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_STREAM_WINDOW},
    };
    if (nghttp2_submit_settings(st->h2, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
        nghttp2_session_set_local_window_size(st->h2, NGHTTP2_FLAG_NONE, 0, GRPC_CONN_WINDOW) != 0)
        return -ENOMEM;
    return 0;
}

/* After nghttp2 read a feed's bytes: each stream's input buffer keeps only its bytes (the
 * room on_data_chunk made for the rest of the read goes back; shrinking moves nothing). */
static void in_trim(grpc_state *st)
{
    for (unsigned i = 0; i < st->n_streams; i++) {
        grpc_stream *s = st->streams[i];
        if (s->in == NULL || s->in_cap == s->in_len)
            continue;
        if (s->in_len == 0) { /* only gun headers came */
            free(s->in);
            s->in = NULL;
            s->in_off = s->in_cap = 0;
            continue;
        }
        uint8_t *shrunk = realloc(s->in, s->in_len);
        if (shrunk != NULL) {
            s->in = shrunk;
            s->in_cap = s->in_len;
        }
    }
}

/* Collect what nghttp2 has to send into st->out. @return 0 or -ENOMEM / -EPROTO. */
static int drain_h2(grpc_state *st)
{
    for (;;) {
        const uint8_t *p = NULL;
        ssize_t n = nghttp2_session_mem_send(st->h2, &p);
        if (n < 0)
            return -EPROTO;
        if (n == 0)
            return 0;
        if (!out_room(st, (size_t)n))
            return -ENOMEM;
        memcpy(st->out + st->out_len, p, (size_t)n);
        st->out_len += (size_t)n;
    }
}

/* Drop the output the last call handed out (its pointer was valid until this call); free the
 * buffer once empty. */
static void out_reset(grpc_state *st)
{
    if (st->out_off < st->out_len) {
        memmove(st->out, st->out + st->out_off, st->out_len - st->out_off);
        st->out_len -= st->out_off;
        st->out_off = 0;
        return;
    }
    st->out_off = st->out_len = st->out_cap = 0;
    free(st->out); /* an idle connection holds no buffer */
    st->out = NULL;
}

static ssize_t fail(grpc_state *st, sv_effects *fx, int err)
{
    st->failed = true;
    sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
    if (e == NULL) {
        fx->n--;
        e = sv_effects_push(fx, SV_FX_ERROR);
    }
    e->error = err;
    e->policy = SV_PROBE_CLOSE;
    return err;
}

static ssize_t grpc_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    grpc_state *st = state;
    fx->n = 0;
    if (st->failed)
        return fail(st, fx, -EPROTO);
    if (!st->preface_ok) {
        size_t k = n < sizeof h2_preface ? n : sizeof h2_preface;
        if (memcmp(p, h2_preface, k) != 0) { /* not HTTP/2: the inbound's fallback or 404 */
            st->failed = true;
            sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
            e->error = -EPROTO;
            e->policy = SV_PROBE_FALLBACK;
            e->data = p;
            e->len = n;
            return -EPROTO;
        }
        if (k < sizeof h2_preface)
            return 0;
        st->preface_ok = true;
        int rc = session_open(st, creds);
        if (rc != 0)
            return fail(st, fx, rc);
    }
    out_reset(st);
    st->fx = fx;
    /* what did not fit the last call goes first; what still does not fit moves to the front
     * of the array in order (push() writes below the index being read) */
    unsigned held = st->n_defer;
    st->n_defer = 0;
    for (unsigned i = 0; i < held; i++)
        push(st, &st->defer[i]);
    for (unsigned i = 0; i < st->n_streams; i++)
        st->streams[i]->ran = false;
    if (fx->n == 0 && st->n_defer == 0) {
        streams_sweep(st);
        streams_run(st); /* work a full list left */
    }
    /* nghttp2 gets the bytes only with no effect out: its data callback moves stream input
     * that effects point into. Otherwise the runtime calls again at once (more()). */
    size_t used = 0;
    if (fx->n == 0 && st->n_defer == 0 && !backlog(st)) {
        st->recv_at = (uintptr_t)p;
        st->recv_end = (uintptr_t)(p + n);
        ssize_t r = nghttp2_session_mem_recv(st->h2, p, n);
        st->recv_at = st->recv_end = 0;
        in_trim(st);
        if (r < 0) {
            st->fx = NULL;
            return fail(st, fx, -EPROTO);
        }
        used = (size_t)r;
        streams_run(st);
    }
    st->fx = NULL;
    int rc = drain_h2(st);
    if (rc != 0 || st->failed)
        return fail(st, fx, rc != 0 ? rc : -ENOBUFS);
    if (st->out_len > st->out_off) {
        /* first: applying the others may call frame_end(), whose HTTP/2 bytes must follow
         * these on the wire (and reuse the buffer); push() kept the slot free */
        memmove(fx->v + 1, fx->v, fx->n * sizeof *fx->v);
        fx->n++;
        fx->v[0] = (sv_effect){.kind = SV_FX_TO_CLIENT, .data = st->out + st->out_off,
                               .len = st->out_len - st->out_off};
        st->out_off = st->out_len;
    }
    st->again = backlog(st) || used < n;
    if (st->n_defer == 0) { /* an idle connection holds no buffer */
        free(st->defer);
        st->defer = NULL;
    }
    if (!st->again && !nghttp2_session_want_read(st->h2) && !nghttp2_session_want_write(st->h2))
        (void)sv_effects_push(fx, SV_FX_FINISH); /* both ends said GOAWAY */
    return (ssize_t)used;
}

static bool grpc_more(const void *state)
{
    const grpc_state *st = state;
    return st->again && !st->failed;
}

/* Copy pending output into the caller's buffer, at most @p cap bytes; the rest goes with the
 * next call (frame() output is the remote read and a little framing unless a window update
 * released a backlog, which feed() hands out whole). */
static ssize_t give_out(grpc_state *st, uint8_t *out, size_t cap)
{
    size_t n = st->out_len - st->out_off;
    if (n == 0)
        return 0;
    if (n > cap)
        n = cap;
    memcpy(out, st->out + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

/* The stream that carries sub-flow @p id and the inner core's key for it (0, or the Mux.Cool
 * session; *@p sub set for a session), or NULL. */
static grpc_stream *target(grpc_state *st, uint32_t id, uint32_t *key, grpc_sub **sub)
{
    *key = 0;
    *sub = NULL;
    if (st->h2 == NULL)
        return NULL;
    if (id % 2 == 0) {
        *sub = sub_of_id(st, id);
        if (*sub == NULL)
            return NULL;
        *key = (*sub)->session;
        return stream_of(st, (*sub)->h2);
    }
    grpc_stream *s = stream_of(st, (int32_t)id);
    return s != NULL && !s->mux ? s : NULL;
}

/* proto.h queued: the stream's response bytes that HTTP/2 flow control holds (the Mux.Cool
 * sessions of one stream share its queue). */
static size_t grpc_queued(void *state, uint32_t stream)
{
    uint32_t key;
    grpc_sub *sub;
    grpc_stream *s = target(state, stream, &key, &sub);
    return s != NULL && !s->dead ? s->q_len - s->q_off : 0;
}

static ssize_t grpc_frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                          size_t len, uint8_t *out, size_t cap)
{
    grpc_state *st = state;
    const grpc_creds *cr = creds;
    uint32_t key;
    grpc_sub *sub;
    grpc_stream *s = target(st, stream, &key, &sub);
    out_reset(st);
    if (s != NULL && !s->dead && !s->ended) {
        /* the inner core frames into the caller's buffer; stream_send copies it before the
         * HTTP/2 bytes are written there. A session's bytes go as Keep frames of at most
         * GRPC_MUX_DATA_MAX: Xray's gRPC client reads a Hunk as one buffer and panics on a
         * larger frame with more bytes behind it in that buffer (its own server never sends
         * one: its mux writer splits at 8 KiB) */
        size_t step = sub != NULL ? GRPC_MUX_DATA_MAX : len;
        for (size_t off = 0; off < len && !s->dead;) {
            size_t piece = len - off < step ? len - off : step;
            ssize_t k = cr->inner->frame(s->inner, cr->inner_creds, key, in + off, piece, out,
                                         cap);
            if (k < 0) {
                stream_reset(st, s, NGHTTP2_INTERNAL_ERROR,
                             "its inner core could not frame the outbound's bytes");
                break;
            }
            stream_send(st, s, out, (size_t)k);
            off += piece;
        }
    }
    if (st->h2 != NULL && drain_h2(st) != 0)
        return -ENOMEM;
    return give_out(st, out, cap);
}

static size_t grpc_frame_max(size_t len)
{
    (void)len;
    return 0; /* checked per call: frame() answers -EMSGSIZE beyond the caller's buffer */
}

static ssize_t grpc_frame_datagram(void *state, const void *creds, uint32_t stream,
                                   const sv_dest *from, const uint8_t *payload, size_t len,
                                   uint8_t *out, size_t cap)
{
    grpc_state *st = state;
    const grpc_creds *cr = creds;
    uint32_t key;
    grpc_sub *sub;
    grpc_stream *s = target(st, stream, &key, &sub);
    out_reset(st);
    const sv_proto_ext_datagram *x = sv_proto_datagram(cr->inner);
    if (s != NULL && !s->dead && !s->ended && x != NULL) {
        ssize_t k = x->frame_datagram(s->inner, cr->inner_creds, key, from, payload, len, out, cap);
        if (k > 0)
            stream_send(st, s, out, (size_t)k);
    }
    if (st->h2 != NULL && drain_h2(st) != 0)
        return -ENOMEM;
    return give_out(st, out, cap);
}

static ssize_t grpc_frame_end(void *state, const void *creds, uint32_t stream, bool abort,
                              uint8_t *out, size_t cap)
{
    grpc_state *st = state;
    const grpc_creds *cr = creds;
    uint32_t key;
    grpc_sub *sub;
    grpc_stream *s = target(st, stream, &key, &sub);
    const sv_proto_ext_end *x = sv_proto_end(cr->inner);
    out_reset(st);
    if (sub != NULL) { /* a Mux.Cool session: its End frame, the stream goes on */
        *sub = st->subs[--st->n_subs]; /* the runtime forgot it */
        uint8_t end[64];
        ssize_t k = s != NULL && !s->dead && !s->ended && x != NULL
                  ? x->frame_end(s->inner, cr->inner_creds, key, abort, end, sizeof end)
                  : 0;
        if (k > 0)
            stream_send(st, s, end, (size_t)k);
    } else if (s != NULL && !s->dead && !s->ended) {
        s->told_close = true; /* the runtime ended the sub-flow itself */
        if (abort) {
            stream_reset(st, s, NGHTTP2_CANCEL,
                         "the runtime aborted its sub-flow (its outbound failed, was killed or passed a bound)");
        } else {
            if (x != NULL) {
                uint8_t end[256];
                ssize_t k = x->frame_end(s->inner, cr->inner_creds, 0, false, end, sizeof end);
                if (k > 0)
                    stream_send(st, s, end, (size_t)k);
            }
            s->ended = true;
            nghttp2_session_resume_data(st->h2, s->id);
        }
    } else if (s != NULL) {
        s->told_close = true;
    }
    if (st->h2 != NULL && drain_h2(st) != 0)
        return -ENOMEM;
    return give_out(st, out, cap);
}

static const sv_proto_ext_clock grpc_clock = {.set_time = grpc_set_time};
static const sv_proto_ext_backlog grpc_backlog = {
    .more = grpc_more,
    .queued = grpc_queued,
};
static const sv_proto_ext_datagram grpc_datagram = {.frame_datagram = grpc_frame_datagram};
static const sv_proto_ext_end grpc_end = {.frame_end = grpc_frame_end};

const sv_proto_ops sv_grpc_ops = {
    .name = "grpc",
    .creds_new = grpc_creds_new_direct,
    .creds_free = grpc_creds_free,
    .state_size = sizeof(grpc_state),
    .init = grpc_init,
    .deinit = grpc_deinit,
    .feed = grpc_feed,
    .carry_max = sizeof h2_preface,
    .frame = grpc_frame,
    .frame_max = grpc_frame_max,
    .ext =
        {
            [SV_PROTO_CAP_CLOCK] = &grpc_clock,
            [SV_PROTO_CAP_BACKLOG] = &grpc_backlog,
            [SV_PROTO_CAP_DATAGRAM] = &grpc_datagram,
            [SV_PROTO_CAP_END] = &grpc_end,
        },
};
