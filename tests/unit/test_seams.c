/*
 * Unit tests of the runtime seams (issue 8): the Shadowsocks core through its ops table
 * (supervisor/proto/ss_ops.c), the principal registry (supervisor/principal.c) and the
 * operator's HOST:PORT parser (sv_dest_parse_hostport, supervisor/proto/core.c).
 *
 * A client stream is made with the core's own frame(): the AEAD stream format is the same in
 * both directions (PROTOCOLS.md §2.3), so sealing "address ‖ payload" with a user's key gives
 * the bytes a client of that user sends.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "supervisor/principal.h"
#include "supervisor/proto/ss_ops.h"

static const sv_proto_ops *const ops = &sv_shadowsocks_ops;

static char pw_a[] = "password-a", pw_b[] = "password-b";
static sv_user k_users[] = {{.id = 7, .secret = pw_a}, {.id = 9, .secret = pw_b}};
static sv_user_set k_set = {.tag = (char *)"s", .users = k_users, .n_users = 2};
static sv_inbound_spec k_in = {.tag = (char *)"in", .protocol = SV_INBOUND_SHADOWSOCKS,
                               .ss_cipher = SV_SS_AES_256_GCM};

/* What a driver saw, concatenated over all feed() calls. */
typedef struct seen {
    int principal;
    int opens;
    sv_dest dest;
    uint8_t out[8192];
    size_t out_len;
    int error;
    enum sv_probe_policy policy;
} seen;

/* Client wire of user @p user: address of 10.0.0.1:8080, then @p n payload bytes. */
static size_t client_wire(const void *creds, int user, const uint8_t *payload, size_t n,
                          uint8_t *wire, size_t cap)
{
    sv_ss_tcp st = {0};
    assert_int_equal(ops->init(&st, &k_in), 0);
    st.user = user;
    uint8_t plain[4096] = {0x01, 10, 0, 0, 1, 0x1f, 0x90};
    memcpy(plain + 7, payload, n);
    ssize_t len = ops->frame(&st, creds, 0, plain, 7 + n, wire, cap);
    ops->deinit(&st);
    assert_true(len > 0);
    return (size_t)len;
}

/* Feed @p wire in pieces of @p step bytes like the runtime: keep the unconsumed carry and
 * feed it again with the next bytes appended. */
static void drive(const void *creds, const uint8_t *wire, size_t n, size_t step, seen *s)
{
    uint8_t st[sizeof(sv_ss_tcp)] __attribute__((aligned(16))) = {0};
    uint8_t buf[16384 + 4096];
    size_t have = 0, off = 0;
    memset(s, 0, sizeof *s);
    s->principal = -1;
    assert_int_equal(ops->init(st, &k_in), 0);
    while (off < n && s->error == 0) {
        size_t take = n - off < step ? n - off : step;
        memcpy(buf + have, wire + off, take);
        have += take;
        off += take;
        for (;;) {
            sv_effects fx;
            ssize_t r = ops->feed(st, creds, buf, have, &fx);
            for (unsigned i = 0; i < fx.n; i++) {
                const sv_effect *e = &fx.v[i];
                if (e->kind == SV_FX_AUTHENTICATED)
                    s->principal = e->principal;
                else if (e->kind == SV_FX_OPEN) {
                    s->opens++;
                    s->dest = e->dest;
                } else if (e->kind == SV_FX_TO_OUTBOUND) {
                    assert_true(s->out_len + e->len <= sizeof s->out);
                    memcpy(s->out + s->out_len, e->data, e->len);
                    s->out_len += e->len;
                } else if (e->kind == SV_FX_ERROR) {
                    s->error = e->error;
                    s->policy = e->policy;
                }
            }
            if (r < 0) {
                assert_int_not_equal(s->error, 0); /* an error comes with its effect */
                break;
            }
            if (r == 0)
                break;
            memmove(buf, buf + r, have - (size_t)r);
            have -= (size_t)r;
            assert_true(have <= ops->carry_max);
        }
    }
    ops->deinit(st);
}

