/*
 * Unit tests of the gRPC transport (issue 10, PROTOCOLS-2.md §3): the gun codec (header
 * vectors, decoding whole vs byte at a time vs in pieces, every error) and the core
 * (sv_grpc_ops over the Trojan core) driven by a real HTTP/2 client (nghttp2's client session):
 * a Tun stream authenticates, opens and carries bytes both ways as one multiplexed sub-flow,
 * ends with grpc-status 0; the same whole and byte at a time; a wrong path gets grpc-status 12
 * and no effect; a second user on the same connection is reset alone; a stream ended while
 * the runtime applies the effects keeps the HTTP/2 bytes in order; a client that does not
 * speak HTTP/2 gets the fallback policy with every byte; VLESS Mux.Cool (TCP and XUDP sessions)
 * inside two streams: each session its own sub-flow with a unique ID, replies and End frames
 * back on the right stream and session, whole and byte at a time.
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
#include <nghttp2/nghttp2.h>
#include <openssl/evp.h>

#include "supervisor/proto/trojan.h"
#include "supervisor/proto/vless.h"
#include "supervisor/transport/grpc.h"

/* ---- gun codec ---------------------------------------------------------------------------- */

static void gun__header__vectors(void **state)
{
    (void)state;
    uint8_t h[SV_GUN_HDR_MAX];
    static const uint8_t one[] = {0, 0, 0, 0, 3, 0x0A, 1};
    assert_int_equal(sv_gun_header(1, h), sizeof one);
    assert_memory_equal(h, one, sizeof one);
    static const uint8_t two00[] = {0, 0, 0, 0, 203, 0x0A, 0xC8, 0x01};
    assert_int_equal(sv_gun_header(200, h), sizeof two00);
    assert_memory_equal(h, two00, sizeof two00);
    static const uint8_t big[] = {0, 0, 1, 0, 4, 0x0A, 0x80, 0x80, 0x04};
    assert_int_equal(sv_gun_header(65536, h), sizeof big);
    assert_memory_equal(h, big, sizeof big);
}

/* A stream of messages: Hunk "hello", an empty message, a MultiHunk "a", "" and "bc", a Hunk
 * of 300 bytes (two-byte varint); the data is "hello" "a" "bc" and the 300 bytes. */
static size_t sample(uint8_t *w, uint8_t *want, size_t *want_len)
{
    size_t n = 0, d = 0;
    n += sv_gun_header(5, w + n);
    memcpy(w + n, "hello", 5);
    n += 5;
    memcpy(want + d, "hello", 5);
    d += 5;
    static const uint8_t empty[] = {0, 0, 0, 0, 0};
    memcpy(w + n, empty, 5);
    n += 5;
    static const uint8_t multi[] = {0, 0, 0, 0, 9, 0x0A, 1, 'a', 0x0A, 0, 0x0A, 2, 'b', 'c'};
    memcpy(w + n, multi, sizeof multi);
    n += sizeof multi;
    memcpy(want + d, "abc", 3);
    d += 3;
    n += sv_gun_header(300, w + n);
    for (int i = 0; i < 300; i++)
        w[n++] = want[d++] = (uint8_t)(i * 7);
    *want_len = d;
    return n;
}

static void gun__decode__whole_bytewise_and_pieces_agree(void **state)
{
    (void)state;
    uint8_t wire[512], want[512], out[512];
    size_t want_len = 0, n = sample(wire, want, &want_len);
    for (size_t piece = 1; piece <= n; piece = piece == 1 ? 7 : piece == 7 ? n : n + 1) {
        sv_gun_decoder d = {0};
        size_t got = 0;
        for (size_t off = 0; off < n; off += piece) {
            size_t k = n - off < piece ? n - off : piece;
            ssize_t r = sv_gun_decode(&d, wire + off, k, out + got);
            assert_true(r >= 0);
            got += (size_t)r;
        }
        assert_int_equal(got, want_len);
        assert_memory_equal(out, want, want_len);
    }
    /* in place, as the core may do */
    sv_gun_decoder d = {0};
    uint8_t copy[512];
    memcpy(copy, wire, n);
    assert_int_equal(sv_gun_decode(&d, copy, n, copy), (ssize_t)want_len);
    assert_memory_equal(copy, want, want_len);
}

