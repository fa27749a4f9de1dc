/*
 * Unit tests: VLESS core (supervisor/proto/vless.c) through its ops table (proto.h).
 * Known answers come from tests/unit/vectors/vless.json, captured from the v2ray 4.34 client
 * (PROTOCOLS.md §5, §11). A runtime-like driver keeps the unconsumed carry and feeds it again
 * with more bytes appended, as the contract of proto.h asks.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "supervisor/proto/mux.h"
#include "supervisor/proto/vless.h"
#include "supervisor/proto/vision.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static const sv_proto_ops *const ops = &sv_vless_ops;

static json_t *g_vec;
static void *g_creds;    /* users 0, 1 (the vectors' uuid), 2; no fallback */
static void *g_creds_fb; /* the same users, inbound with a fallback */

/* ---------- fixtures ---------- */

#define UUID_A "0b8e57f4-3e7c-4d6a-9c11-5f2b7e9a0c01"
#define UUID_C "0B8E57F4-3E7C-4D6A-9C11-5F2B7E9A0C03"   /* upper case is the same id */
static char *g_secrets[] = {UUID_A, "27848739-7e62-4138-9fd3-098a63964b6b", UUID_C};

static void *creds_of(char **secrets, const uint64_t *ids, size_t n, const char *fallback,
                      int *rc, sv_error *err)
{
    sv_user *u = calloc(n ? n : 1, sizeof *u);
    assert_non_null(u);
    for (size_t i = 0; i < n; i++) {
        u[i].id = ids != NULL ? ids[i] : i + 1;
        u[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "users", .users = u, .n_users = n};
    sv_inbound_spec in = {.tag = "vl", .fallback = (char *)fallback};
    void *creds = NULL;
    *rc = ops->creds_new(&in, &set, &creds, err);
    free(u);
    return creds;
}

static int setup(void **state)
{
    (void)state;
    char path[1024];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/unit/vectors/vless.json", top ? top : TOP_SRCDIR);
    json_error_t jerr;
    g_vec = json_load_file(path, 0, &jerr);
    if (g_vec == NULL) {
        fprintf(stderr, "%s: %s\n", path, jerr.text);
        return -1;
    }
    int rc, rc2;
    sv_error err = {0};
    g_creds = creds_of(g_secrets, NULL, 3, NULL, &rc, &err);
    g_creds_fb = creds_of(g_secrets, NULL, 3, "127.0.0.1:80", &rc2, &err);
    return rc == 0 && rc2 == 0 && g_creds != NULL && g_creds_fb != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_vec);
    ops->creds_free(g_creds);
    ops->creds_free(g_creds_fb);
    return 0;
}

/* Follow a dotted path ("cases.0.request_header.command") through objects and arrays. */
static const json_t *jget(const char *path)
{
    const json_t *o = g_vec;
    char key[64];
    while (o != NULL && *path != '\0') {
        size_t k = strcspn(path, ".");
        assert_true(k < sizeof key);
        memcpy(key, path, k);
        key[k] = '\0';
        o = json_is_array(o) ? json_array_get(o, strtoul(key, NULL, 10)) : json_object_get(o, key);
        path += k + (path[k] == '.');
    }
    assert_non_null(o);
    return o;
}

static const char *jstr(const char *path)
{
    const char *s = json_string_value(jget(path));
    assert_non_null(s);
    return s;
}

static size_t jint(const char *path)
{
    return (size_t)json_integer_value(jget(path));
}

static size_t jhex(const char *path, uint8_t *out, size_t cap)
{
    const char *s = jstr(path);
    size_t n = strlen(s) / 2;
    assert_true(n <= cap && strlen(s) % 2 == 0);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    return n;
}

static void *conn_new(void)
{
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    return st;
}

static void conn_free(void *st)
{
    ops->deinit(st);
    ops->deinit(st); /* idempotent */
    free(st);
}

/* Feed once with a dirty effects list (feed empties it). */
static ssize_t feed_with(const void *creds, void *st, uint8_t *p, size_t n, sv_effects *fx)
{
    memset(fx, 0xa5, sizeof *fx);
    fx->n = 3;
    ssize_t r = ops->feed(st, creds, p, n, fx);
    assert_true(fx->n <= SV_EFFECTS_MAX);
    return r;
}

static ssize_t feed(void *st, uint8_t *p, size_t n, sv_effects *fx)
{
    return feed_with(g_creds, st, p, n, fx);
}

static void assert_dest(const sv_dest *d, uint8_t atyp, const char *text, enum sv_network net)
{
    char got[300];
    assert_int_equal(d->atyp, atyp);
    sv_dest_format(d, got, sizeof got);
    assert_string_equal(got, text);
    assert_int_equal(d->network, net);
}

/* A request of @p uuid (text), no addons, @p cmd and @p addr (style B). @return its length. */
static size_t request(uint8_t *out, const char *uuid, uint8_t cmd, const uint8_t *addr,
                      size_t alen)
{
    size_t n = 0;
    out[n++] = 0;
    assert_int_equal(sv_vless_uuid_parse(uuid, out + n), 0);
    n += SV_VLESS_UUID_LEN;
    out[n++] = 0;
    out[n++] = cmd;
    if (alen > 0)
        memcpy(out + n, addr, alen);
    return n + alen;
}

#define UUID_B "27848739-7e62-4138-9fd3-098a63964b6b"
static const uint8_t k_addr_v4[] = {0x14, 0xe9, 0x01, 127, 0, 0, 1}; /* 127.0.0.1:5353 */

/* One datagram of @p len bytes of @p fill. @return its wire length. */
static size_t datagram(uint8_t *out, size_t len, uint8_t fill)
{
    out[0] = (uint8_t)(len >> 8);
    out[1] = (uint8_t)len;
    memset(out + 2, fill, len);
    return 2 + len;
}

/* ---------- transcript of a run, the same however the input is cut ---------- */