static void ss_ops__whole_and_byte_at_a_time__same_effects(void **state)
{
    (void)state;
    void *creds = NULL;
    assert_int_equal(ops->creds_new(&k_in, &k_set, &creds, NULL), 0);
    uint8_t payload[3000], wire[8192];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (uint8_t)(i * 7);
    size_t n = client_wire(creds, 1, payload, sizeof payload, wire, sizeof wire);
    static seen whole, bytes;
    drive(creds, wire, n, n, &whole);
    drive(creds, wire, n, 1, &bytes);
    const seen *v[] = {&whole, &bytes};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(v[i]->error, 0);
        assert_int_equal(v[i]->principal, 1);
        assert_int_equal(v[i]->opens, 1);
        assert_int_equal(v[i]->dest.atyp, SV_ATYP_IPV4);
        assert_int_equal(v[i]->dest.port, 8080);
        assert_int_equal(v[i]->dest.network, SV_NET_TCP);
        assert_int_equal(v[i]->out_len, sizeof payload);
        assert_memory_equal(v[i]->out, payload, sizeof payload);
    }
    ops->creds_free(creds);
}

static void ss_ops__unknown_key__error_with_drain(void **state)
{
    (void)state;
    void *creds = NULL;
    assert_int_equal(ops->creds_new(&k_in, &k_set, &creds, NULL), 0);
    uint8_t junk[200];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 31 + 5);
    static seen s;
    drive(creds, junk, sizeof junk, sizeof junk, &s);
    assert_int_equal(s.error, -EBADMSG);
    assert_int_equal(s.policy, SV_PROBE_DRAIN);
    assert_int_equal(s.principal, -1);
    ops->creds_free(creds);
}

/* Issue 13 "junk": past the guide's limit the core asks for a scan (SV_FX_SCAN, the salt and
 * length chunk, nothing consumed); the runtime's answer comes back through scan_result, more()
 * says to feed again, and the same bytes then authenticate, or fail with DRAIN (no user, or
 * the scan refused over its budget). */
static void ss_ops__limit__scan_effect_then_answer(void **state)
{
    (void)state;
    void *creds = NULL;
    assert_int_equal(ops->creds_new(&k_in, &k_set, &creds, NULL), 0);
    uint8_t wire[512];
    size_t n = client_wire(creds, 1, (const uint8_t *)"hello", 5, wire, sizeof wire);
    for (int answer = 1; answer >= -1; answer -= 2) {
        uint8_t st[sizeof(sv_ss_tcp)] __attribute__((aligned(16))) = {0};
        uint8_t buf[512];
        memcpy(buf, wire, n);
        assert_int_equal(ops->init(st, &k_in), 0);
        sv_proto_guide(ops)->set_guide(st, -1, NULL, 1);
        sv_effects fx;
        assert_int_equal(ops->feed(st, creds, buf, n, &fx), 0);
        assert_int_equal(fx.n, 1);
        assert_int_equal(fx.v[0].kind, SV_FX_SCAN);
        assert_ptr_equal(fx.v[0].data, buf);
        assert_int_equal(fx.v[0].len, 32 + 2 + 16);
        assert_int_equal(fx.v[0].trials, 1);
        assert_false(sv_proto_backlog(ops)->more(st));
        unsigned t = 0;
        assert_int_equal(sv_proto_guide(ops)->scan(creds, fx.v[0].data, fx.v[0].len, &t), 1);
        assert_int_equal(t, 2);
        sv_proto_guide(ops)->scan_result(st, answer);
        assert_true(sv_proto_backlog(ops)->more(st));
        ssize_t r = ops->feed(st, creds, buf, n, &fx);
        if (answer == 1) {
            assert_int_equal(r, (ssize_t)n);
            assert_int_equal(fx.v[0].kind, SV_FX_AUTHENTICATED);
            assert_int_equal(fx.v[0].principal, 1);
            assert_int_equal(fx.v[1].kind, SV_FX_OPEN);
        } else {
            assert_int_equal(r, -EBADMSG);
            assert_int_equal(fx.v[0].kind, SV_FX_ERROR);
            assert_int_equal(fx.v[0].policy, SV_PROBE_DRAIN);
        }
        assert_false(sv_proto_backlog(ops)->more(st));
        ops->deinit(st);
    }
    ops->creds_free(creds);
}