static void gun__decode__errors(void **state)
{
    (void)state;
    static const struct {
        const char *why;
        uint8_t b[12];
        size_t n;
    } bad[] = {
        {"compressed", {1, 0, 0, 0, 3, 0x0A, 1, 'x'}, 8},
        {"over SV_GUN_MSG_MAX", {0, 1, 0, 0, 1}, 5},
        {"another field", {0, 0, 0, 0, 3, 0x12, 1, 'x'}, 8},
        {"varint field", {0, 0, 0, 0, 2, 0x08, 1}, 7},
        {"field over its message", {0, 0, 0, 0, 3, 0x0A, 5, 'x', 'y'}, 9},
        {"length varint over its message", {0, 0, 0, 0, 2, 0x0A, 0x80, 0x01}, 8},
        {"length varint too long", {0, 0, 0, 0, 9, 0x0A, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 12},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sv_gun_decoder d = {0};
        uint8_t out[16];
        print_message("case %s\n", bad[i].why);
        assert_int_equal(sv_gun_decode(&d, bad[i].b, bad[i].n, out), -EPROTO);
        assert_int_equal(sv_gun_decode(&d, (const uint8_t *)"\0", 1, out), -EPROTO); /* spent */
    }
}

/* ---- the core, driven by an HTTP/2 client ------------------------------------------------- */

static const char *const g_pass[] = {"user-a", "user-b"};

/* What the client side saw and the core produced, in one run. */
typedef struct run {
    nghttp2_session *cli;
    void *core;
    void *creds;
    uint8_t carry[64];
    size_t carry_len;
    char events[2048];       /* "A1 O1 C1 ..." : kind and stream of each effect (data aside) */
    uint8_t up[4096];        /* every SV_FX_TO_OUTBOUND byte, in order */
    size_t up_len;
    sv_gun_decoder down_dec; /* the client's view of stream 1's response body */
    uint8_t down[4096];
    size_t down_len;
    sv_gun_decoder down3_dec; /* stream 3's */
    uint8_t down3[32768];
    size_t down3_len;
    char status[16];         /* the last :status / grpc-status the client saw */
    char grpc_status[16];
    uint32_t rst_code[8];    /* RST_STREAM or close code per stream id / 2 */
    bool closed[8];
    bool fallback;
    size_t fallback_len;
    bool end_on_open; /* the runtime refuses each open at once (a blocked route) */
} run;

static void ev(run *r, const char *fmt, ...)
{
    va_list ap;
    size_t at = strlen(r->events);
    va_start(ap, fmt);
    vsnprintf(r->events + at, sizeof r->events - at, fmt, ap);
    va_end(ap);
}

static int cli_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                    size_t len, void *ud)
{
    run *r = ud;
    (void)s;
    (void)flags;
    if (id == 3) {
        ssize_t k = sv_gun_decode(&r->down3_dec, data, len, r->down3 + r->down3_len);
        assert_true(k >= 0);
        r->down3_len += (size_t)k;
        return 0;
    }
    ssize_t k = sv_gun_decode(&r->down_dec, data, len, r->down + r->down_len);
    assert_true(k >= 0);
    r->down_len += (size_t)k;
    return 0;
}

static int cli_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                      size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                      void *ud)
{
    run *r = ud;
    (void)s;
    (void)f;
    (void)flags;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        snprintf(r->status, sizeof r->status, "%.*s", (int)valuelen, value);
    if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        snprintf(r->grpc_status, sizeof r->grpc_status, "%.*s", (int)valuelen, value);
    return 0;
}

static int cli_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    run *r = ud;
    (void)s;
    r->closed[id / 2] = true;
    r->rst_code[id / 2] = code;
    return 0;
}

/* The request bodies: stream id → bytes (a Hunk each); more may be appended, then
 * nghttp2_session_resume_data(). */
typedef struct body {
    uint8_t b[8192];
    size_t len, off;
    bool end; /* END_STREAM once all is sent */
} body;