typedef struct transcript {
    char *b;
    size_t len, cap;
} transcript;

static void tr_put(transcript *t, const void *p, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->b = realloc(t->b, t->cap);
        assert_non_null(t->b);
    }
    memcpy(t->b + t->len, p, n);
    t->len += n;
    t->b[t->len] = '\0';
}

static void tr_printf(transcript *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tr_printf(transcript *t, const char *fmt, ...)
{
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    assert_true(k > 0 && (size_t)k < sizeof line);
    tr_put(t, line, (size_t)k);
}

/*
 * Deliver @p wire in pieces of @p piece bytes through a carry buffer, the way the runtime does,
 * and log the effects: events in @p ev (datagrams with their bytes), the outbound byte stream in
 * @p out. Checks every data pointer, and that a fallback or drain error covers exactly the bytes
 * received so far. @return the final feed result (negative error, or 0).
 */
static int drive(const uint8_t *wire, size_t n, size_t piece, transcript *ev, transcript *out)
{
    void *st = conn_new();
    uint8_t *buf = malloc(n + SV_VLESS_CARRY_MAX + 1);
    assert_non_null(buf);
    size_t have = 0, in = 0;
    int rc = 0;
    for (;;) {
        sv_effects fx;
        ssize_t r = feed(st, buf, have, &fx);
        for (unsigned i = 0; i < fx.n; i++) {
            const sv_effect *e = &fx.v[i];
            char d[300];
            switch (e->kind) {
            case SV_FX_AUTHENTICATED:
                tr_printf(ev, "auth %d\n", e->principal);
                break;
            case SV_FX_OPEN:
                sv_dest_format(&e->dest, d, sizeof d);
                tr_printf(ev, "open %u %s net %d\n", e->stream, d, (int)e->dest.network);
                break;
            case SV_FX_TO_OUTBOUND:
                assert_int_equal(e->stream, 0);
                assert_true(e->len > 0 && e->data >= buf && e->data + e->len <= buf + have);
                tr_put(out, e->data, e->len);
                break;
            case SV_FX_DATAGRAM:
                assert_true(e->data >= buf && e->data + e->len <= buf + have);
                sv_dest_format(&e->dest, d, sizeof d);
                tr_printf(ev, "dgram %u %s net %d len %zu:", e->stream, d, (int)e->dest.network,
                          e->len);
                tr_put(ev, e->data, e->len);
                tr_put(ev, "\n", 1);
                break;
            case SV_FX_ERROR:
                assert_true(i == fx.n - 1 && r == e->error);
                if (e->policy == SV_PROBE_CLOSE) {
                    assert_null(e->data);
                } else {
                    assert_ptr_equal(e->data, buf);
                    assert_int_equal(e->len, have);
                    assert_int_equal(in, have); /* nothing was consumed before */
                }
                tr_printf(ev, "error %d policy %d\n", e->error, (int)e->policy);
                break;
            default:
                fail_msg("unexpected effect %d", (int)e->kind);
            }
        }
        if (r < 0) {
            rc = (int)r;
            break;
        }
        assert_true((size_t)r <= have);
        if (r > 0) {
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            continue;
        }
        assert_int_equal(fx.n, 0);
        assert_true(have <= ops->carry_max);
        if (in == n)
            break;
        size_t k = piece < n - in ? piece : n - in;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    tr_printf(ev, "rc %d\n", rc);
    free(buf);
    conn_free(st);
    return rc;
}

/* Drive @p wire whole and in pieces of 1, 2, 7 and 61 bytes; all transcripts must agree. */
static int drive_all_cuts(const uint8_t *wire, size_t n, transcript *ev, transcript *out)
{
    static const size_t pieces[] = {1, 2, 7, 61};
    int rc = drive(wire, n, n + 1, ev, out);
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        transcript ev2 = {0}, out2 = {0};
        assert_int_equal(drive(wire, n, pieces[i], &ev2, &out2), rc);
        assert_int_equal(ev2.len, ev->len);
        assert_true(ev->len == 0 || memcmp(ev->b, ev2.b, ev->len) == 0);
        assert_int_equal(out2.len, out->len);
        assert_true(out->len == 0 || memcmp(out->b, out2.b, out->len) == 0);
        free(ev2.b);
        free(out2.b);
    }
    return rc;
}

/* ---------- known answers ---------- */

static void uuid__parse_forms(void **state)
{
    (void)state;
    uint8_t id[SV_VLESS_UUID_LEN], want[SV_VLESS_UUID_LEN];
    jhex("cases.0.request_header.uuid_hex", want, sizeof want);
    assert_int_equal(sv_vless_uuid_parse(jstr("uuid"), id), 0);
    assert_memory_equal(id, want, sizeof id);
    assert_int_equal(sv_vless_uuid_parse("278487397E6241389FD3098A63964B6B", id), 0);
    assert_memory_equal(id, want, sizeof id);
    assert_int_equal(sv_vless_creds_lookup(g_creds, want), 1);

    static const char *bad[] = {
        "", "27848739-7e62-4138-9fd3-098a63964b6",   /* 35 */
        "27848739-7e62-4138-9fd3-098a63964b6bb",     /* 37 */
        "27848739x7e62-4138-9fd3-098a63964b6b",      /* dash misplaced */
        "2784873-97e62-4138-9fd3-098a63964b6b",
        "27848739-7e62-4138-9fd3-098a63964b6g",      /* not hex */
        "278487397e6241389fd3098a63964b6-",
        "katana-password",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(id, 0xee, sizeof id);
        assert_int_equal(sv_vless_uuid_parse(bad[i], id), -EINVAL);
        for (size_t k = 0; k < sizeof id; k++)
            assert_int_equal(id[k], 0);
    }
    assert_int_equal(sv_vless_uuid_parse(NULL, id), -EINVAL);
}

/* Case @p i of the vectors (TCP): the request whole, the payload in place, the reply framed. */
static void check_tcp_vector(int i, uint8_t atyp, const char *dest)
{
    char path[80];
    uint8_t p[512], want[512], out[512];
    snprintf(path, sizeof path, "cases.%d.client_to_server_hex", i);
    size_t n = jhex(path, p, sizeof p);
    snprintf(path, sizeof path, "cases.%d.request_header.header_len", i);
    size_t hl = jint(path);
    snprintf(path, sizeof path, "cases.%d.payload_text", i);
    const char *payload = jstr(path);

    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 3);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[0].principal, 1);
    assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
    assert_int_equal(fx.v[1].stream, 0);
    assert_dest(&fx.v[1].dest, atyp, dest, SV_NET_TCP);
    assert_int_equal(fx.v[2].kind, SV_FX_TO_OUTBOUND);
    assert_ptr_equal(fx.v[2].data, p + hl); /* into the caller's buffer, no copy */
    assert_int_equal(fx.v[2].len, strlen(payload));
    assert_memory_equal(fx.v[2].data, payload, strlen(payload));

    /* The reply: the response header once, before the first bytes. */
    snprintf(path, sizeof path, "cases.%d.server_to_client_hex", i);
    size_t wn = jhex(path, want, sizeof want);
    snprintf(path, sizeof path, "cases.%d.server_reply_payload_text", i);
    const char *pong = jstr(path);
    assert_int_equal(wn, SV_VLESS_RESPONSE_LEN + strlen(pong));
    assert_int_equal(ops->frame(st, g_creds, 0, (const uint8_t *)pong, strlen(pong), out,
                                sizeof out),
                     wn);
    assert_memory_equal(out, want, wn);
    assert_int_equal(ops->frame(st, g_creds, 0, (const uint8_t *)pong, strlen(pong), out,
                                sizeof out),
                     strlen(pong));
    assert_memory_equal(out, pong, strlen(pong));
    conn_free(st);
}