static void ss_ops__corrupt_chunk_while_relaying__error_with_close(void **state)
{
    (void)state;
    void *creds = NULL;
    assert_int_equal(ops->creds_new(&k_in, &k_set, &creds, NULL), 0);
    uint8_t payload[100] = {1, 2, 3}, wire[8192];
    size_t n = client_wire(creds, 0, payload, sizeof payload, wire, sizeof wire);
    /* a second stream's chunks appended after the salt of the first are garbage for it */
    uint8_t more[8192];
    size_t m = client_wire(creds, 0, payload, sizeof payload, more, sizeof more);
    memcpy(wire + n, more + 32, m - 32);
    static seen s;
    drive(creds, wire, n + m - 32, n + m - 32, &s);
    assert_int_equal(s.principal, 0);
    assert_int_equal(s.out_len, sizeof payload);
    assert_int_equal(s.error, -EBADMSG);
    assert_int_equal(s.policy, SV_PROBE_CLOSE);
    ops->creds_free(creds);
}

static void ss_ops__declared_bounds__fit_the_runtime(void **state)
{
    (void)state;
    assert_true(ops->frame_max(1) >= 1 + 32 + 2 + 16 + 16);
    assert_int_equal(ops->frame_max(65536), SV_SS_SEALED_MAX(65536));
    assert_int_equal(ops->carry_max, SV_SS_SALT_MAX + SV_SS_NEED_MAX);
    assert_non_null(sv_proto_replay(ops));
}

/* A failed MD5 (here: OpenSSL restricted to FIPS-approved algorithms, as on a FIPS host) must
 * refuse the user set; it used to leave an all-zero master key that authenticated clients
 * (issue 8, "Fixes found in review"). */
static void ss_ops__md5_unavailable__creds_refused_with_reason(void **state)
{
    (void)state;
    void *creds = NULL;
    sv_error err = {0};
    assert_int_equal(EVP_set_default_properties(NULL, "fips=yes"), 1);
    int rc = ops->creds_new(&k_in, &k_set, &creds, &err);
    assert_int_equal(EVP_set_default_properties(NULL, ""), 1);
    assert_int_equal(rc, -EIO);
    assert_null(creds);
    assert_int_equal(err.code, -EIO);
    assert_string_equal(err.msg, "inbound in: cannot derive Shadowsocks keys: MD5 is not available "
                                 "in OpenSSL (provider configuration)");
    /* the normal configuration still builds the table */
    assert_int_equal(ops->creds_new(&k_in, &k_set, &creds, &err), 0);
    ops->creds_free(creds);
}

static void principal__same_user__same_principal_until_released(void **state)
{
    (void)state;
    sv_user u = {.id = 42, .secret = pw_a, .device_limit = 2};
    sv_principal *a = sv_principal_acquire("set1", &u);
    assert_non_null(a);
    u.device_limit = 5; /* an edit of the limit updates the principal in place */
    sv_principal *b = sv_principal_acquire("set1", &u);
    assert_ptr_equal(a, b);
    assert_int_equal(sv_principal_device_limit(a), 5);
    assert_int_equal(a->id, 42);
    u.secret = pw_b; /* a new secret is a new principal: live sessions of the old one differ */
    sv_principal *c = sv_principal_acquire("set1", &u);
    assert_ptr_not_equal(a, c);
    u.secret = pw_a; /* the same user in another set is another principal */
    sv_principal *d = sv_principal_acquire("set2", &u);
    assert_ptr_not_equal(a, d);
    /* the fingerprint frames the set's tag: tag "set1" + secret "x" is not tag "set" + "1x" */
    sv_user x = {.id = 42, .secret = "x"}, y = {.id = 42, .secret = "1x"};
    sv_principal *e = sv_principal_acquire("set1", &x), *f = sv_principal_acquire("set", &y);
    assert_non_null(e);
    assert_non_null(f);
    assert_ptr_not_equal(e, f);
    sv_principal_unref(e);
    sv_principal_unref(f);
    sv_principal_unref(b);
    sv_principal_unref(a);
    sv_principal_unref(c);
    sv_principal_unref(d);
    sv_principal_unref(NULL);
}

