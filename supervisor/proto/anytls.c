/* AnyTLS server core (PROTOCOLS-3.md §3): credential table, auth, frame decoder, UoT v2. */
#include "config.h"

#include "supervisor/proto/anytls.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

const char sv_anytls_default_scheme[] =
    "stop=8\n0=30-30\n1=100-400\n2=400-500,c,500-1000,c,500-1000,c,500-1000,c,500-1000\n"
    "3=9-9,500-1000\n4=500-1000\n5=500-1000\n6=500-1000\n7=500-1000";

/* ---------------------------------------------------------------------------------------- */
/* Credential table: SHA-256 → user index, and the padding scheme                            */
/* ---------------------------------------------------------------------------------------- */

typedef struct at_slot {
    uint32_t tag;
    uint32_t user1; /* user index + 1, 0 = empty */
} at_slot;

typedef struct at_creds {
    size_t n, mask;
    at_slot *slots;
    uint8_t (*digest)[SV_ANYTLS_HASH_LEN];
    uint8_t *scheme; /* the scheme's bytes (no NUL needed) */
    size_t scheme_len;
    char md5_hex[33];
} at_creds;

static uint64_t hash_digest(const uint8_t *d)
{
    uint64_t x = 0x243f6a8885a308d3u;
    for (size_t i = 0; i < SV_ANYTLS_HASH_LEN; i += 8) {
        uint64_t w;
        memcpy(&w, d + i, sizeof w);
        x = (x ^ w) * 0x9e3779b97f4a7c15u;
        x ^= x >> 29;
    }
    return x;
}

static int creds_lookup(const at_creds *t, const uint8_t *d)
{
    if (t == NULL)
        return -1;
    uint64_t h = hash_digest(d);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
        const at_slot *s = &t->slots[i];
        if (s->user1 == 0)
            return -1;
        if (s->tag == tag &&
            CRYPTO_memcmp(t->digest[s->user1 - 1], d, SV_ANYTLS_HASH_LEN) == 0)
            return (int)(s->user1 - 1);
    }
}

static void creds_free(void *creds)
{
    at_creds *t = creds;
    if (t == NULL)
        return;
    if (t->digest != NULL)
        OPENSSL_cleanse(t->digest, t->n * SV_ANYTLS_HASH_LEN);
    free(t->digest);
    free(t->slots);
    free(t->scheme);
    free(t);
}

static uint32_t creds_insert(at_creds *t, uint32_t u)
{
    uint64_t h = hash_digest(t->digest[u]);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & t->mask;
    for (; t->slots[i].user1 != 0; i = (i + 1) & t->mask) {
        const at_slot *s = &t->slots[i];
        if (s->tag == tag && memcmp(t->digest[s->user1 - 1], t->digest[u], SV_ANYTLS_HASH_LEN) == 0)
            return s->user1;
    }
    t->slots[i].tag = tag;
    t->slots[i].user1 = u + 1;
    return 0;
}

/* Digest @p len bytes with @p name into @p out (@p want bytes). @return 0 or -EIO. */
static int digest(const char *name, const void *p, size_t len, uint8_t *out, unsigned want)
{
    EVP_MD *md = EVP_MD_fetch(NULL, name, NULL);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned dl = 0;
    int rc = md != NULL && ctx != NULL && EVP_DigestInit_ex2(ctx, md, NULL) == 1 &&
                     EVP_DigestUpdate(ctx, p, len) == 1 && EVP_DigestFinal_ex(ctx, out, &dl) == 1 &&
                     dl == want
                 ? 0
                 : -EIO;
    EVP_MD_CTX_free(ctx);
    EVP_MD_free(md);
    return rc;
}

/* Does @p s (@p n bytes) hold a line "stop=N" with N decimal (§3.4: required)? */
static bool scheme_has_stop(const char *s, size_t n)
{
    size_t at = 0;
    while (at < n) {
        const char *nl = memchr(s + at, '\n', n - at);
        size_t end = nl != NULL ? (size_t)(nl - s) : n;
        if (end - at > 5 && memcmp(s + at, "stop=", 5) == 0) {
            bool ok = true;
            for (size_t i = at + 5; i < end; i++)
                ok = ok && s[i] >= '0' && s[i] <= '9';
            if (ok)
                return true;
        }
        at = end + 1;
    }
    return false;
}