static void tcp__vectors(void **state)
{
    (void)state;
    assert_string_equal(jstr("cases.0.name"), "vless-tcp-domain");
    check_tcp_vector(0, SV_ATYP_DOMAIN, "example.test:80");
    assert_string_equal(jstr("cases.0.request_header.address.host"), "example.test");
    assert_string_equal(jstr("cases.1.name"), "vless-tcp-ipv6");
    check_tcp_vector(1, SV_ATYP_IPV6, "[::1]:443");
}

static void tcp__later_bytes_relayed_in_place(void **state)
{
    (void)state;
    uint8_t p[64];
    size_t n = request(p, UUID_C, SV_VLESS_TCP, k_addr_v4, sizeof k_addr_v4);
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 2); /* no payload: no TO_OUTBOUND */
    assert_int_equal(fx.v[0].principal, 2);
    assert_dest(&fx.v[1].dest, SV_ATYP_IPV4, "127.0.0.1:5353", SV_NET_TCP);
    uint8_t more[] = "more bytes";
    assert_int_equal(feed(st, more, 10, &fx), 10);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_TO_OUTBOUND);
    assert_ptr_equal(fx.v[0].data, more);
    assert_int_equal(fx.v[0].len, 10);
    assert_int_equal(feed(st, more, 0, &fx), 0);
    assert_int_equal(fx.n, 0);
    conn_free(st);
}

static void udp__vector(void **state)
{
    (void)state;
    uint8_t p[512], want[128], out[128];
    size_t n = jhex("cases.2.client_to_server_hex", p, sizeof p);
    const char *payload = jstr("cases.2.decoded_udp_packets.0.payload_text");
    assert_int_equal(jint("cases.2.request_header.command"), SV_VLESS_UDP);
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 3);
    assert_int_equal(fx.v[0].principal, 1);
    assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
    assert_dest(&fx.v[1].dest, SV_ATYP_IPV4, "127.0.0.1:5353", SV_NET_UDP);
    assert_int_equal(fx.v[2].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[2].stream, 0);
    assert_dest(&fx.v[2].dest, SV_ATYP_IPV4, "127.0.0.1:5353", SV_NET_UDP);
    assert_int_equal(fx.v[2].len, strlen(payload));
    assert_ptr_equal(fx.v[2].data, p + n - strlen(payload));
    assert_memory_equal(fx.v[2].data, payload, strlen(payload));

    /* The reply: header, length, payload; the source address is not on the wire. */
    size_t wn = jhex("cases.2.server_to_client_hex", want, sizeof want);
    const char *pong = jstr("cases.2.server_reply_payload_text");
    sv_dest from = {.atyp = SV_ATYP_IPV4, .ip = {10, 9, 8, 7}, .port = 1};
    assert_non_null(sv_proto_datagram(ops));
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         st, g_creds, 0, &from, (const uint8_t *)pong, strlen(pong), out, wn - 1),
                     -EMSGSIZE); /* no room: nothing written, the header still owed */
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         st, g_creds, 0, &from, (const uint8_t *)pong, strlen(pong), out, wn),
                     wn);
    assert_memory_equal(out, want, wn);
    /* Later datagrams: length and payload only. */
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(st, g_creds, 0, &from,
                                                            (const uint8_t *)pong, strlen(pong),
                                                            out, sizeof out),
                     wn - SV_VLESS_RESPONSE_LEN);
    assert_memory_equal(out, want + SV_VLESS_RESPONSE_LEN, wn - SV_VLESS_RESPONSE_LEN);
    conn_free(st);
}

