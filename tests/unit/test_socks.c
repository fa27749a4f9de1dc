/*
 * Unit tests: SOCKS5 core (supervisor/proto/socks.c) through its ops table (proto.h), and the
 * user name / password table it is built on (supervisor/proto/userpass.c).
 * Wire bytes are RFC 1928 / RFC 1929's (PROTOCOLS-3.md §4.1). A runtime-like driver keeps the
 * unconsumed carry and feeds it again with more bytes appended, as proto.h's contract asks; the
 * same script fed whole and byte by byte must give the same effects.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/proto/socks.h"
#include "supervisor/proto/userpass.h"

static const sv_proto_ops *const ops = &sv_socks_ops;

/* ---------- fixtures ---------- */

/* Users 0 "alice-secret", 1 "bob-secret": names and passwords are the secrets. */
static char *g_secrets[] = {"alice-secret", "bob-secret"};
static void *g_creds;      /* g_secrets, no_auth off */
static void *g_anon_creds; /* one user "only-user", no_auth on */

static int make_creds(char **secrets, size_t n, bool no_auth, void **out, sv_error *err)
{
    sv_user *u = calloc(n ? n : 1, sizeof *u);
    if (u == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        u[i].id = 100 + i;
        u[i].secret = secrets[i];
    }
    sv_user_set set = {.tag = "users", .users = u, .n_users = n};
    sv_inbound_spec in = {.proxy_no_auth = no_auth};
    int rc = ops->creds_new(&in, &set, out, err);
    free(u);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    sv_error err = {0};
    static char *only[] = {"only-user"};
    if (make_creds(g_secrets, 2, false, &g_creds, &err) != 0)
        return -1;
    return make_creds(only, 1, true, &g_anon_creds, &err) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ops->creds_free(g_creds);
    ops->creds_free(g_anon_creds);
    return 0;
}

/* ---------- driver ---------- */

#define LOG_MAX 32
#define DATA_MAX 1024

/* One effect as recorded: its fields and a copy of its data (consecutive TO_OUTBOUND merged,
 * so the log does not depend on how the input was cut). */
typedef struct rec {
    enum sv_effect_kind kind;
    int principal, error;
    enum sv_probe_policy policy;
    sv_dest dest;
    uint8_t data[DATA_MAX];
    size_t len;
} rec;

typedef struct fx_log {
    rec v[LOG_MAX];
    unsigned n;
    int rc; /* the negative errno that ended the run, or 0 */
} fx_log;

static bool inside(const uint8_t *x, size_t len, const void *lo, size_t n)
{
    const uint8_t *b = lo;
    return x >= b && x <= b + n && len <= (size_t)(b + n - x);
}

static void record(fx_log *log, const sv_effects *fx, const void *st, const uint8_t *buf,
                   size_t have)
{
    assert_true(fx->n <= SV_EFFECTS_MAX);
    for (unsigned i = 0; i < fx->n; i++) {
        const sv_effect *e = &fx->v[i];
        assert_int_equal(e->stream, 0);
        if (e->len > 0)
            assert_true(inside(e->data, e->len, buf, have) ||
                        inside(e->data, e->len, st, ops->state_size));
        if (e->kind == SV_FX_TO_OUTBOUND) {
            assert_true(inside(e->data, e->len, buf, have));
            assert_true(e->len > 0);
        }
        if (e->kind == SV_FX_TO_CLIENT || (e->kind == SV_FX_ERROR && e->len > 0))
            assert_true(inside(e->data, e->len, st, ops->state_size));
        rec *last = log->n > 0 ? &log->v[log->n - 1] : NULL;
        if (e->kind == SV_FX_TO_OUTBOUND && last != NULL && last->kind == SV_FX_TO_OUTBOUND) {
            assert_true(last->len + e->len <= DATA_MAX);
            memcpy(last->data + last->len, e->data, e->len);
            last->len += e->len;
            continue;
        }
        assert_true(log->n < LOG_MAX && e->len <= DATA_MAX);
        rec *r = &log->v[log->n++];
        memset(r, 0, sizeof *r);
        r->kind = e->kind;
        r->principal = e->kind == SV_FX_AUTHENTICATED ? e->principal : 0;
        r->error = e->kind == SV_FX_ERROR ? e->error : 0;
        r->policy = e->kind == SV_FX_ERROR ? e->policy : 0;
        if (e->kind == SV_FX_OPEN)
            r->dest = e->dest;
        if (e->len > 0)
            memcpy(r->data, e->data, e->len);
        r->len = e->len;
    }
}