/* Principals come from a pool of chunks (issue 13, memory per user): more than one chunk's worth,
 * freed slots reused while others live, every principal distinct and its fields intact, and the
 * registry emptied completely (under ASan a use of a released slot is reported). */
static void principal__many_users__distinct_and_reused_slots(void **state)
{
    (void)state;
    enum { N = 2500 };
    static sv_principal *ps[N];
    char secret[32];
    for (size_t i = 0; i < N; i++) {
        snprintf(secret, sizeof secret, "pw-%zu", i);
        sv_user u = {.id = i + 1, .secret = secret, .device_limit = (uint32_t)(i % 7)};
        ps[i] = sv_principal_acquire("many", &u);
        assert_non_null(ps[i]);
        if (i > 0)
            assert_ptr_not_equal(ps[i], ps[i - 1]);
    }
    for (size_t i = 0; i < N; i += 2) /* release every other one */
        sv_principal_unref(ps[i]);
    for (size_t i = 0; i < N; i += 2) { /* the same users again: new principals, still found */
        snprintf(secret, sizeof secret, "pw-%zu", i);
        sv_user u = {.id = i + 1, .secret = secret, .device_limit = 3};
        ps[i] = sv_principal_acquire("many", &u);
        assert_non_null(ps[i]);
    }
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(ps[i]->id, i + 1);
        assert_int_equal(sv_principal_device_limit(ps[i]), i % 2 == 0 ? 3 : i % 7);
        snprintf(secret, sizeof secret, "pw-%zu", i); /* the registered one is shared */
        sv_user u = {.id = i + 1, .secret = secret, .device_limit = sv_principal_device_limit(ps[i])};
        sv_principal *again = sv_principal_acquire("many", &u);
        assert_ptr_equal(again, ps[i]);
        sv_principal_unref(again);
    }
    for (size_t i = 0; i < N; i++)
        sv_principal_unref(ps[i]);
    /* emptied: a fresh acquire works from a new chunk */
    sv_user u = {.id = 1, .secret = pw_a};
    sv_principal *p = sv_principal_acquire("many", &u);
    assert_non_null(p);
    assert_int_equal(p->id, 1);
    sv_principal_unref(p);
}

static void hostport__forms__parsed_or_refused(void **state)
{
    (void)state;
    sv_dest d;
    assert_int_equal(sv_dest_parse_hostport("127.0.0.1:80", &d), 0);
    assert_int_equal(d.atyp, SV_ATYP_IPV4);
    assert_int_equal(d.port, 80);
    assert_int_equal(sv_dest_parse_hostport("[::1]:8443", &d), 0);
    assert_int_equal(d.atyp, SV_ATYP_IPV6);
    assert_int_equal(d.port, 8443);
    assert_int_equal(sv_dest_parse_hostport("web.example:65535", &d), 0);
    assert_int_equal(d.atyp, SV_ATYP_DOMAIN);
    assert_string_equal(d.host, "web.example");
    const char *bad[] = {"", "80", ":80", "host:", "host:0", "host:65536", "host:8x",
                         "[::1:80", "[nope]:80", "a b:80", "host:123456", NULL};
    for (size_t i = 0; bad[i] != NULL; i++)
        assert_int_equal(sv_dest_parse_hostport(bad[i], &d), -EINVAL);
    assert_int_equal(sv_dest_parse_hostport(NULL, &d), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ss_ops__whole_and_byte_at_a_time__same_effects),
        cmocka_unit_test(ss_ops__unknown_key__error_with_drain),
        cmocka_unit_test(ss_ops__limit__scan_effect_then_answer),
        cmocka_unit_test(ss_ops__corrupt_chunk_while_relaying__error_with_close),
        cmocka_unit_test(ss_ops__declared_bounds__fit_the_runtime),
        cmocka_unit_test(ss_ops__md5_unavailable__creds_refused_with_reason),
        cmocka_unit_test(principal__same_user__same_principal_until_released),
        cmocka_unit_test(principal__many_users__distinct_and_reused_slots),
        cmocka_unit_test(hostport__forms__parsed_or_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