static void frame__bounds(void **state)
{
    (void)state;
    static uint8_t in[70000], out[70010];
    memset(in, 0x42, sizeof in);
    /* room for a Mux.Cool Keep header and Vision's frames */
    assert_int_equal(ops->frame_max(100), 2 + sv_vision_pad_max(8 + 100));
    void *st = conn_new();
    assert_int_equal(ops->frame(st, g_creds, 0, in, 100, out, 101), -EMSGSIZE);
    assert_int_equal(ops->frame(st, g_creds, 0, in, 100, out, 102), 102);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 0);
    assert_memory_equal(out + 2, in, 100);
    assert_int_equal(ops->frame(st, g_creds, 0, in, 100, out, 99), -EMSGSIZE);
    assert_int_equal(ops->frame(st, g_creds, 0, in, 100, out, 100), 100);
    conn_free(st);

    st = conn_new();
    sv_dest from = {.atyp = SV_ATYP_DOMAIN, .host = "dns.test", .port = 53};
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         st, g_creds, 0, &from, in, SV_VLESS_UDP_PAYLOAD_MAX + 1, out, sizeof out),
                     -EINVAL);
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         st, g_creds, 0, &from, in, SV_VLESS_UDP_PAYLOAD_MAX, out, sizeof out),
                     2 + 2 + SV_VLESS_UDP_PAYLOAD_MAX);
    assert_int_equal(out[2], SV_VLESS_UDP_PAYLOAD_MAX >> 8);
    assert_int_equal(out[3], SV_VLESS_UDP_PAYLOAD_MAX & 0xff);
    assert_int_equal(
        sv_proto_datagram(ops)->frame_datagram(st, g_creds, 0, &from, in, 0, out, sizeof out), 2);
    conn_free(st);
}

/* ---------- whole input vs piecewise ---------- */

static void cuts__vectors_agree(void **state)
{
    (void)state;
    uint8_t p[512];
    transcript ev = {0}, out = {0};

    size_t n = jhex("cases.0.client_to_server_hex", p, sizeof p);
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    assert_string_equal(ev.b, "auth 1\nopen 0 example.test:80 net 1\nrc 0\n");
    const char *payload = jstr("cases.0.payload_text");
    assert_int_equal(out.len, strlen(payload));
    assert_memory_equal(out.b, payload, out.len);
    free(ev.b);
    free(out.b);

    ev = (transcript){0};
    out = (transcript){0};
    n = jhex("cases.1.client_to_server_hex", p, sizeof p);
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    assert_string_equal(ev.b, "auth 1\nopen 0 [::1]:443 net 1\nrc 0\n");
    free(ev.b);
    free(out.b);

    ev = (transcript){0};
    out = (transcript){0};
    n = jhex("cases.2.client_to_server_hex", p, sizeof p);
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    assert_string_equal(ev.b, "auth 1\nopen 0 127.0.0.1:5353 net 2\n"
                              "dgram 0 127.0.0.1:5353 net 2 len 14:udp ping vless\nrc 0\n");
    assert_int_equal(out.len, 0);
    free(ev.b);
    free(out.b);

    /* A refused request: the same error whatever the cut, drained with every byte. */
    ev = (transcript){0};
    out = (transcript){0};
    const char *get = "GET / HTTP/1.1\r\nHost: node.test\r\n\r\n";
    assert_int_equal(drive_all_cuts((const uint8_t *)get, strlen(get), &ev, &out), -EPROTO);
    assert_string_equal(ev.b, "error -71 policy 2\nrc -71\n");
    free(ev.b);
    free(out.b);
}

static void udp__datagrams_split_and_oversized_dropped(void **state)
{
    (void)state;
    static uint8_t p[3 * SV_VLESS_UDP_PAYLOAD_MAX];
    size_t n = request(p, UUID_B, SV_VLESS_UDP, k_addr_v4, sizeof k_addr_v4);
    size_t hl = n;
    n += datagram(p + n, 1000, 'x');
    n += datagram(p + n, 0, 0);                             /* an empty datagram is one */
    n += datagram(p + n, SV_VLESS_UDP_PAYLOAD_MAX + 1, 'o'); /* read and dropped */
    n += datagram(p + n, 3, 'y');
    n += datagram(p + n, SV_VLESS_UDP_PAYLOAD_MAX, 'm');    /* the largest delivered */

    /* By hand: 13-byte feeds return 0 until the first datagram is whole. */
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, hl, &fx), hl);
    assert_int_equal(fx.n, 2);
    size_t have = 0, feeds = 0;
    for (;;) {
        have += 13;
        feeds++;
        ssize_t r = feed(st, p + hl, have, &fx);
        if (r > 0) { /* with the empty datagram and the start of the oversized one */
            assert_int_equal(r, have);
            assert_true(r >= 2 + 1000 + 2 + 2);
            break;
        }
        assert_int_equal(r, 0);
        assert_int_equal(fx.n, 0);
    }
    assert_true(feeds > 70);
    assert_int_equal(fx.v[0].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[0].len, 1000);
    assert_ptr_equal(fx.v[0].data, p + hl + 2);
    conn_free(st);

    transcript ev = {0}, out = {0};
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    static char want[2 * SV_VLESS_UDP_PAYLOAD_MAX];
    int k = snprintf(want, sizeof want,
                     "auth 1\nopen 0 127.0.0.1:5353 net 2\ndgram 0 127.0.0.1:5353 net 2 len "
                     "1000:%.*s\ndgram 0 127.0.0.1:5353 net 2 len 0:\n"
                     "dgram 0 127.0.0.1:5353 net 2 len 3:yyy\n"
                     "dgram 0 127.0.0.1:5353 net 2 len %d:%.*s\nrc 0\n",
                     1000, (const char *)p + hl + 2, SV_VLESS_UDP_PAYLOAD_MAX,
                     SV_VLESS_UDP_PAYLOAD_MAX, (const char *)p + n - SV_VLESS_UDP_PAYLOAD_MAX);
    assert_true(k > 0 && (size_t)k < sizeof want);
    assert_string_equal(ev.b, want);
    free(ev.b);
    free(out.b);
    assert_true(ops->carry_max >= 2 + SV_VLESS_UDP_PAYLOAD_MAX);
    assert_true(ops->carry_max >= SV_VLESS_HEADER_MAX);
    assert_int_equal(SV_VLESS_HEADER_MAX, 1 + 16 + 1 + 255 + 1 + 2 + 1 + 1 + 255);
}