static int creds_scheme(at_creds *t, const sv_inbound_spec *in, sv_error *err)
{
    const char *tag = in != NULL && in->tag != NULL ? in->tag : "";
    const char *s = in != NULL && in->anytls_padding_scheme != NULL ? in->anytls_padding_scheme
                                                                    : sv_anytls_default_scheme;
    size_t n = strlen(s);
    if (n > SV_ANYTLS_SCHEME_MAX)
        return sv_error_set(err, -EINVAL,
                            "inbound %s: anytls padding scheme is longer than %d bytes", tag,
                            SV_ANYTLS_SCHEME_MAX);
    if (!scheme_has_stop(s, n))
        return sv_error_set(err, -EINVAL,
                            "inbound %s: padding_scheme: no valid \"stop=N\" line", tag);
    t->scheme = malloc(n > 0 ? n : 1);
    if (t->scheme == NULL)
        return sv_error_set(err, -ENOMEM, "inbound %s: out of memory", tag);
    memcpy(t->scheme, s, n);
    t->scheme_len = n;
    uint8_t md[16];
    if (digest("MD5", s, n, md, 16) < 0)
        return sv_error_set(err, -EIO, "inbound %s: MD5 is not available", tag);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        t->md5_hex[2 * i] = hex[md[i] >> 4];
        t->md5_hex[2 * i + 1] = hex[md[i] & 15];
    }
    t->md5_hex[32] = '\0';
    return 0;
}