static ssize_t cli_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                        uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    body *b = src->ptr;
    (void)s;
    (void)id;
    (void)ud;
    (void)flags;
    if (b->off == b->len && b->end) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    if (b->off == b->len)
        return NGHTTP2_ERR_DEFERRED; /* the stream stays open for more */
    size_t k = b->len - b->off < length ? b->len - b->off : length;
    memcpy(buf, b->b + b->off, k);
    b->off += k;
    return (ssize_t)k;
}

/* A Trojan request for 127.0.0.1:@p port by user @p user with @p payload, as one Hunk. */
static void trojan_hunk(body *b, int user, uint16_t port, const char *payload)
{
    uint8_t md[28], req[256];
    unsigned mdlen = 0;
    EVP_Digest(g_pass[user], strlen(g_pass[user]), md, &mdlen, EVP_sha224(), NULL);
    size_t n = 0;
    for (unsigned i = 0; i < mdlen; i++)
        n += (size_t)snprintf((char *)req + n, 3, "%02x", md[i]);
    const uint8_t tail[] = {'\r', '\n', 1, 1, 127, 0, 0, 1, (uint8_t)(port >> 8), (uint8_t)port,
                            '\r', '\n'};
    memcpy(req + n, tail, sizeof tail);
    n += sizeof tail;
    memcpy(req + n, payload, strlen(payload));
    n += strlen(payload);
    b->len = sv_gun_header(n, b->b);
    memcpy(b->b + b->len, req, n);
    b->len += n;
    b->off = 0;
    b->end = false;
}

/* A gRPC core over @p inner with two users of secrets @p secret. */
static void run_open_core(run *r, const sv_proto_ops *inner, const char *const secret[2])
{
    memset(r, 0, sizeof *r);
    sv_user u[2] = {{.id = 1, .secret = (char *)secret[0]}, {.id = 2, .secret = (char *)secret[1]}};
    sv_user_set set = {.tag = "users", .users = u, .n_users = 2};
    sv_error err = {0};
    sv_inbound_spec in = {.tag = "grpc"};
    assert_int_equal(sv_grpc_creds_new(inner, "kt-tun", &in, &set, &r->creds, &err), 0);
    r->core = calloc(1, sv_grpc_ops.state_size);
    assert_int_equal(sv_grpc_ops.init(r->core, NULL), 0);
    nghttp2_session_callbacks *cb;
    assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cli_data);
    nghttp2_session_callbacks_set_on_header_callback(cb, cli_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, cli_close);
    assert_int_equal(nghttp2_session_client_new(&r->cli, cb, r), 0);
    nghttp2_session_callbacks_del(cb);
    assert_int_equal(nghttp2_submit_settings(r->cli, NGHTTP2_FLAG_NONE, NULL, 0), 0);
}

static void run_open(run *r)
{
    run_open_core(r, &sv_trojan_ops, g_pass);
}

static void run_close(run *r)
{
    sv_grpc_ops.deinit(r->core);
    free(r->core);
    sv_grpc_ops.creds_free(r->creds);
    nghttp2_session_del(r->cli);
}

/* Bytes for the client from the core. */
static void to_client(run *r, const uint8_t *p, size_t n)
{
    if (n > 0)
        assert_int_equal(nghttp2_session_mem_recv(r->cli, p, n), (ssize_t)n);
}