static void udp__many_datagrams_fill_the_effects(void **state)
{
    (void)state;
    static uint8_t p[4096];
    size_t n = request(p, UUID_B, SV_VLESS_UDP, k_addr_v4, sizeof k_addr_v4);
    size_t hl = n, dlen = 2 + 5;
    for (int i = 0; i < 40; i++)
        n += datagram(p + n, 5, (uint8_t)('A' + i));
    p[n++] = 0; /* a partial 41st datagram */

    void *st = conn_new();
    sv_effects fx;
    ssize_t r = feed(st, p, n, &fx);
    assert_int_equal(fx.n, SV_EFFECTS_MAX);
    assert_int_equal(r, hl + (SV_EFFECTS_MAX - 2) * dlen);
    int next = 0;
    for (unsigned i = 2; i < fx.n; i++, next++) {
        assert_int_equal(fx.v[i].kind, SV_FX_DATAGRAM);
        assert_int_equal(fx.v[i].data[0], 'A' + next);
    }
    size_t off = (size_t)r;
    while (next < 40) {
        r = feed(st, p + off, n - off, &fx);
        assert_true(r > 0);
        assert_int_equal((size_t)r, fx.n * dlen);
        for (unsigned i = 0; i < fx.n; i++, next++) {
            assert_int_equal(fx.v[i].kind, SV_FX_DATAGRAM);
            assert_ptr_equal(fx.v[i].data, p + off + i * dlen + 2);
            assert_int_equal(fx.v[i].data[0], 'A' + next);
        }
        off += (size_t)r;
    }
    assert_int_equal(n - off, 1);
    assert_int_equal(feed(st, p + off, n - off, &fx), 0); /* the partial datagram stays */
    assert_int_equal(fx.n, 0);
    conn_free(st);
}

/* ---------- refusals ---------- */

typedef struct bad_request {
    const char *what;
    uint8_t wire[600];
    size_t len;    /* bytes of wire */
    size_t decide; /* the prefix length at which the core refuses */
    int error;
    enum sv_probe_policy policy; /* without a fallback */
} bad_request;

/*
 * Feed every prefix of @p b to a core without and with a fallback: shorter than b->decide → 0,
 * no effect; from b->decide on → the error with its policy. Before the UUID matched (DRAIN
 * without a fallback, FALLBACK with one) data/len is the whole prefix; after, CLOSE, no data.
 */
static void assert_refused_at(const bad_request *b)
{
    for (int fb = 0; fb < 2; fb++) {
        enum sv_probe_policy want = b->policy;
        if (fb && want == SV_PROBE_DRAIN)
            want = SV_PROBE_FALLBACK;
        for (size_t k = 0; k <= b->len; k++) {
            void *st = conn_new();
            uint8_t buf[600];
            memcpy(buf, b->wire, k);
            sv_effects fx;
            ssize_t r = feed_with(fb ? g_creds_fb : g_creds, st, buf, k, &fx);
            if (k < b->decide) {
                if (r != 0 || fx.n != 0)
                    fail_msg("%s: prefix %zu: %zd, %u effects", b->what, k, r, fx.n);
            } else {
                if (r != b->error || fx.n != 1)
                    fail_msg("%s: prefix %zu: %zd (want %d), %u effects", b->what, k, r,
                             b->error, fx.n);
                assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
                assert_int_equal(fx.v[0].error, b->error);
                assert_int_equal(fx.v[0].policy, want);
                if (want == SV_PROBE_CLOSE) {
                    assert_null(fx.v[0].data);
                    assert_int_equal(fx.v[0].len, 0);
                } else {
                    assert_ptr_equal(fx.v[0].data, buf);
                    assert_int_equal(fx.v[0].len, k);
                }
                /* Failed for good: no more input is taken. */
                assert_true(feed(st, buf, k, &fx) < 0);
                assert_int_equal(fx.n, 1);
                assert_int_equal(fx.v[0].policy, SV_PROBE_CLOSE);
            }
            conn_free(st);
        }
    }
}

static void bad_add(bad_request *b, const void *p, size_t n)
{
    assert_true(b->len + n <= sizeof b->wire);
    memcpy(b->wire + b->len, p, n);
    b->len += n;
}

/* Version 0 and @p uuid: the first 17 bytes of a request. */
static void bad_start(bad_request *b, const char *what, const char *uuid)
{
    memset(b, 0, sizeof *b);
    b->what = what;
    uint8_t id[SV_VLESS_UUID_LEN];
    assert_int_equal(sv_vless_uuid_parse(uuid, id), 0);
    bad_add(b, "\0", 1);
    bad_add(b, id, sizeof id);
}

static void refuse__before_the_uuid(void **state)
{
    (void)state;
    bad_request b;

    bad_start(&b, "browser", UUID_B);
    b.len = 0;
    bad_add(&b, "GET / HTTP/1.1\r\n\r\n", 18);
    b.decide = 1, b.error = -EPROTO, b.policy = SV_PROBE_DRAIN;
    assert_refused_at(&b);

    bad_start(&b, "version 1", UUID_B);
    b.wire[0] = 1;
    bad_add(&b, "\x00\x01\x00\x50\x01\x7f\x00\x00\x01", 9);
    b.decide = 1, b.error = -EPROTO, b.policy = SV_PROBE_DRAIN;
    assert_refused_at(&b);

    bad_start(&b, "unknown uuid", "27848739-7e62-4138-9fd3-098a63964b6c");
    bad_add(&b, "\x00\x01\x00\x50\x01\x7f\x00\x00\x01", 9);
    b.decide = 17, b.error = -EACCES, b.policy = SV_PROBE_DRAIN;
    assert_refused_at(&b);
}