/*
 * Feed @p wire to a fresh connection of @p creds in pieces of @p piece bytes through a carry
 * buffer, recording every effect into @p log. Checks the contract on the way: consumed <= given,
 * an error is the last effect, and the core never waits with more than carry_max bytes.
 */
static void drive(const void *creds, const uint8_t *wire, size_t n, size_t piece, fx_log *log)
{
    memset(log, 0, sizeof *log);
    void *st = calloc(1, ops->state_size);
    assert_non_null(st);
    assert_int_equal(ops->init(st, NULL), 0);
    uint8_t *buf = malloc(n + ops->carry_max + 1);
    assert_non_null(buf);
    size_t have = 0, in = 0;
    for (;;) {
        sv_effects fx;
        memset(&fx, 0x5a, sizeof fx);
        ssize_t r = ops->feed(st, creds, buf, have, &fx);
        record(log, &fx, st, buf, have);
        if (r < 0) {
            assert_true(fx.n > 0);
            assert_int_equal(fx.v[fx.n - 1].kind, SV_FX_ERROR);
            assert_int_equal(fx.v[fx.n - 1].error, (int)r);
            log->rc = (int)r;
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
        size_t k = n - in < piece ? n - in : piece;
        memcpy(buf + have, wire + in, k);
        have += k;
        in += k;
    }
    free(buf);
    ops->deinit(st);
    free(st);
}

/* Drive @p wire whole and byte by byte: both logs must be equal; @p log gets the whole one. */
static void drive_both(const void *creds, const uint8_t *wire, size_t n, fx_log *log)
{
    fx_log *bytes = malloc(sizeof *bytes);
    assert_non_null(bytes);
    drive(creds, wire, n, n + 1, log);
    drive(creds, wire, n, 1, bytes);
    assert_int_equal(log->rc, bytes->rc);
    assert_int_equal(log->n, bytes->n);
    for (unsigned i = 0; i < log->n; i++) {
        const rec *a = &log->v[i], *b = &bytes->v[i];
        assert_int_equal(a->kind, b->kind);
        assert_int_equal(a->principal, b->principal);
        assert_int_equal(a->error, b->error);
        assert_int_equal(a->policy, b->policy);
        if (a->kind == SV_FX_OPEN) {
            char da[300], db[300];
            sv_dest_format(&a->dest, da, sizeof da);
            sv_dest_format(&b->dest, db, sizeof db);
            assert_string_equal(da, db);
            assert_int_equal(a->dest.atyp, b->dest.atyp);
            assert_int_equal(a->dest.network, b->dest.network);
        }
        assert_int_equal(a->len, b->len);
        assert_memory_equal(a->data, b->data, a->len);
    }
    free(bytes);
}

/* ---------- expectations ---------- */

static void expect_bytes(const rec *r, enum sv_effect_kind kind, const uint8_t *b, size_t len)
{
    assert_int_equal(r->kind, kind);
    assert_int_equal(r->len, len);
    assert_memory_equal(r->data, b, len);
}

#define EXPECT_CLIENT(r, ...)                                                                   \
    do {                                                                                        \
        static const uint8_t b_[] = {__VA_ARGS__};                                              \
        expect_bytes((r), SV_FX_TO_CLIENT, b_, sizeof b_);                                      \
    } while (0)

static void expect_auth(const rec *r, int principal)
{
    assert_int_equal(r->kind, SV_FX_AUTHENTICATED);
    assert_int_equal(r->principal, principal);
}

/* The last effect is an error @p error with @p policy, answering @p len bytes @p b. */
static void expect_error(const fx_log *log, int error, enum sv_probe_policy policy,
                         const uint8_t *b, size_t len)
{
    assert_int_equal(log->rc, error);
    assert_true(log->n > 0);
    const rec *r = &log->v[log->n - 1];
    assert_int_equal(r->kind, SV_FX_ERROR);
    assert_int_equal(r->error, error);
    assert_int_equal(r->policy, policy);
    assert_int_equal(r->len, len);
    if (len > 0)
        assert_memory_equal(r->data, b, len);
}

static void expect_open(const rec *r, const char *hostport)
{
    assert_int_equal(r->kind, SV_FX_OPEN);
    assert_int_equal(r->dest.network, SV_NET_TCP);
    char s[300];
    sv_dest_format(&r->dest, s, sizeof s);
    assert_string_equal(s, hostport);
}

static const uint8_t k_ok_reply[] = {0x05, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0};
static const uint8_t k_cmd_reply[] = {0x05, 0x07, 0x00, 0x01, 0, 0, 0, 0, 0, 0};
static const uint8_t k_atyp_reply[] = {0x05, 0x08, 0x00, 0x01, 0, 0, 0, 0, 0, 0};
static const uint8_t k_no_method[] = {0x05, 0xff};
static const uint8_t k_auth_failed[] = {0x01, 0x01};

/* Script builder: greeting offering 02, the sub-negotiation for @p name / @p pass, then @p tail. */
typedef struct script {
    uint8_t b[2048];
    size_t n;
} script;

static void put(script *s, const void *p, size_t n)
{
    assert_true(s->n + n <= sizeof s->b);
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

#define PUT(s, ...)                                                                             \
    do {                                                                                        \
        static const uint8_t b_[] = {__VA_ARGS__};                                              \
        put((s), b_, sizeof b_);                                                                \
    } while (0)

static void put_auth(script *s, const char *name, const char *pass)
{
    uint8_t l = (uint8_t)strlen(name);
    PUT(s, 0x01);
    put(s, &l, 1);
    put(s, name, l);
    l = (uint8_t)strlen(pass);
    put(s, &l, 1);
    put(s, pass, l);
}

static void put_login(script *s, const char *name, const char *pass)
{
    PUT(s, 0x05, 0x02, 0x00, 0x02);
    put_auth(s, name, pass);
}

/* ---------- greeting ---------- */

static void greeting__userpass_offered_asks_for_it(void **state)
{
    (void)state;
    static const uint8_t w[] = {0x05, 0x02, 0x00, 0x02};
    fx_log log;
    drive_both(g_creds, w, sizeof w, &log);
    assert_int_equal(log.rc, 0);
    assert_int_equal(log.n, 1);
    EXPECT_CLIENT(&log.v[0], 0x05, 0x02);
    /* also with no_auth on: user name / password is preferred when offered */
    drive_both(g_anon_creds, w, sizeof w, &log);
    assert_int_equal(log.n, 1);
    EXPECT_CLIENT(&log.v[0], 0x05, 0x02);
}

static void greeting__no_auth_admitted_as_the_one_user(void **state)
{
    (void)state;
    static const uint8_t w[] = {0x05, 0x01, 0x00};
    fx_log log;
    drive_both(g_anon_creds, w, sizeof w, &log);
    assert_int_equal(log.rc, 0);
    assert_int_equal(log.n, 2);
    EXPECT_CLIENT(&log.v[0], 0x05, 0x00);
    expect_auth(&log.v[1], 0);
}

static void greeting__no_auth_refused_without_proxy_no_auth(void **state)
{
    (void)state;
    static const uint8_t w[] = {0x05, 0x01, 0x00};
    fx_log log;
    drive_both(g_creds, w, sizeof w, &log);
    assert_int_equal(log.n, 1);
    expect_error(&log, -EACCES, SV_PROBE_ANSWER, k_no_method, sizeof k_no_method);
    /* no method the core knows (GSSAPI only), even with no_auth on */
    static const uint8_t gss[] = {0x05, 0x01, 0x01};
    drive_both(g_anon_creds, gss, sizeof gss, &log);
    assert_int_equal(log.n, 1);
    expect_error(&log, -EACCES, SV_PROBE_ANSWER, k_no_method, sizeof k_no_method);
}

static void greeting__not_socks5_closes(void **state)
{
    (void)state;
    /* SOCKS4 CONNECT 127.0.0.1:80 */
    static const uint8_t v4[] = {0x04, 0x01, 0x00, 0x50, 0x7f, 0x00, 0x00, 0x01, 0x00};
    fx_log log;
    drive_both(g_creds, v4, sizeof v4, &log);
    assert_int_equal(log.n, 1);
    expect_error(&log, -EPROTO, SV_PROBE_CLOSE, NULL, 0);
    static const uint8_t http[] = "GET / HTTP/1.1\r\n";
    drive_both(g_creds, http, sizeof http - 1, &log);
    expect_error(&log, -EPROTO, SV_PROBE_CLOSE, NULL, 0);
    /* NMETHODS 0 */
    static const uint8_t none[] = {0x05, 0x00, 0x05, 0x01};
    drive_both(g_anon_creds, none, sizeof none, &log);
    assert_int_equal(log.n, 1);
    expect_error(&log, -EPROTO, SV_PROBE_CLOSE, NULL, 0);
}

/* ---------- sub-negotiation ---------- */

static void auth__good_password_authenticates(void **state)
{
    (void)state;
    script s = {0};
    put_login(&s, "bob-secret", "bob-secret");
    fx_log log;
    drive_both(g_creds, s.b, s.n, &log);
    assert_int_equal(log.rc, 0);
    assert_int_equal(log.n, 3);
    EXPECT_CLIENT(&log.v[0], 0x05, 0x02);
    EXPECT_CLIENT(&log.v[1], 0x01, 0x00);
    expect_auth(&log.v[2], 1);
}

static void auth__bad_credentials_answered_01_01(void **state)
{
    (void)state;
    static const char *cases[][2] = {
        {"alice-secret", "bob-secret"}, /* another user's password */
        {"alice-secret", "alice-secreT"},
        {"nobody", "nobody"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        script s = {0};
        put_login(&s, cases[i][0], cases[i][1]);
        PUT(&s, 0x05, 0x01, 0x00, 0x01, 127, 0, 0, 1, 0, 80);
        fx_log log;
        drive_both(g_creds, s.b, s.n, &log);
        assert_int_equal(log.n, 2);
        EXPECT_CLIENT(&log.v[0], 0x05, 0x02);
        expect_error(&log, -EACCES, SV_PROBE_ANSWER, k_auth_failed, sizeof k_auth_failed);
    }
}

static void auth__wrong_version_closes(void **state)
{
    (void)state;
    script s = {0};
    PUT(&s, 0x05, 0x01, 0x02, 0x05, 0x01, 'a', 0x01, 'a');
    fx_log log;
    drive_both(g_creds, s.b, s.n, &log);
    assert_int_equal(log.n, 2);
    EXPECT_CLIENT(&log.v[0], 0x05, 0x02);
    expect_error(&log, -EPROTO, SV_PROBE_CLOSE, NULL, 0);
}

static void auth__longest_fields_fit_the_carry(void **state)
{
    (void)state;
    char name[256];
    memset(name, 'n', 255);
    name[255] = '\0';
    char *secrets[] = {name};
    void *creds = NULL;
    sv_error err = {0};
    assert_int_equal(make_creds(secrets, 1, false, &creds, &err), 0);
    assert_int_equal(ops->carry_max, 3 + 255 + 255);
    script s = {0};
    put_login(&s, name, name);
    fx_log log;
    drive_both(creds, s.b, s.n, &log);
    assert_int_equal(log.rc, 0);
    assert_int_equal(log.n, 3);
    EXPECT_CLIENT(&log.v[1], 0x01, 0x00);
    expect_auth(&log.v[2], 0);
    ops->creds_free(creds);
}

/* ---------- request ---------- */

static void connect__ipv4_with_trailing_data(void **state)
{
    (void)state;
    script s = {0};
    put_login(&s, "alice-secret", "alice-secret");
    PUT(&s, 0x05, 0x01, 0x00, 0x01, 192, 0, 2, 7, 0x1f, 0x90, 'G', 'E', 'T', ' ');
    fx_log log;
    drive_both(g_creds, s.b, s.n, &log);
    assert_int_equal(log.rc, 0);
    assert_int_equal(log.n, 6);
    expect_auth(&log.v[2], 0);
    expect_bytes(&log.v[3], SV_FX_TO_CLIENT, k_ok_reply, sizeof k_ok_reply);
    expect_open(&log.v[4], "192.0.2.7:8080");
    expect_bytes(&log.v[5], SV_FX_TO_OUTBOUND, (const uint8_t *)"GET ", 4);
}

static void connect__ipv6(void **state)
{
    (void)state;
    script s = {0};
    PUT(&s, 0x05, 0x01, 0x00);
    PUT(&s, 0x05, 0x01, 0x00, 0x04, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0x01, 0x01, 0xbb, 'x');
    fx_log log;
    drive_both(g_anon_creds, s.b, s.n, &log);
    assert_int_equal(log.n, 5);
    EXPECT_CLIENT(&log.v[0], 0x05, 0x00);
    expect_auth(&log.v[1], 0);
    expect_bytes(&log.v[2], SV_FX_TO_CLIENT, k_ok_reply, sizeof k_ok_reply);
    expect_open(&log.v[3], "[2001:db8::1]:443");
    expect_bytes(&log.v[4], SV_FX_TO_OUTBOUND, (const uint8_t *)"x", 1);
}

static void connect__domain_then_relay(void **state)
{
    (void)state;
    script s = {0};
    put_login(&s, "bob-secret", "bob-secret");
    /* PROTOCOLS-3.md §4.1's example: CONNECT example.com:443 */
    PUT(&s, 0x05, 0x01, 0x00, 0x03, 0x0b, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm',
        0x01, 0xbb);
    static const char payload[] = "\x16\x03\x01 hello, any bytes \x05\x01\x00";
    put(&s, payload, sizeof payload - 1);
    fx_log log;
    drive_both(g_creds, s.b, s.n, &log);
    assert_int_equal(log.rc, 0);
    assert_int_equal(log.n, 6);
    expect_auth(&log.v[2], 1);
    expect_bytes(&log.v[3], SV_FX_TO_CLIENT, k_ok_reply, sizeof k_ok_reply);
    expect_open(&log.v[4], "example.com:443");
    expect_bytes(&log.v[5], SV_FX_TO_OUTBOUND, (const uint8_t *)payload, sizeof payload - 1);
}

static void request__bind_unknown_cmd_answered_07(void **state)
{
    (void)state;
    static const uint8_t cmds[] = {SV_SOCKS_BIND, 0x00, 0x04, 0xff};
    for (size_t i = 0; i < sizeof cmds; i++) {
        script s = {0};
        put_login(&s, "alice-secret", "alice-secret");
        PUT(&s, 0x05);
        put(&s, &cmds[i], 1);
        PUT(&s, 0x00, 0x01, 0, 0, 0, 0, 0, 0);
        fx_log log;
        drive_both(g_creds, s.b, s.n, &log);
        assert_int_equal(log.n, 4);
        expect_auth(&log.v[2], 0);
        expect_error(&log, -EPROTONOSUPPORT, SV_PROBE_ANSWER, k_cmd_reply, sizeof k_cmd_reply);
    }
}

/* UDP ASSOCIATE (RFC 1928 §7): an open of a UDP destination and no reply (the runtime opens the
 * relay and sends relay_ready()'s); later bytes on the control connection are dropped. */
static void request__udp_associate_opens_udp(void **state)
{
    (void)state;
    script s = {0};
    put_login(&s, "alice-secret", "alice-secret");
    PUT(&s, 0x05, 0x03, 0x00, 0x01, 127, 0, 0, 1, 0x30, 0x39, 'j', 'u', 'n', 'k');
    fx_log log;
    drive_both(g_creds, s.b, s.n, &log);
    assert_int_equal(log.rc, 0);
    assert_int_equal(log.n, 4);
    expect_auth(&log.v[2], 0);
    assert_int_equal(log.v[3].kind, SV_FX_OPEN);
    assert_int_equal(log.v[3].dest.network, SV_NET_UDP);
    char hp[64];
    sv_dest_format(&log.v[3].dest, hp, sizeof hp);
    assert_string_equal(hp, "127.0.0.1:12345");
}

static void request__unknown_atyp_answered_08(void **state)
{
    (void)state;
    static const uint8_t atyps[] = {0x00, 0x02, 0x05, 0xff};
    for (size_t i = 0; i < sizeof atyps; i++) {
        script s = {0};
        PUT(&s, 0x05, 0x01, 0x00, 0x05, 0x01, 0x00);
        put(&s, &atyps[i], 1);
        PUT(&s, 1, 2, 3, 4, 0, 80);
        fx_log log;
        drive_both(g_anon_creds, s.b, s.n, &log);
        assert_int_equal(log.n, 3);
        expect_error(&log, -EAFNOSUPPORT, SV_PROBE_ANSWER, k_atyp_reply, sizeof k_atyp_reply);
    }
}

static void request__malformed_closes(void **state)
{
    (void)state;
    static const uint8_t bad[][10] = {
        {0x04, 0x01, 0x00, 0x01, 1, 2, 3, 4, 0, 80}, /* VER */
        {0x05, 0x01, 0x01, 0x01, 1, 2, 3, 4, 0, 80}, /* RSV */
        {0x05, 0x01, 0x00, 0x03, 0x00, 0, 80},       /* empty domain */
        {0x05, 0x01, 0x00, 0x03, 0x02, 'a', 0, 0, 80}, /* NUL in the domain */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        script s = {0};
        PUT(&s, 0x05, 0x01, 0x00);
        put(&s, bad[i], sizeof bad[i]);
        fx_log log;
        drive_both(g_anon_creds, s.b, s.n, &log);
        assert_int_equal(log.n, 3);
        expect_error(&log, -EPROTO, SV_PROBE_CLOSE, NULL, 0);
    }
}

/* ---------- one call, several phases; partial phases; after a failure ---------- */

static void feed__pipelined_phases_in_one_call(void **state)
{
    (void)state;
    script s = {0};
    put_login(&s, "bob-secret", "bob-secret");
    PUT(&s, 0x05, 0x01, 0x00, 0x01, 10, 0, 0, 1, 0x00, 0x16, 'S', 'S', 'H');
    uint8_t st[512];
    assert_true(ops->state_size <= sizeof st);
    memset(st, 0, sizeof st);
    assert_int_equal(ops->init(st, NULL), 0);
    sv_effects fx;
    assert_int_equal(ops->feed(st, g_creds, s.b, s.n, &fx), (ssize_t)s.n);
    assert_int_equal(fx.n, 6);
    static const enum sv_effect_kind kinds[] = {SV_FX_TO_CLIENT, SV_FX_TO_CLIENT,
                                                SV_FX_AUTHENTICATED, SV_FX_TO_CLIENT,
                                                SV_FX_OPEN, SV_FX_TO_OUTBOUND};
    for (unsigned i = 0; i < 6; i++)
        assert_int_equal(fx.v[i].kind, kinds[i]);
    assert_memory_equal(fx.v[0].data, "\x05\x02", 2);
    assert_memory_equal(fx.v[1].data, "\x01\x00", 2);
    assert_int_equal(fx.v[2].principal, 1);
    assert_memory_equal(fx.v[3].data, k_ok_reply, sizeof k_ok_reply);
    assert_int_equal(fx.v[4].dest.port, 22);
    assert_ptr_equal(fx.v[5].data, s.b + s.n - 3);
    assert_int_equal(fx.v[5].len, 3);
    /* later bytes are relayed as they are, all consumed */
    uint8_t more[] = {0x05, 0x01, 0x00};
    assert_int_equal(ops->feed(st, g_creds, more, sizeof more, &fx), 3);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_TO_OUTBOUND);
    assert_ptr_equal(fx.v[0].data, more);
    ops->deinit(st);
}

static void feed__whole_phases_consumed_partial_kept(void **state)
{
    (void)state;
    script s = {0};
    put_login(&s, "alice-secret", "alice-secret");
    uint8_t st[512];
    memset(st, 0, sizeof st);
    assert_int_equal(ops->init(st, NULL), 0);
    sv_effects fx;
    /* the greeting and half the sub-negotiation: the greeting only is consumed */
    assert_int_equal(ops->feed(st, g_creds, s.b, 4 + 6, &fx), 4);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].kind, SV_FX_TO_CLIENT);
    /* the half again: nothing consumed, no effect */
    assert_int_equal(ops->feed(st, g_creds, s.b + 4, 6, &fx), 0);
    assert_int_equal(fx.n, 0);
    assert_int_equal(ops->feed(st, g_creds, s.b + 4, s.n - 4, &fx), (ssize_t)(s.n - 4));
    assert_int_equal(fx.n, 2);
    assert_int_equal(fx.v[1].kind, SV_FX_AUTHENTICATED);
    assert_int_equal(fx.v[1].principal, 0);
    ops->deinit(st);
}