static void apply(run *r, const sv_effects *fx)
{
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        switch (e->kind) {
        case SV_FX_AUTHENTICATED:
            ev(r, "A%d%s ", e->principal, e->multiplexed ? "m" : "");
            break;
        case SV_FX_OPEN:
            ev(r, "O%u:%u ", e->stream, e->dest.port);
            if (r->end_on_open) { /* as conn.c's sub_open: its End while applying the rest */
                uint8_t out[1024];
                ssize_t n = sv_proto_end(&sv_grpc_ops)
                                ->frame_end(r->core, r->creds, e->stream, true, out, sizeof out);
                assert_true(n >= 0);
                to_client(r, out, (size_t)n);
            }
            break;
        case SV_FX_DATAGRAM:
            ev(r, "D%u:%u ", e->stream, e->dest.port);
            /* fall through */
        case SV_FX_TO_OUTBOUND:
            memcpy(r->up + r->up_len, e->data, e->len);
            r->up_len += e->len;
            break;
        case SV_FX_TO_CLIENT:
            to_client(r, e->data, e->len);
            break;
        case SV_FX_CLOSE:
            ev(r, "%c%u ", e->half_close ? 'H' : 'C', e->stream);
            break;
        case SV_FX_ERROR:
            ev(r, "E ");
            r->fallback = e->policy == SV_PROBE_FALLBACK;
            r->fallback_len = e->len;
            break;
        default:
            ev(r, "?%d ", e->kind);
        }
    }
}

/* Everything the client has to send, gathered, then fed to the core @p piece bytes at a time
 * (the unconsumed tail comes again with more, as conn.c's carry). */
static void pump(run *r, size_t piece)
{
    static uint8_t all[65536];
    size_t total = 0;
    const uint8_t *p;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(r->cli, &p)) > 0) {
        assert_true(total + (size_t)n <= sizeof all);
        memcpy(all + total, p, (size_t)n);
        total += (size_t)n;
    }
    for (size_t off = 0; off < total;) {
        size_t k = total - off < piece ? total - off : piece;
        uint8_t buf[sizeof r->carry + sizeof all];
        memcpy(buf, r->carry, r->carry_len);
        memcpy(buf + r->carry_len, all + off, k);
        size_t len = r->carry_len + k, used = 0;
        off += k;
        for (;;) { /* as conn.c's process_client */
            bool more = sv_proto_more(&sv_grpc_ops, r->core);
            if (used == len && !more)
                break;
            sv_effects fx;
            ssize_t c = sv_grpc_ops.feed(r->core, r->creds, buf + used, len - used, &fx);
            apply(r, &fx);
            if (c < 0 || (c == 0 && !sv_proto_more(&sv_grpc_ops, r->core)))
                break;
            used += (size_t)c;
        }
        r->carry_len = len - used;
        assert_true(r->carry_len <= sv_grpc_ops.carry_max);
        memcpy(r->carry, buf + used, r->carry_len);
        if (r->fallback)
            return;
    }
}