static void refuse__after_the_uuid(void **state)
{
    (void)state;
    bad_request b;

    /* PROTOCOLS-2.md §2.2: "not able to use the flow" on a node without flow */
    bad_start(&b, "flow xtls-rprx-vision on a node without flow", UUID_B);
    bad_add(&b, "\x12\x0a\x10xtls-rprx-vision", 20);
    bad_add(&b, "\x01\x00\x50\x01\x7f\x00\x00\x01", 8);
    b.decide = 18 + 18, b.error = -EPERM, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    /* "unknown request flow" */
    bad_start(&b, "flow xtls-rprx-direct", UUID_B);
    bad_add(&b, "\x12\x0a\x10xtls-rprx-direct", 20);
    bad_add(&b, "\x01\x00\x50\x01\x7f\x00\x00\x01", 8);
    b.decide = 18 + 18, b.error = -EPROTONOSUPPORT, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "addons: truncated string", UUID_B);
    bad_add(&b, "\x03\x0a\x05x", 4);
    bad_add(&b, "\x01\x00\x50\x01\x7f\x00\x00\x01", 8);
    b.decide = 18 + 3, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "addons: flow as a varint", UUID_B);
    bad_add(&b, "\x02\x08\x01", 3);
    bad_add(&b, "\x01\x00\x50\x01\x7f\x00\x00\x01", 8);
    b.decide = 18 + 2, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "addons: field 0", UUID_B);
    bad_add(&b, "\x02\x02\x00", 3);
    b.decide = 18 + 2, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "addons: wire type 3", UUID_B);
    bad_add(&b, "\x01\x13", 2);
    b.decide = 18 + 1, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "addons: unterminated varint", UUID_B);
    bad_add(&b, "\x02\x18\x80", 3);
    b.decide = 18 + 2, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "addons: fixed64 cut short", UUID_B);
    bad_add(&b, "\x04\x19\x01\x02\x03", 5);
    b.decide = 18 + 4, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "command 4", UUID_B);
    bad_add(&b, "\x00\x04\x00\x50\x01\x7f\x00\x00\x01", 9);
    b.decide = 19, b.error = -EPROTONOSUPPORT, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "address type 4", UUID_B);
    bad_add(&b, "\x00\x01\x00\x50\x04\x7f\x00\x00\x01", 9);
    b.decide = 22, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "empty domain", UUID_B);
    bad_add(&b, "\x00\x01\x00\x50\x02\x00", 6);
    b.decide = 23, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE;
    assert_refused_at(&b);

    bad_start(&b, "NUL in domain", UUID_B);
    bad_add(&b, "\x00\x01\x00\x50\x02\x03" "a\0b", 9);
    b.decide = 26, b.error = -EPROTO, b.policy = SV_PROBE_CLOSE; /* once the name is whole */
    assert_refused_at(&b);
}

/* Command 3 (§5.4, §7.1): no address in the header; the body is Mux.Cool frames, one stream
 * per session; downstream bytes become Keep frames after the response header, and frame_end
 * writes the session's End frame. A later Keep for that session gets End back. */
static void mux__sessions_and_end(void **state)
{
    (void)state;
    static const uint8_t new_tcp[] = {0x00, 0x0c, 0x00, 0x01, 0x01, 0x01, 0x01, 0x00, 0x50,
                                      0x01, 127,  0,    0,    1,    0x00, 0x03, 'a',  'b', 'c'};
    static const uint8_t keep2[] = {0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x02, 'd', 'e'};
    static const uint8_t end1[] = {0x00, 0x04, 0x00, 0x01, 0x03, 0x00};
    uint8_t p[256];
    size_t n = request(p, UUID_B, SV_VLESS_MUX, NULL, 0);
    size_t hl = n;
    memcpy(p + n, new_tcp, sizeof new_tcp);
    n += sizeof new_tcp;
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, hl, &fx), hl); /* the header alone is consumed */
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_true(fx.v[0].multiplexed);
    assert_int_equal(feed(st, p + hl, n - hl, &fx), n - hl);
    assert_int_equal(fx.n, 2);
    assert_int_equal(fx.v[0].kind, SV_FX_OPEN);
    assert_int_equal(fx.v[0].stream, 1);
    assert_dest(&fx.v[0].dest, SV_ATYP_IPV4, "127.0.0.1:80", SV_NET_TCP);
    assert_int_equal(fx.v[1].kind, SV_FX_TO_OUTBOUND);
    assert_int_equal(fx.v[1].stream, 1);
    assert_int_equal(fx.v[1].len, 3);
    assert_memory_equal(fx.v[1].data, "abc", 3);

    uint8_t out[64];
    ssize_t w = ops->frame(st, g_creds, 1, (const uint8_t *)"xyz", 3, out, sizeof out);
    static const uint8_t want[] = {0x00, 0x00, 0x00, 0x04, 0x00, 0x01, 0x02,
                                   0x01, 0x00, 0x03, 'x',  'y',  'z'};
    assert_int_equal(w, sizeof want);
    assert_memory_equal(out, want, sizeof want);
    w = sv_proto_end(ops)->frame_end(st, g_creds, 1, false, out, sizeof out);
    assert_int_equal(w, sizeof end1);
    assert_memory_equal(out, end1, sizeof end1);

    memcpy(p, keep2, sizeof keep2); /* the session is gone: End back, data dropped */
    assert_int_equal(feed(st, p, sizeof keep2, &fx), sizeof keep2);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_TO_CLIENT);
    assert_int_equal(fx.v[0].len, sizeof end1);
    assert_memory_equal(fx.v[0].data, end1, sizeof end1);
    conn_free(st);

    /* single-flow VLESS has no end-of-stream bytes */
    st = conn_new();
    n = request(p, UUID_B, SV_VLESS_TCP, k_addr_v4, sizeof k_addr_v4);
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_false(fx.v[0].multiplexed);
    assert_int_equal(sv_proto_end(ops)->frame_end(st, g_creds, 0, false, out, sizeof out), 0);
    conn_free(st);
}