static void feed__failure_is_final(void **state)
{
    (void)state;
    uint8_t st[512];
    memset(st, 0, sizeof st);
    assert_int_equal(ops->init(st, NULL), 0);
    uint8_t w[] = {0x05, 0x01, 0x00};
    sv_effects fx;
    assert_int_equal(ops->feed(st, g_creds, w, sizeof w, &fx), -EACCES);
    assert_int_equal(fx.n, 1);
    assert_int_equal(fx.v[0].policy, SV_PROBE_ANSWER);
    assert_true(inside(fx.v[0].data, fx.v[0].len, st, ops->state_size));
    uint8_t again[] = {0x05, 0x01, 0x02};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ops->feed(st, g_creds, again, sizeof again, &fx), -EACCES);
        assert_int_equal(fx.n, 1);
        assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
        assert_int_equal(fx.v[0].error, -EACCES);
        assert_int_equal(fx.v[0].policy, SV_PROBE_CLOSE);
        assert_int_equal(fx.v[0].len, 0);
    }
    ops->deinit(st);
}

/* ---------- downstream ---------- */

static void frame__plain_copy(void **state)
{
    (void)state;
    uint8_t st[512] = {0};
    const uint8_t in[] = "downstream";
    uint8_t out[16];
    assert_int_equal(ops->frame_max(10), 10);
    assert_int_equal(ops->frame(st, g_creds, 0, in, 10, out, sizeof out), 10);
    assert_memory_equal(out, in, 10);
    assert_int_equal(ops->frame(st, g_creds, 0, in, 10, out, 9), -EMSGSIZE);
    for (unsigned c = 0; c < SV_PROTO_CAP_COUNT; c++) /* UDP ASSOCIATE's two, the splice's */
        if (c == SV_PROTO_CAP_DATAGRAM || c == SV_PROTO_CAP_RELAY || c == SV_PROTO_CAP_DIRECT)
            assert_non_null(ops->ext[c]);
        else
            assert_null(ops->ext[c]);
    assert_string_equal(ops->name, "socks");
}