static int32_t request(run *r, const char *path, body *b)
{
    const nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
        {(uint8_t *)":authority", (uint8_t *)"node.test", 10, 9, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
        {(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0},
    };
    nghttp2_data_provider dp = {.source.ptr = b, .read_callback = cli_read};
    int32_t id = nghttp2_submit_request(r->cli, NULL, nv, 6, &dp, NULL);
    assert_true(id > 0);
    return id;
}

/* One Tun stream: authenticated (multiplexed) and opened on stream 1, "ping" up, "pong" down
 * as a Hunk, then the outbound's end: trailers with grpc-status 0. */
static void tun_once(size_t piece)
{
    run r;
    body b;
    run_open(&r);
    trojan_hunk(&b, 1, 4242, "ping");
    assert_int_equal(request(&r, "/kt-tun/Tun", &b), 1);
    pump(&r, piece);
    assert_string_equal(r.events, "A1m O1:4242 ");
    assert_int_equal(r.up_len, 4);
    assert_memory_equal(r.up, "ping", 4);
    assert_string_equal(r.status, "200");

    uint8_t out[1024];
    ssize_t n = sv_grpc_ops.frame(r.core, r.creds, 1, (const uint8_t *)"pong", 4, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    assert_int_equal(r.down_len, 4);
    assert_memory_equal(r.down, "pong", 4);
    n = sv_proto_end(&sv_grpc_ops)->frame_end(r.core, r.creds, 1, false, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    assert_string_equal(r.grpc_status, "0");
    assert_int_equal(nghttp2_session_get_stream_remote_close(r.cli, 1), 1); /* ended */
    pump(&r, piece);
    assert_string_equal(r.events, "A1m O1:4242 "); /* the runtime ended it: no CLOSE back */
    run_close(&r);
}

static void core__tun_stream__whole_and_bytewise(void **state)
{
    (void)state;
    tun_once(1);
    tun_once(7);
    tun_once(65536);
}

/* The client ends its direction with its request (END_STREAM): the runtime hears a half-close
 * (the outbound is shut down, not closed), the download goes on, and the outbound's end gives
 * the trailers (PROTOCOLS-2.md §3.3; issue 10). A reset afterwards ends it in full. */
static void half_close_once(size_t piece, bool reset)
{
    run r;
    body b;
    run_open(&r);
    trojan_hunk(&b, 1, 4242, "ping");
    b.end = true;
    assert_int_equal(request(&r, "/kt-tun/Tun", &b), 1);
    pump(&r, piece);
    assert_string_equal(r.events, "A1m O1:4242 H1 ");
    assert_int_equal(r.up_len, 4);
    uint8_t out[1024];
    ssize_t n = sv_grpc_ops.frame(r.core, r.creds, 1, (const uint8_t *)"pong", 4, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    assert_int_equal(r.down_len, 4);
    assert_memory_equal(r.down, "pong", 4);
    assert_false(r.closed[0]);
    if (reset) {
        assert_int_equal(nghttp2_submit_rst_stream(r.cli, NGHTTP2_FLAG_NONE, 1, NGHTTP2_CANCEL),
                         0);
        pump(&r, piece);
        assert_string_equal(r.events, "A1m O1:4242 H1 C1 ");
    } else {
        n = sv_proto_end(&sv_grpc_ops)->frame_end(r.core, r.creds, 1, false, out, sizeof out);
        assert_true(n > 0);
        to_client(&r, out, (size_t)n);
        assert_string_equal(r.grpc_status, "0");
        assert_true(r.closed[0]);
        pump(&r, piece);
        assert_string_equal(r.events, "A1m O1:4242 H1 ");
    }
    run_close(&r);
}

static void core__client_end_stream__half_close(void **state)
{
    (void)state;
    for (int reset = 0; reset < 2; reset++) {
        half_close_once(1, reset);
        half_close_once(7, reset);
        half_close_once(65536, reset);
    }
}

static void core__wrong_path__grpc_status_12_no_effect(void **state)
{
    (void)state;
    run r;
    body b;
    run_open(&r);
    trojan_hunk(&b, 0, 4242, "ping");
    request(&r, "/other/Tun", &b);
    pump(&r, 65536);
    assert_string_equal(r.events, "");
    assert_int_equal(r.up_len, 0);
    assert_string_equal(r.grpc_status, "12");
    run_close(&r);
}

static void core__escaped_name_and_tunmulti__served(void **state)
{
    (void)state;
    run r;
    body b;
    run_open(&r);
    trojan_hunk(&b, 0, 7, "x");
    request(&r, "/%6Bt-tun/TunMulti", &b);
    pump(&r, 65536);
    assert_string_equal(r.events, "A0m O1:7 ");
    run_close(&r);
}

/* One HTTP/2 connection acts for one user: a stream of another user is reset alone. */
static void core__second_user__stream_reset_alone(void **state)
{
    (void)state;
    run r;
    body b1, b2;
    run_open(&r);
    trojan_hunk(&b1, 0, 1000, "a");
    trojan_hunk(&b2, 1, 2000, "b");
    request(&r, "/kt-tun/Tun", &b1);
    pump(&r, 65536);
    request(&r, "/kt-tun/Tun", &b2);
    pump(&r, 65536);
    assert_string_equal(r.events, "A0m O1:1000 ");
    assert_true(r.closed[1]);
    assert_int_equal(r.rst_code[1], NGHTTP2_REFUSED_STREAM);
    assert_false(r.closed[0]);
    run_close(&r);
}

/* A stream the runtime ends while it applies the feed's effects (a refused route): the HTTP/2
 * bytes of that feed reach the client before the reset, intact. */
static void core__end_while_applying__bytes_in_order(void **state)
{
    (void)state;
    run r;
    body b;
    run_open(&r);
    r.end_on_open = true;
    trojan_hunk(&b, 0, 9, "x");
    request(&r, "/kt-tun/Tun", &b);
    pump(&r, 65536); /* to_client asserts the client took every byte */
    assert_string_equal(r.events, "A0m O1:9 ");
    assert_string_equal(r.status, "200");
    assert_true(r.closed[0]);
    assert_int_equal(r.rst_code[0], NGHTTP2_CANCEL);
    assert_int_equal(nghttp2_session_want_read(r.cli), 1); /* no connection error */
    run_close(&r);
}

static void core__not_http2__fallback_with_every_byte(void **state)
{
    (void)state;
    static const char get[] = "GET / HTTP/1.1\r\nHost: node.test\r\n\r\n";
    for (size_t piece = 1; piece <= 2; piece++) {
        run r;
        run_open(&r);
        size_t len = 0;
        sv_effects fx;
        ssize_t c = 0;
        uint8_t buf[64];
        /* byte at a time up to the first byte that cannot start the preface, or whole */
        for (len = piece == 1 ? 1 : sizeof get - 1; len <= sizeof get - 1; len++) {
            memcpy(buf, get, len);
            c = sv_grpc_ops.feed(r.core, r.creds, buf, len, &fx);
            if (c != 0)
                break;
        }
        assert_true(c < 0);
        apply(&r, &fx);
        assert_true(r.fallback);
        assert_int_equal(r.fallback_len, len);
        run_close(&r);
    }
}

/* ---- Mux.Cool inside a stream (VLESS command 3: Xray's XUDP over gRPC) ------------------ */

static const char *const g_uuid[] = {"0b8e57f4-3e7c-4d6a-9c11-5f2b7e9a0c01",
                                     "27848739-7e62-4138-9fd3-098a63964b6b"};

/* Append @p n bytes as one Hunk to @p b. */
static void hunk(body *b, const void *p, size_t n)
{
    b->len += sv_gun_header(n, b->b + b->len);
    memcpy(b->b + b->len, p, n);
    b->len += n;
}

/* A VLESS command 3 request of user 0 followed by @p frames, as one Hunk. */
static void vless_mux_hunk(body *b, const uint8_t *frames, size_t n)
{
    uint8_t req[256] = {0};
    assert_int_equal(sv_vless_uuid_parse(g_uuid[0], req + 1), 0);
    req[1 + SV_VLESS_UUID_LEN] = 0; /* addons */
    req[2 + SV_VLESS_UUID_LEN] = SV_VLESS_MUX;
    size_t hl = 3 + SV_VLESS_UUID_LEN;
    memcpy(req + hl, frames, n);
    memset(b, 0, sizeof *b);
    hunk(b, req, hl + n);
}

/* Stream 1 carries a TCP session 1 (127.0.0.1:80, "abc") and an XUDP session 2 (New with a
 * GlobalID to :5353 "hi", a Keep to 127.0.0.2:53 "x"); stream 3 another TCP session 1 (:81,
 * "def"). Each session is a sub-flow of its own, even IDs 2, 4, 6 (none meets a stream's); the
 * replies go back as Keep frames of the right session on the right stream (after VLESS's
 * response header), frame_end gives the session's End and the stream goes on; the client's
 * End closes its session's sub-flow, a reset stream closes every session it carried. */
static void mux_once(size_t piece)
{
    static const uint8_t s1[] = {
        0x00, 0x0c, 0x00, 0x01, 0x01, 0x01, 0x01, 0x00, 0x50, 0x01, 127, 0, 0, 1, /* New TCP */
        0x00, 0x03, 'a', 'b', 'c',
        0x00, 0x14, 0x00, 0x02, 0x01, 0x01, 0x02, 0x14, 0xe9, 0x01, 127, 0, 0, 1, /* New UDP */
        1, 2, 3, 4, 5, 6, 7, 8, 0x00, 0x02, 'h', 'i',                             /* GlobalID */
        0x00, 0x0c, 0x00, 0x02, 0x02, 0x01, 0x02, 0x00, 0x35, 0x01, 127, 0, 0, 2, /* Keep */
        0x00, 0x01, 'x'};
    static const uint8_t s3[] = {
        0x00, 0x0c, 0x00, 0x01, 0x01, 0x01, 0x01, 0x00, 0x51, 0x01, 127, 0, 0, 1, /* New TCP */
        0x00, 0x03, 'd', 'e', 'f'};
    static const uint8_t end2[] = {0x00, 0x04, 0x00, 0x02, 0x03, 0x00};
    run r;
    body b1, b3;
    run_open_core(&r, &sv_vless_ops, g_uuid);
    vless_mux_hunk(&b1, s1, sizeof s1);
    vless_mux_hunk(&b3, s3, sizeof s3);
    assert_int_equal(request(&r, "/kt-tun/Tun", &b1), 1);
    assert_int_equal(request(&r, "/kt-tun/Tun", &b3), 3);
    pump(&r, piece);
    assert_string_equal(r.events, "A0m O2:80 O4:5353 D4:5353 D4:53 O6:81 ");
    assert_int_equal(r.up_len, 9);
    assert_memory_equal(r.up, "abchixdef", 9);

    static uint8_t out[65536];
    ssize_t n = sv_grpc_ops.frame(r.core, r.creds, 2, (const uint8_t *)"xyz", 3, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    sv_dest from = {.atyp = SV_ATYP_IPV4, .ip = {127, 0, 0, 3}, .port = 7};
    n = sv_proto_datagram(&sv_grpc_ops)
            ->frame_datagram(r.core, r.creds, 4, &from, (const uint8_t *)"ok", 2, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    n = sv_grpc_ops.frame(r.core, r.creds, 6, (const uint8_t *)"uvw", 3, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    n = sv_proto_end(&sv_grpc_ops)->frame_end(r.core, r.creds, 2, false, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    static const uint8_t want1[] = {
        0x00, 0x00,                                                        /* response */
        0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x03, 'x', 'y', 'z',     /* Keep 1 */
        0x00, 0x0c, 0x00, 0x02, 0x02, 0x01, 0x02, 0x00, 0x07, 0x01, 127, 0, 0, 3, /* Keep 2 */
        0x00, 0x02, 'o', 'k',
        0x00, 0x04, 0x00, 0x01, 0x03, 0x00};                               /* End 1 */
    static const uint8_t want3[] = {0x00, 0x00, 0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x03,
                                    'u',  'v',  'w'};
    assert_int_equal(r.down_len, sizeof want1);
    assert_memory_equal(r.down, want1, sizeof want1);
    assert_int_equal(r.down3_len, sizeof want3);
    assert_memory_equal(r.down3, want3, sizeof want3);
    /* a long read goes as Keep frames of at most 8 KiB (what Xray's gRPC client can take) */
    static uint8_t big[20000];
    memset(big, 'q', sizeof big);
    n = sv_grpc_ops.frame(r.core, r.creds, 6, big, sizeof big, out, sizeof out);
    assert_true(n > 0);
    to_client(&r, out, (size_t)n);
    assert_int_equal(r.down3_len, sizeof want3 + 3 * 8 + sizeof big);
    static const size_t keep_len[] = {8192, 8192, 3616};
    size_t at = sizeof want3;
    for (int i = 0; i < 3; i++) {
        const uint8_t head[] = {0x00, 0x04, 0x00, 0x01, 0x02, 0x01, (uint8_t)(keep_len[i] >> 8),
                                (uint8_t)keep_len[i]};
        assert_memory_equal(r.down3 + at, head, sizeof head);
        at += sizeof head;
        assert_memory_equal(r.down3 + at, big, keep_len[i]);
        at += keep_len[i];
    }
    assert_false(r.closed[0]); /* an End ends the session, not the stream */
    assert_string_equal(r.grpc_status, "");

    hunk(&b1, end2, sizeof end2); /* the client ends the UDP session */
    assert_int_equal(nghttp2_session_resume_data(r.cli, 1), 0);
    pump(&r, piece);
    assert_int_equal(nghttp2_submit_rst_stream(r.cli, NGHTTP2_FLAG_NONE, 3, NGHTTP2_CANCEL), 0);
    pump(&r, piece);
    assert_string_equal(r.events, "A0m O2:80 O4:5353 D4:5353 D4:53 O6:81 C4 C6 ");
    /* the runtime's late calls for forgotten sub-flows write nothing */
    assert_int_equal(sv_grpc_ops.frame(r.core, r.creds, 6, (const uint8_t *)"z", 1, out,
                                       sizeof out), 0);
    assert_int_equal(
        sv_proto_end(&sv_grpc_ops)->frame_end(r.core, r.creds, 4, false, out, sizeof out), 0);
    run_close(&r);
}

static void core__vless_mux_in_streams__whole_and_bytewise(void **state)
{
    (void)state;
    mux_once(1);
    mux_once(7);
    mux_once(65536);
}

/* Many small messages in one client read (issue 10: more than 15 were held until the next read,
 * about 90 failed the connection): a VLESS Mux.Cool stream whose @p n Keep frames each carry
 * one datagram, each frame its own Hunk, plus a TCP session's @p n one-byte Keep frames, all
 * in one read. Every datagram and byte reaches the runtime within that read, in order. */
static void burst_once(unsigned n, size_t piece)
{
    static const uint8_t open_tcp[] = {0x00, 0x0c, 0x00, 0x01, 0x01, 0x00, 0x01, 0x00, 0x50,
                                       0x01, 127,  0,    0,    1};
    static const uint8_t open_udp[] = {0x00, 0x0c, 0x00, 0x02, 0x01, 0x00, 0x02, 0x00, 0x35,
                                       0x01, 127,  0,    0,    1};
    run r;
    static body b;
    run_open_core(&r, &sv_vless_ops, g_uuid);
    vless_mux_hunk(&b, open_tcp, sizeof open_tcp);
    hunk(&b, open_udp, sizeof open_udp);
    char want_ev[4096] = "A0m O2:80 O4:53 ";
    static uint8_t want_up[1024];
    size_t want_len = 0;
    for (unsigned i = 0; i < n; i++) {
        const uint8_t keep_tcp[] = {0x00, 0x04, 0x00, 0x01, 0x02, 0x01, 0x00, 0x01,
                                    (uint8_t)('a' + i % 26)};
        const uint8_t keep_udp[] = {0x00, 0x04, 0x00, 0x02, 0x02, 0x01, 0x00, 0x01,
                                    (uint8_t)('A' + i % 26)};
        hunk(&b, keep_tcp, sizeof keep_tcp);
        hunk(&b, keep_udp, sizeof keep_udp);
        want_up[want_len++] = keep_tcp[8];
        want_up[want_len++] = keep_udp[8];
        size_t at = strlen(want_ev);
        snprintf(want_ev + at, sizeof want_ev - at, "D4:53 ");
    }
    assert_true(b.len <= sizeof b.b);
    assert_int_equal(request(&r, "/kt-tun/Tun", &b), 1);
    pump(&r, piece);
    assert_int_equal(r.up_len, want_len);
    assert_memory_equal(r.up, want_up, want_len);
    assert_string_equal(r.events, want_ev);
    run_close(&r);
}

static void core__burst_of_small_messages__all_in_one_read(void **state)
{
    (void)state;
    burst_once(20, 65536);
    burst_once(200, 65536);
    burst_once(200, 5000);
    burst_once(200, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gun__header__vectors),
        cmocka_unit_test(gun__decode__whole_bytewise_and_pieces_agree),
        cmocka_unit_test(gun__decode__errors),
        cmocka_unit_test(core__tun_stream__whole_and_bytewise),
        cmocka_unit_test(core__client_end_stream__half_close),
        cmocka_unit_test(core__wrong_path__grpc_status_12_no_effect),
        cmocka_unit_test(core__escaped_name_and_tunmulti__served),
        cmocka_unit_test(core__second_user__stream_reset_alone),
        cmocka_unit_test(core__end_while_applying__bytes_in_order),
        cmocka_unit_test(core__not_http2__fallback_with_every_byte),
        cmocka_unit_test(core__vless_mux_in_streams__whole_and_bytewise),
        cmocka_unit_test(core__burst_of_small_messages__all_in_one_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