/* The decoder's End answer to a Keep for a session it does not know (here: never opened; in
 * life: one that ended here, e.g. killed, while the client still sent) is the downstream's
 * next bytes: the first ones start with the response header, later frames do not repeat it,
 * and it goes ahead of the call's other effects (the client reads the downstream in order). */
static void mux__end_answer_after_the_response_header(void **state)
{
    (void)state;
    static const uint8_t body[] = {
        0x00, 0x0c, 0x00, 0x01, 0x01, 0x01, 0x01, 0x00, 0x50, 0x01, 127, 0, 0, 1, /* New 1 */
        0x00, 0x01, 'a',
        0x00, 0x04, 0x00, 0x09, 0x02, 0x01, 0x00, 0x01, 'q'}; /* Keep 9: never opened */
    static const uint8_t want[] = {0x00, 0x00, 0x00, 0x04, 0x00, 0x09, 0x03, 0x00};
    uint8_t p[256];
    size_t n = request(p, UUID_B, SV_VLESS_MUX, NULL, 0);
    memcpy(p + n, body, sizeof body);
    n += sizeof body;
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 4);
    assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[1].kind, SV_FX_TO_CLIENT);
    assert_int_equal(fx.v[1].len, sizeof want);
    assert_memory_equal(fx.v[1].data, want, sizeof want);
    assert_int_equal(fx.v[2].kind, SV_FX_OPEN);
    assert_int_equal(fx.v[3].kind, SV_FX_TO_OUTBOUND);
    uint8_t out[64];
    static const uint8_t keep1[] = {0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x01, 'x'};
    assert_int_equal(ops->frame(st, g_creds, 1, (const uint8_t *)"x", 1, out, sizeof out),
                     sizeof keep1);
    assert_memory_equal(out, keep1, sizeof keep1);
    conn_free(st);
}

/* XUDP (issue 10, PROTOCOLS-2.md §5): Xray's New frame with a GlobalID opens a UDP session;
 * a Keep frame's address is that datagram's destination; each reply is a Keep frame carrying
 * its source (full cone), after the response header on the first. */
static void mux__xudp_datagrams_carry_addresses(void **state)
{
    (void)state;
    static const uint8_t frames[] = {
        0x00, 0x14, 0x00, 0x00, 0x01, 0x01, 0x02, 0x14, 0xe9, 0x01, 127, 0, 0, 1, /* New */
        1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x02, 'h', 'i',                             /* GlobalID */
        0x00, 0x0c, 0x00, 0x00, 0x02, 0x01, 0x02, 0x00, 0x35, 0x01, 127, 0, 0, 2, /* Keep */
        0x00, 0x01, 'x'};
    uint8_t p[256];
    size_t n = request(p, UUID_B, SV_VLESS_MUX, NULL, 0);
    memcpy(p + n, frames, sizeof frames);
    n += sizeof frames;
    void *st = conn_new();
    sv_effects fx;
    assert_int_equal(feed(st, p, n, &fx), n);
    assert_int_equal(fx.n, 4);
    assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
    assert_dest(&fx.v[1].dest, SV_ATYP_IPV4, "127.0.0.1:5353", SV_NET_UDP);
    assert_int_equal(fx.v[2].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[2].len, 2);
    assert_dest(&fx.v[2].dest, SV_ATYP_IPV4, "127.0.0.1:5353", SV_NET_UDP);
    assert_int_equal(fx.v[3].kind, SV_FX_DATAGRAM);
    assert_int_equal(fx.v[3].len, 1);
    assert_memory_equal(fx.v[3].data, "x", 1);
    assert_dest(&fx.v[3].dest, SV_ATYP_IPV4, "127.0.0.2:53", SV_NET_UDP);

    sv_dest from = {.atyp = SV_ATYP_IPV4, .ip = {127, 0, 0, 3}, .port = 7};
    uint8_t out[SV_MUX_DGRAM_HEAD_MAX + SV_MUX_UDP_PAYLOAD_MAX + 8];
    static const uint8_t want[] = {0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x02, 0x01, 0x02,
                                   0x00, 0x07, 0x01, 127,  0,    0,    3,    0x00, 0x02,
                                   'o',  'k'};
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         st, g_creds, 0, &from, (const uint8_t *)"ok", 2, out, sizeof out),
                     sizeof want);
    assert_memory_equal(out, want, sizeof want);
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         st, g_creds, 0, &from, (const uint8_t *)"ok", 2, out, sizeof out),
                     sizeof want - 2); /* header went */
    assert_memory_equal(out, want + 2, sizeof want - 2);
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(
                         st, g_creds, 0, &from, out, SV_MUX_UDP_PAYLOAD_MAX + 1, out, sizeof out),
                     -EINVAL);
    assert_int_equal(sv_proto_datagram(ops)->frame_datagram(st, g_creds, 0, &from,
                                                            (const uint8_t *)"ok", 2, out, 20),
                     -EMSGSIZE);
    conn_free(st);
}

static void addons__seed_and_empty_flow_accepted(void **state)
{
    (void)state;
    uint8_t p[128];
    size_t n = 0;
    p[n++] = 0;
    assert_int_equal(sv_vless_uuid_parse(UUID_A, p + n), 0);
    n += SV_VLESS_UUID_LEN;
    /* Flow "" (field 1, length 0), Seed "ab" (field 2), field 3 varint, field 4 fixed32. */
    static const uint8_t addons[] = {0x0a, 0x00, 0x12, 0x02, 'a', 'b', 0x18, 0x96, 0x01,
                                     0x25, 1, 2, 3, 4};
    p[n++] = sizeof addons;
    memcpy(p + n, addons, sizeof addons);
    n += sizeof addons;
    p[n++] = SV_VLESS_TCP;
    static const uint8_t dom[] = {0x01, 0xbb, 0x02, 0x08, 'n', 'o', 'd', 'e', '.', 't', 'e', 's'};
    memcpy(p + n, dom, sizeof dom);
    n += sizeof dom;
    memcpy(p + n, "hi", 2);
    n += 2;

    transcript ev = {0}, out = {0};
    assert_int_equal(drive_all_cuts(p, n, &ev, &out), 0);
    assert_string_equal(ev.b, "auth 0\nopen 0 node.tes:443 net 1\nrc 0\n");
    assert_int_equal(out.len, 2);
    assert_memory_equal(out.b, "hi", 2);
    free(ev.b);
    free(out.b);
}