/* ---------- the user name / password table ---------- */

static void userpass__refusals(void **state)
{
    (void)state;
    sv_error err = {0};
    void *creds = (void *)1;
    char *dup[] = {"same", "other", "same"};
    assert_int_equal(make_creds(dup, 3, false, &creds, &err), -EINVAL);
    assert_null(creds);
    assert_non_null(strstr(err.msg, "users 100 and 102 have the same secret"));

    char *two[] = {"one", "two"};
    assert_int_equal(make_creds(two, 2, true, &creds, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no_auth needs exactly one user"));

    char long_name[257];
    memset(long_name, 'x', 256);
    long_name[256] = '\0';
    char *longs[] = {"fine", long_name};
    assert_int_equal(make_creds(longs, 2, false, &creds, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "user 101 needs a secret of 1 to 255 bytes"));

    char *empty[] = {""};
    assert_int_equal(make_creds(empty, 1, false, &creds, &err), -EINVAL);
}

static void userpass__lookup(void **state)
{
    (void)state;
    const sv_userpass *t = g_creds;
    assert_int_equal(sv_userpass_count(t), 2);
    assert_int_equal(sv_userpass_lookup(t, (const uint8_t *)"bob-secret", 10,
                                        (const uint8_t *)"bob-secret", 10), 1);
    assert_int_equal(sv_userpass_lookup(t, (const uint8_t *)"bob-secret", 10,
                                        (const uint8_t *)"bob-secre", 9), -1);
    assert_int_equal(sv_userpass_lookup(t, (const uint8_t *)"bob-secret", 10,
                                        (const uint8_t *)"alice-secret", 12), -1);
    assert_int_equal(sv_userpass_lookup(t, (const uint8_t *)"bob-secre", 9,
                                        (const uint8_t *)"bob-secre", 9), -1);
    assert_int_equal(sv_userpass_lookup(NULL, (const uint8_t *)"a", 1, (const uint8_t *)"a", 1),
                     -1);
    assert_int_equal(sv_userpass_anonymous(t), -1);
    assert_int_equal(sv_userpass_anonymous(g_anon_creds), 0);
    /* creds_new without an inbound: no_auth off */
    sv_error err = {0};
    char *one[] = {"solo"};
    sv_user u = {.id = 1, .secret = one[0]};
    sv_user_set set = {.tag = "t", .users = &u, .n_users = 1};
    void *creds = NULL;
    assert_int_equal(ops->creds_new(NULL, &set, &creds, &err), 0);
    assert_int_equal(sv_userpass_anonymous(creds), -1);
    ops->creds_free(creds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greeting__userpass_offered_asks_for_it),
        cmocka_unit_test(greeting__no_auth_admitted_as_the_one_user),
        cmocka_unit_test(greeting__no_auth_refused_without_proxy_no_auth),
        cmocka_unit_test(greeting__not_socks5_closes),
        cmocka_unit_test(auth__good_password_authenticates),
        cmocka_unit_test(auth__bad_credentials_answered_01_01),
        cmocka_unit_test(auth__wrong_version_closes),
        cmocka_unit_test(auth__longest_fields_fit_the_carry),
        cmocka_unit_test(connect__ipv4_with_trailing_data),
        cmocka_unit_test(connect__ipv6),
        cmocka_unit_test(connect__domain_then_relay),
        cmocka_unit_test(request__bind_unknown_cmd_answered_07),
        cmocka_unit_test(request__udp_associate_opens_udp),
        cmocka_unit_test(request__unknown_atyp_answered_08),
        cmocka_unit_test(request__malformed_closes),
        cmocka_unit_test(feed__pipelined_phases_in_one_call),
        cmocka_unit_test(feed__whole_phases_consumed_partial_kept),
        cmocka_unit_test(feed__failure_is_final),
        cmocka_unit_test(frame__plain_copy),
        cmocka_unit_test(userpass__refusals),
        cmocka_unit_test(userpass__lookup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