static int creds_users(at_creds *t, const sv_user_set *users, sv_error *err)
{
    const char *set = users->tag != NULL ? users->tag : "";
    for (size_t i = 0; i < users->n_users; i++) {
        const sv_user *u = &users->users[i];
        if (u->secret == NULL || u->secret[0] == '\0')
            return sv_error_set(err, -EINVAL, "user set %s: user %" PRIu64 " has an empty secret",
                                set, u->id);
        if (digest("SHA2-256", u->secret, strlen(u->secret), t->digest[i], SV_ANYTLS_HASH_LEN) < 0)
            return sv_error_set(err, -EIO, "user set %s: SHA-256 is not available", set);
        uint32_t dup = creds_insert(t, (uint32_t)i);
        if (dup != 0)
            return sv_error_set(err, -EINVAL,
                                "user set %s: users %" PRIu64 " and %" PRIu64
                                " have the same password",
                                set, users->users[dup - 1].id, u->id);
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
    at_creds *t = calloc(1, sizeof *t);
    if (t != NULL) {
        t->n = n;
        t->mask = cap - 1;
        t->slots = calloc(cap, sizeof *t->slots);
        t->digest = calloc(n > 0 ? n : 1, sizeof *t->digest);
    }
    if (t == NULL || t->slots == NULL || t->digest == NULL) {
        creds_free(t);
        return sv_error_set(err, -ENOMEM, "user set %s: out of memory", set);
    }
    int rc = creds_scheme(t, in, err);
    if (rc == 0)
        rc = creds_users(t, users, err);
    if (rc < 0) {
        creds_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Per-connection state                                                                      */
/* ---------------------------------------------------------------------------------------- */

enum at_phase { PH_AUTH = 0, PH_FRAMES, PH_FAILED };
/* A stream's phase: its address, then TCP; or the UoT request, then its packets. */
enum st_phase { ST_FREE = 0, ST_ADDR, ST_TCP, ST_UOT_REQ, ST_UOT };

typedef struct at_stream {
    uint32_t id;
    uint8_t phase;   /* enum st_phase */
    bool connect;    /* UoT: isConnect */
    bool busy;       /* buf's bytes are pointed at by this call's effects */
    sv_dest *udp;    /* UoT: the request's destination */
    uint8_t *buf;    /* bytes of a unit (address, request, packet) split over frames */
    size_t len, cap, used; /* buf: held bytes, size, bytes handled this call (busy) */
} at_stream;

#define ANSWER_MAX 48 /* one control frame the server answers with (header and text) */

typedef struct at_conn {
    uint8_t phase; /* enum at_phase */
    bool settings; /* the client's Settings came */
    bool v2;
    bool more;     /* feed stopped early with work left */
    int error;
    uint32_t last_syn;
    /* the frame whose data is being read */
    uint8_t cmd;
    uint32_t sid;
    uint32_t left;
    unsigned n_trash;
    uint8_t *trash[2 * SV_EFFECTS_MAX]; /* held bytes of forgotten streams that effects point at */
    unsigned n_ans;
    uint8_t ans[SV_EFFECTS_MAX][ANSWER_MAX];
    uint8_t *alert;   /* the Alert that ends the session (in ans), or NULL */
    size_t alert_len;
    at_stream s[SV_ANYTLS_STREAMS_MAX];
} at_conn;

static int conn_init(void *state, const sv_inbound_spec *in)
{
    (void)in;
    memset(state, 0, sizeof(at_conn));
    return 0;
}

/* Forget stream @p s. Held bytes the last or this call's effects point at (busy) are freed at
 * the next feed(). */
static void stream_forget(at_conn *c, at_stream *s)
{
    if (s->busy && c->n_trash < 2 * SV_EFFECTS_MAX)
        c->trash[c->n_trash++] = s->buf;
    else
        free(s->buf);
    free(s->udp);
    memset(s, 0, sizeof *s);
}

static void empty_trash(at_conn *c)
{
    for (unsigned i = 0; i < c->n_trash; i++)
        free(c->trash[i]);
    c->n_trash = 0;
}

static void conn_deinit(void *state)
{
    at_conn *c = state;
    for (size_t i = 0; i < SV_ANYTLS_STREAMS_MAX; i++)
        if (c->s[i].phase != ST_FREE) {
            c->s[i].busy = false;
            stream_forget(c, &c->s[i]);
        }
    empty_trash(c);
}

static at_stream *stream_find(at_conn *c, uint32_t id)
{
    for (size_t i = 0; i < SV_ANYTLS_STREAMS_MAX; i++)
        if (c->s[i].phase != ST_FREE && c->s[i].id == id)
            return &c->s[i];
    return NULL;
}

static void put_head(uint8_t *out, uint8_t cmd, uint32_t sid, size_t len)
{
    out[0] = cmd;
    out[1] = (uint8_t)(sid >> 24);
    out[2] = (uint8_t)(sid >> 16);
    out[3] = (uint8_t)(sid >> 8);
    out[4] = (uint8_t)sid;
    out[5] = (uint8_t)(len >> 8);
    out[6] = (uint8_t)len;
}

/* Answer the client with control frame @p cmd of @p sid and text @p text (short). */
/* Build frame @p cmd of @p sid carrying @p text (NULL: none) in the next answer slot.
 * @return the frame; *@p len its length. */
static uint8_t *answer_frame(at_conn *c, uint8_t cmd, uint32_t sid, const char *text,
                             size_t *len)
{
    size_t tl = text != NULL ? strlen(text) : 0;
    uint8_t *f = c->ans[c->n_ans++];
    put_head(f, cmd, sid, tl);
    if (tl > 0)
        memcpy(f + SV_ANYTLS_HEAD_LEN, text, tl);
    *len = SV_ANYTLS_HEAD_LEN + tl;
    return f;
}

static void answer(at_conn *c, sv_effects *fx, uint8_t cmd, uint32_t sid, const char *text)
{
    size_t len;
    uint8_t *f = answer_frame(c, cmd, sid, text, &len);
    sv_effect *e = sv_effects_push(fx, SV_FX_TO_CLIENT);
    e->data = f;
    e->len = len;
}

static ssize_t fail(at_conn *c, sv_effects *fx, int error, enum sv_probe_policy policy,
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

/* ---------------------------------------------------------------------------------------- */
/* Stream contents: address, UoT request and packets (§3.5)                                  */
/* ---------------------------------------------------------------------------------------- */

static const char uot_magic[] = "sp.v2.udp-over-tcp.arpa";

/* Parse a UoT packet address (codes 00 IPv4, 01 IPv6, 02 domain). @return as sv_dest_parse. */
static ssize_t parse_uot_addr(const uint8_t *p, size_t n, sv_dest *d)
{
    static const uint8_t to_socks[3] = {SV_ATYP_IPV4, SV_ATYP_IPV6, SV_ATYP_DOMAIN};
    if (n == 0)
        return 0;
    if (p[0] > 2)
        return -EPROTO;
    uint8_t tmp[SV_DEST_WIRE_MAX];
    size_t k = n < sizeof tmp ? n : sizeof tmp;
    memcpy(tmp, p, k);
    tmp[0] = to_socks[p[0]];
    return sv_dest_parse(tmp, k, d);
}

/* Length of the unit at @p p for stream @p s, with its fields. @return > 0, 0 when short, or
 * -EPROTO. */
static ssize_t parse_unit(const at_stream *s, const uint8_t *p, size_t n, sv_dest *d,
                          size_t *off, size_t *plen)
{
    ssize_t a;
    *off = *plen = 0;
    switch ((enum st_phase)s->phase) {
    case ST_ADDR:
        return sv_dest_parse(p, n, d);
    case ST_UOT_REQ:
        if (n == 0)
            return 0;
        if (p[0] > 1)
            return -EPROTO;
        a = sv_dest_parse(p + 1, n - 1, d);
        return a <= 0 ? a : a + 1;
    case ST_UOT:
        a = 0;
        if (!s->connect && (a = parse_uot_addr(p, n, d)) <= 0)
            return a;
        if (n < (size_t)a + 2)
            return 0;
        *plen = (size_t)p[a] << 8 | p[a + 1];
        *off = (size_t)a + 2;
        return n - *off < *plen ? 0 : (ssize_t)(*off + *plen);
    default:
        return -EPROTO;
    }
}

/* A malformed unit ends stream @p s: FIN to the client, SV_FX_CLOSE when it was opened. */
static void stream_refuse(at_conn *c, at_stream *s, sv_effects *fx)
{
    answer(c, fx, SV_ANYTLS_FIN, s->id, NULL);
    if (s->phase == ST_TCP || s->phase == ST_UOT) {
        sv_effect *e = sv_effects_push(fx, SV_FX_CLOSE);
        e->stream = s->id;
    }
    s->busy = s->buf != NULL; /* this call's effects may point into its held bytes */
    stream_forget(c, s);
}

/* Act on one whole unit @p p (@p len bytes) of stream @p s. */
static int stream_unit(at_stream *s, uint8_t *p, size_t len, const sv_dest *d, size_t off,
                       size_t plen, sv_effects *fx)
{
    sv_effect *e;
    switch ((enum st_phase)s->phase) {
    case ST_ADDR:
        if (d->atyp == SV_ATYP_DOMAIN && d->port == 0 && strcmp(d->host, uot_magic) == 0) {
            s->phase = ST_UOT_REQ;
            return 0;
        }
        e = sv_effects_push(fx, SV_FX_OPEN);
        e->stream = s->id;
        e->dest = *d;
        e->dest.network = SV_NET_TCP;
        s->phase = ST_TCP;
        return 0;
    case ST_UOT_REQ:
        s->udp = malloc(sizeof *s->udp);
        if (s->udp == NULL)
            return -ENOMEM;
        *s->udp = *d;
        s->udp->network = SV_NET_UDP;
        s->connect = p[0] == 1;
        s->phase = ST_UOT;
        e = sv_effects_push(fx, SV_FX_OPEN);
        e->stream = s->id;
        e->dest = *s->udp;
        return 0;
    case ST_UOT:
        e = sv_effects_push(fx, SV_FX_DATAGRAM);
        e->stream = s->id;
        e->dest = s->connect ? *s->udp : *d;
        e->dest.network = SV_NET_UDP;
        e->data = p + off;
        e->len = plen;
        (void)len;
        return 0;
    default:
        return -EPROTO;
    }
}

/* Room a unit's handling may take: OPEN + TO_OUTBOUND, or FIN + CLOSE, and one for an error. */
#define UNIT_ROOM 3

/*
 * Units from @p p (@p n bytes, all of the stream's bytes in view). Whole units are handled in
 * place; a TCP stream's bytes after its address go out at once. @return bytes used (stops
 * early on a full effect list), or -ENOMEM. *@p gone: the stream was refused and forgotten.
 */
static ssize_t stream_units(at_conn *c, at_stream *s, uint8_t *p, size_t n, sv_effects *fx,
                            bool *gone)
{
    size_t at = 0;
    while (at < n && fx->n + UNIT_ROOM <= SV_EFFECTS_MAX) {
        if (s->phase == ST_TCP) {
            sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
            e->stream = s->id;
            e->data = p + at;
            e->len = n - at;
            return (ssize_t)n;
        }
        sv_dest d;
        size_t off, plen;
        ssize_t u = parse_unit(s, p + at, n - at, &d, &off, &plen);
        if (u < 0) {
            stream_refuse(c, s, fx);
            *gone = true;
            return (ssize_t)n;
        }
        if (u == 0)
            break;
        int rc = stream_unit(s, p + at, (size_t)u, &d, off, plen, fx);
        if (rc < 0)
            return rc;
        at += (size_t)u;
    }
    return (ssize_t)at;
}

/* Compact @p s's held bytes once the last call's effects are applied. */
static void stream_settle(at_stream *s)
{
    if (!s->busy)
        return;
    s->busy = false;
    memmove(s->buf, s->buf + s->used, s->len - s->used);
    s->len -= s->used;
    s->used = 0;
}

/* Largest unit a stream may hold: a UoT packet with the longest address. */
#define UNIT_MAX (SV_DEST_WIRE_MAX + 2 + SV_ANYTLS_DATA_MAX)

/*
 * Data @p q (@p k bytes) of a PSH frame for stream @p s. @return bytes taken (fewer than @p k:
 * stop this call, more() is set), or a negative errno.
 */
static ssize_t stream_data(at_conn *c, at_stream *s, uint8_t *q, size_t k, sv_effects *fx)
{
    bool gone = false;
    size_t skip = 0;
    if (s->len == 0) {
        ssize_t r = stream_units(c, s, q, k, fx, &gone);
        if (r < 0 || gone || (size_t)r == k)
            return r < 0 ? r : (ssize_t)k;
        if (fx->n + UNIT_ROOM > SV_EFFECTS_MAX)
            return r; /* a full list: the rest next call */
        skip = (size_t)r; /* an incomplete unit follows: held below */
    } else if (s->busy) {
        return 0;
    }
    size_t take = k - skip;
    if (s->len + take > UNIT_MAX + SV_ANYTLS_DATA_MAX)
        return -EPROTO; /* cannot happen: a unit is at most UNIT_MAX */
    if (s->len + take > s->cap) {
        size_t cap = s->len + take + 256;
        uint8_t *b = realloc(s->buf, cap);
        if (b == NULL)
            return -ENOMEM;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, q + skip, take);
    s->len += take;
    ssize_t r = stream_units(c, s, s->buf, s->len, fx, &gone);
    if (r < 0 || gone)
        return r < 0 ? r : (ssize_t)k;
    if (r > 0) {
        s->busy = true;
        s->used = (size_t)r;
    }
    if ((size_t)r < s->len && fx->n + UNIT_ROOM > SV_EFFECTS_MAX)
        c->more = true; /* whole units may wait in buf */
    return (ssize_t)k;
}

/* ---------------------------------------------------------------------------------------- */
/* Frames (§3.2, §3.3)                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* Does the Settings text @p p (@p n bytes) hold key @p key? Its value in *@p v, *@p vl. */
static bool settings_get(const uint8_t *p, size_t n, const char *key, const uint8_t **v,
                         size_t *vl)
{
    size_t kl = strlen(key), at = 0;
    bool found = false;
    while (at < n) {
        const uint8_t *nl = memchr(p + at, '\n', n - at);
        size_t end = nl != NULL ? (size_t)(nl - p) : n;
        const uint8_t *eq = memchr(p + at, '=', end - at);
        if (eq != NULL && (size_t)(eq - (p + at)) == kl && memcmp(p + at, key, kl) == 0) {
            *v = eq + 1; /* the last one wins, as a map */
            *vl = end - (size_t)(eq + 1 - p);
            found = true;
        }
        at = end + 1;
    }
    return found;
}

/* Parse "v" as a decimal integer ≥ 2 (bounded: at most 9 digits). */
static bool settings_v2(const uint8_t *v, size_t vl)
{
    if (vl == 0 || vl > 9)
        return false;
    unsigned x = 0;
    for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x * 10 + (unsigned)(v[i] - '0');
    }
    return x >= 2;
}

/* The client's Settings @p p (@p n bytes): UpdatePaddingScheme, ServerSettings (§3.3). */
static void on_settings(at_conn *c, const at_creds *t, const uint8_t *p, size_t n,
                        sv_effects *fx)
{
    const uint8_t *v;
    size_t vl;
    c->settings = true;
    if (t != NULL && (!settings_get(p, n, "padding-md5", &v, &vl) || vl != 32 ||
                      memcmp(v, t->md5_hex, 32) != 0)) {
        uint8_t *f = c->ans[c->n_ans++];
        put_head(f, SV_ANYTLS_UPDATE_PADDING, 0, t->scheme_len);
        sv_effect *e = sv_effects_push(fx, SV_FX_TO_CLIENT);
        e->data = f;
        e->len = SV_ANYTLS_HEAD_LEN;
        if (t->scheme_len > 0) {
            e = sv_effects_push(fx, SV_FX_TO_CLIENT);
            e->data = t->scheme; /* the table is immutable and outlives the connection */
            e->len = t->scheme_len;
        }
    }
    if (settings_get(p, n, "v", &v, &vl) && settings_v2(v, vl)) {
        c->v2 = true;
        answer(c, fx, SV_ANYTLS_SERVER_SETTINGS, 0, "v=2");
    }
}

/* A SYN of @p sid. @return 0 or a negative errno (the session ends). */
static int on_syn(at_conn *c, uint32_t sid, sv_effects *fx)
{
    if (!c->settings) { /* the alert rides the error (SV_PROBE_ANSWER): written, then the close */
        c->alert = answer_frame(c, SV_ANYTLS_ALERT, 0, "client did not send its settings",
                                &c->alert_len);
        return -EPROTO;
    }
    if (sid <= c->last_syn)
        return 0; /* a reused id (ids rise): ignored */
    c->last_syn = sid;
    at_stream *s = NULL;
    for (size_t i = 0; i < SV_ANYTLS_STREAMS_MAX && s == NULL; i++)
        if (c->s[i].phase == ST_FREE)
            s = &c->s[i];
    if (s == NULL) {
        if (c->v2)
            answer(c, fx, SV_ANYTLS_SYNACK, sid, "too many streams");
        answer(c, fx, SV_ANYTLS_FIN, sid, NULL);
        return 0;
    }
    s->id = sid;
    s->phase = ST_ADDR;
    if (c->v2)
        answer(c, fx, SV_ANYTLS_SYNACK, sid, NULL);
    return 0;
}

/* Room a frame header's handling may take (Settings: three answers) and one for an error. */
#define HEAD_ROOM 4

/* One frame header at @p p. @return bytes consumed (0: need more), or a negative errno. */
static ssize_t read_header(at_conn *c, const at_creds *t, uint8_t *p, size_t n, sv_effects *fx)
{
    if (n < SV_ANYTLS_HEAD_LEN)
        return 0;
    uint8_t cmd = p[0];
    uint32_t sid = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    size_t len = (size_t)p[5] << 8 | p[6];
    if (cmd == SV_ANYTLS_SETTINGS) { /* read whole */
        if (n < SV_ANYTLS_HEAD_LEN + len)
            return 0;
        on_settings(c, t, p + SV_ANYTLS_HEAD_LEN, len, fx);
        return (ssize_t)(SV_ANYTLS_HEAD_LEN + len);
    }
    c->cmd = cmd;
    c->sid = sid;
    c->left = (uint32_t)len;
    at_stream *s;
    switch (cmd) {
    case SV_ANYTLS_SYN: {
        int rc = on_syn(c, sid, fx);
        if (rc < 0)
            return rc;
        break;
    }
    case SV_ANYTLS_FIN:
        s = stream_find(c, sid);
        if (s != NULL) {
            if (s->phase == ST_TCP || s->phase == ST_UOT) {
                sv_effect *e = sv_effects_push(fx, SV_FX_CLOSE);
                e->stream = sid;
            }
            stream_forget(c, s);
        }
        break;
    case SV_ANYTLS_HEART_REQUEST:
        answer(c, fx, SV_ANYTLS_HEART_RESPONSE, sid, NULL);
        break;
    default: /* PSH: data follows; the rest: skipped */
        break;
    }
    return SV_ANYTLS_HEAD_LEN;
}

/* Frames from @p p. @return bytes consumed, or a negative errno. */
static ssize_t read_frames(at_conn *c, const at_creds *t, uint8_t *p, size_t n, sv_effects *fx)
{
    size_t at = 0;
    while (at < n) {
        if (fx->n + HEAD_ROOM > SV_EFFECTS_MAX) {
            c->more = true;
            break;
        }
        if (c->left > 0) {
            size_t k = n - at < c->left ? n - at : c->left;
            at_stream *s = c->cmd == SV_ANYTLS_PSH ? stream_find(c, c->sid) : NULL;
            ssize_t used = s != NULL ? stream_data(c, s, p + at, k, fx) : (ssize_t)k;
            if (used < 0)
                return used;
            at += (size_t)used;
            c->left -= (uint32_t)used;
            if ((size_t)used < k) {
                c->more = true;
                break;
            }
            continue;
        }
        ssize_t h = read_header(c, t, p + at, n - at, fx);
        if (h < 0)
            return h;
        if (h == 0)
            break;
        at += (size_t)h;
    }
    return (ssize_t)at;
}

/* Held units of streams whose last call stopped on a full effect list. */
static ssize_t settle_streams(at_conn *c, sv_effects *fx)
{
    for (size_t i = 0; i < SV_ANYTLS_STREAMS_MAX; i++) {
        at_stream *s = &c->s[i];
        if (s->phase == ST_FREE || !s->busy)
            continue;
        stream_settle(s);
        if (s->len == 0 || fx->n + UNIT_ROOM > SV_EFFECTS_MAX)
            continue;
        bool gone = false;
        ssize_t r = stream_units(c, s, s->buf, s->len, fx, &gone);
        if (r < 0)
            return r;
        if (!gone && r > 0) {
            s->busy = true;
            s->used = (size_t)r;
        }
        if (gone || r > 0)
            c->more = true; /* effects without input consumed: call again, then read on */
    }
    return 0;
}

/* The auth part (§3.1). @return its length (0: need more), or a negative errno with
 * *@p user unset. */
static ssize_t parse_auth(const at_creds *t, const uint8_t *p, size_t n, int *user)
{
    if (n < SV_ANYTLS_HASH_LEN)
        return 0;
    *user = creds_lookup(t, p);
    if (*user < 0)
        return -EACCES;
    if (n < SV_ANYTLS_HASH_LEN + 2)
        return 0;
    size_t pl = (size_t)p[SV_ANYTLS_HASH_LEN] << 8 | p[SV_ANYTLS_HASH_LEN + 1];
    if (pl > SV_ANYTLS_PADDING0_MAX) {
        *user = -1;
        return -EPROTO;
    }
    return n < SV_ANYTLS_HASH_LEN + 2 + pl ? 0 : (ssize_t)(SV_ANYTLS_HASH_LEN + 2 + pl);
}

static ssize_t conn_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    at_conn *c = state;
    const at_creds *t = creds;
    fx->n = 0;
    c->n_ans = 0;
    c->more = false;
    empty_trash(c); /* the last call's effects are applied */
    if (c->phase == PH_FAILED)
        return fail(c, fx, c->error, SV_PROBE_CLOSE, NULL, 0);
    size_t at = 0;
    if (c->phase == PH_AUTH) {
        int user = -1;
        ssize_t h = parse_auth(t, p, n, &user);
        if (h < 0)
            return fail(c, fx, (int)h, SV_PROBE_FALLBACK, p, n);
        if (h == 0)
            return 0;
        sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
        e->principal = user;
        e->multiplexed = true;
        c->phase = PH_FRAMES;
        at = (size_t)h;
    }
    ssize_t r = settle_streams(c, fx);
    if (r >= 0)
        r = read_frames(c, t, p + at, n - at, fx);
    if (r < 0 && c->alert != NULL)
        return fail(c, fx, (int)r, SV_PROBE_ANSWER, c->alert, c->alert_len);
    if (r < 0)
        return fail(c, fx, (int)r, SV_PROBE_CLOSE, NULL, 0);
    return (ssize_t)(at + (size_t)r);
}

/* ---------------------------------------------------------------------------------------- */
/* Downstream                                                                                */
/* ---------------------------------------------------------------------------------------- */

static size_t frame_max(size_t len)
{
    size_t blocks = len == 0 ? 1 : (len + SV_ANYTLS_DATA_MAX - 1) / SV_ANYTLS_DATA_MAX;
    return len + blocks * SV_ANYTLS_HEAD_LEN;
}

static ssize_t frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                     size_t len, uint8_t *out, size_t cap)
{
    (void)state, (void)creds;
    if (cap < frame_max(len))
        return -EMSGSIZE;
    size_t at = 0, off = 0;
    do {
        size_t k = len - off < SV_ANYTLS_DATA_MAX ? len - off : SV_ANYTLS_DATA_MAX;
        put_head(out + at, SV_ANYTLS_PSH, stream, k);
        memcpy(out + at + SV_ANYTLS_HEAD_LEN, in + off, k);
        at += SV_ANYTLS_HEAD_LEN + k;
        off += k;
    } while (off < len);
    return (ssize_t)at;
}

static ssize_t frame_end(void *state, const void *creds, uint32_t stream, bool abort,
                         uint8_t *out, size_t cap)
{
    (void)creds, (void)abort;
    at_conn *c = state;
    if (cap < SV_ANYTLS_HEAD_LEN)
        return -EMSGSIZE;
    at_stream *s = stream_find(c, stream);
    if (s != NULL)
        stream_forget(c, s);
    put_head(out, SV_ANYTLS_FIN, stream, 0);
    return SV_ANYTLS_HEAD_LEN;
}

static ssize_t frame_datagram(void *state, const void *creds, uint32_t stream,
                              const sv_dest *from, const uint8_t *payload, size_t len,
                              uint8_t *out, size_t cap)
{
    (void)creds;
    at_conn *c = state;
    at_stream *s = stream_find(c, stream);
    if (s == NULL || s->phase != ST_UOT)
        return -EINVAL;
    size_t alen = 0;
    uint8_t addr[SV_DEST_WIRE_MAX];
    if (!s->connect) {
        if (from->atyp != SV_ATYP_IPV4 && from->atyp != SV_ATYP_IPV6 &&
            (from->atyp != SV_ATYP_DOMAIN || from->host[0] == '\0'))
            return -EINVAL;
        alen = sv_dest_encode(from, addr);
        addr[0] = from->atyp == SV_ATYP_IPV4 ? 0 : from->atyp == SV_ATYP_IPV6 ? 1 : 2;
    }
    size_t body = alen + 2 + len;
    if (body > SV_ANYTLS_DATA_MAX)
        return -EINVAL;
    if (cap < SV_ANYTLS_HEAD_LEN + body)
        return -EMSGSIZE;
    memmove(out + SV_ANYTLS_HEAD_LEN + alen + 2, payload, len);
    put_head(out, SV_ANYTLS_PSH, stream, body);
    memcpy(out + SV_ANYTLS_HEAD_LEN, addr, alen);
    out[SV_ANYTLS_HEAD_LEN + alen] = (uint8_t)(len >> 8);
    out[SV_ANYTLS_HEAD_LEN + alen + 1] = (uint8_t)len;
    return (ssize_t)(SV_ANYTLS_HEAD_LEN + body);
}

static bool more(const void *state)
{
    const at_conn *c = state;
    return c->more;
}

static const sv_proto_ext_backlog anytls_backlog = {.more = more};
static const sv_proto_ext_datagram anytls_datagram = {.frame_datagram = frame_datagram};
static const sv_proto_ext_end anytls_end = {.frame_end = frame_end};

const sv_proto_ops sv_anytls_ops = {
    .name = "anytls",
    .creds_new = creds_new,
    .creds_free = creds_free,
    .state_size = sizeof(at_conn),
    .init = conn_init,
    .deinit = conn_deinit,
    .feed = conn_feed,
    .carry_max = SV_ANYTLS_CARRY_MAX,
    .frame = frame,
    .frame_max = frame_max,
    .ext =
        {
            [SV_PROTO_CAP_BACKLOG] = &anytls_backlog,
            [SV_PROTO_CAP_DATAGRAM] = &anytls_datagram,
            [SV_PROTO_CAP_END] = &anytls_end,
        },
};