static void refuse__empty_user_set(void **state)
{
    (void)state;
    int rc;
    sv_error err = {0};
    void *creds = creds_of(NULL, NULL, 0, NULL, &rc, &err);
    assert_int_equal(rc, 0);
    uint8_t p[512];
    size_t n = jhex("cases.0.client_to_server_hex", p, sizeof p);
    assert_int_equal(sv_vless_creds_lookup(creds, p + 1), -1);
    void *st = conn_new();
    sv_effects fx = {0};
    assert_int_equal(ops->feed(st, creds, p, n, &fx), -EACCES);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].policy, SV_PROBE_DRAIN);
    assert_ptr_equal(fx.v[0].data, p);
    assert_int_equal(fx.v[0].len, n);
    conn_free(st);
    ops->creds_free(creds);
}

/* ---------- credentials ---------- */

static void creds__duplicates_and_bad_secrets_refused(void **state)
{
    (void)state;
    char *secrets[] = {UUID_A, UUID_B, UUID_C, "278487397E6241389FD3098A63964B6B"};
    uint64_t ids[] = {7, 12, 30, 41};
    int rc;
    sv_error err = {0};
    void *creds = creds_of(secrets, ids, 4, NULL, &rc, &err);
    assert_null(creds);
    assert_int_equal(rc, -EINVAL);
    assert_int_equal(err.code, -EINVAL);
    assert_string_equal(err.msg, "user set users: users 12 and 41 have the same uuid");

    char *bad[] = {UUID_A, "not-a-uuid"};
    err = (sv_error){0};
    creds = creds_of(bad, ids, 2, NULL, &rc, &err);
    assert_null(creds);
    assert_int_equal(rc, -EINVAL);
    assert_string_equal(err.msg, "user set users: user 12 has a uuid that is not a UUID");

    sv_user_set huge = {.tag = "big", .n_users = (size_t)SV_USERS_MAX + 1};
    assert_int_equal(ops->creds_new(NULL, &huge, &creds, &err), -EINVAL);
    assert_null(creds);

    ops->creds_free(NULL);
    assert_int_equal(sv_vless_creds_lookup(NULL, (const uint8_t *)"0123456789abcdef"), -1);
}

static void creds__users_max_build_and_look_up(void **state)
{
    (void)state;
    size_t n = SV_USERS_MAX;
    char **secrets = calloc(n, sizeof *secrets);
    assert_non_null(secrets);
    for (size_t i = 0; i < n; i++) {
        secrets[i] = malloc(40);
        assert_non_null(secrets[i]);
        snprintf(secrets[i], 40, "%08zx-1b2c-4d3e-8f40-%012zx", (i * 7919) & 0xffffffffu, i);
    }
    int rc;
    sv_error err = {0};
    void *creds = creds_of(secrets, NULL, n, NULL, &rc, &err);
    assert_int_equal(rc, 0);
    assert_non_null(creds);
    uint8_t id[SV_VLESS_UUID_LEN];
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(sv_vless_uuid_parse(secrets[i], id), 0);
        if (sv_vless_creds_lookup(creds, id) != (int)i)
            fail_msg("user %zu not found", i);
    }
    for (size_t i = 0; i < 1000; i++) {
        char other[40];
        snprintf(other, sizeof other, "%08zx-1b2c-4d3e-8f41-%012zx", i * 7919, i);
        assert_int_equal(sv_vless_uuid_parse(other, id), 0);
        assert_int_equal(sv_vless_creds_lookup(creds, id), -1);
    }

    /* A request of the last user through feed. */
    uint8_t p[64];
    size_t len = request(p, secrets[n - 1], SV_VLESS_TCP, k_addr_v4, sizeof k_addr_v4);
    void *st = conn_new();
    sv_effects fx = {0};
    assert_int_equal(ops->feed(st, creds, p, len, &fx), len);
    assert_int_equal(fx.v[0].principal, (int)(n - 1));
    conn_free(st);

    ops->creds_free(creds);
    for (size_t i = 0; i < n; i++)
        free(secrets[i]);
    free(secrets);
    assert_string_equal(ops->name, "vless");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(uuid__parse_forms),
        cmocka_unit_test(tcp__vectors),
        cmocka_unit_test(tcp__later_bytes_relayed_in_place),
        cmocka_unit_test(udp__vector),
        cmocka_unit_test(frame__bounds),
        cmocka_unit_test(cuts__vectors_agree),
        cmocka_unit_test(udp__datagrams_split_and_oversized_dropped),
        cmocka_unit_test(udp__many_datagrams_fill_the_effects),
        cmocka_unit_test(refuse__before_the_uuid),
        cmocka_unit_test(refuse__after_the_uuid),
        cmocka_unit_test(addons__seed_and_empty_flow_accepted),
        cmocka_unit_test(mux__sessions_and_end),
        cmocka_unit_test(mux__end_answer_after_the_response_header),
        cmocka_unit_test(mux__xudp_datagrams_carry_addresses),
        cmocka_unit_test(refuse__empty_user_set),
        cmocka_unit_test(creds__duplicates_and_bad_secrets_refused),
        cmocka_unit_test(creds__users_max_build_and_look_up),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
