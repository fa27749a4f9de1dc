/*
 * Unit tests: sniffing (supervisor/proto/sniff.c, issue 9 "Sniffing"). Real first flights of
 * openssl s_client and curl (the seed corpus tests/fuzz/fuzz_sniff.in) whole and byte at a time,
 * hand-built ClientHellos for each length field, HTTP/1 requests, and malformed inputs.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "supervisor/proto/sniff.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static size_t load(const char *seed, uint8_t *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fuzz/fuzz_sniff.in/%s", TOP_SRCDIR, seed);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* Whole input gives @p want (and @p name when FOUND); every shorter prefix gives NEED_MORE or
 * the same final answer, and the first prefix that answers answers as the whole does. */
static void check_prefixes(const uint8_t *p, size_t n, sv_sniff_result want, const char *name)
{
    char got[SV_SNIFF_NAME_CAP];
    memset(got, 0, sizeof got);
    assert_int_equal(sv_sniff(p, n, got), want);
    if (want == SV_SNIFF_FOUND)
        assert_string_equal(got, name);
    bool answered = false;
    for (size_t k = 0; k <= n; k++) {
        char part[SV_SNIFF_NAME_CAP] = "";
        sv_sniff_result r = sv_sniff(p, k, part);
        if (answered) {
            assert_int_equal(r, want);
            continue;
        }
        if (r == SV_SNIFF_NEED_MORE)
            continue;
        assert_int_equal(r, want);
        if (want == SV_SNIFF_FOUND)
            assert_string_equal(part, name);
        answered = true;
    }
    assert_true(answered);
}

static void seed_is(const char *seed, sv_sniff_result want, const char *name)
{
    uint8_t buf[4096];
    size_t n = load(seed, buf, sizeof buf);
    assert_true(n > 0);
    check_prefixes(buf, n, want, name);
}

static void real_clients(void **state)
{
    (void)state;
    seed_is("tls-openssl-sni", SV_SNIFF_FOUND, "example.test"); /* sent as Example.Test */
    seed_is("tls-curl-sni", SV_SNIFF_FOUND, "sni.example.test");
    seed_is("tls-openssl-no-sni", SV_SNIFF_NONE, NULL);
    seed_is("http-curl-host", SV_SNIFF_FOUND, "www.example.test");
}

/* ---- hand-built ClientHello ---------------------------------------------------------------- */

typedef struct hello {
    uint8_t b[2048];
    size_t n;
} hello;

static void put(hello *h, const void *p, size_t n)
{
    assert_true(h->n + n <= sizeof h->b);
    memcpy(h->b + h->n, p, n);
    h->n += n;
}
static void put8(hello *h, unsigned v) { uint8_t x = (uint8_t)v; put(h, &x, 1); }
static void put16(hello *h, unsigned v) { put8(h, v >> 8); put8(h, v & 0xff); }
static void set16(hello *h, size_t at, size_t v)
{
    h->b[at] = (uint8_t)(v >> 8);
    h->b[at + 1] = (uint8_t)v;
}

/* A ClientHello with a 32-byte session id, two suites, one compression method, a
 * supported_versions extension, then server_name with an unknown entry before host_name @p sni
 * (no server_name when NULL). Offsets of its length fields are returned for corruption. */
typedef struct offsets {
    size_t rec, hs, sid, ext, sni_ext, sni_list, sni_name;
} offsets;

static offsets build(hello *h, const char *sni)
{
    offsets o;
    h->n = 0;
    put8(h, 0x16);
    put16(h, 0x0301);
    o.rec = h->n;
    put16(h, 0);
    put8(h, 1);
    o.hs = h->n;
    put8(h, 0);
    put16(h, 0);
    put16(h, 0x0303);
    for (int i = 0; i < 32; i++)
        put8(h, (unsigned)i);
    o.sid = h->n;
    put8(h, 32);
    for (int i = 0; i < 32; i++)
        put8(h, 0xaa);
    put16(h, 4);
    put16(h, 0x1301);
    put16(h, 0x1302);
    put8(h, 1);
    put8(h, 0);
    o.ext = h->n;
    put16(h, 0);
    put16(h, 43); /* supported_versions */
    put16(h, 3);
    put8(h, 2);
    put16(h, 0x0304);
    o.sni_ext = o.sni_list = o.sni_name = 0;
    if (sni != NULL) {
        size_t len = strlen(sni);
        put16(h, 0);
        o.sni_ext = h->n;
        put16(h, (unsigned)(2 + 3 + 2 + 3 + len));
        o.sni_list = h->n;
        put16(h, (unsigned)(3 + 2 + 3 + len));
        put8(h, 7); /* an unknown name type, skipped */
        put16(h, 2);
        put16(h, 0x4142);
        put8(h, 0);
        o.sni_name = h->n;
        put16(h, (unsigned)len);
        put(h, sni, len);
    }
    put16(h, 0xff01); /* renegotiation_info after it */
    put16(h, 1);
    put8(h, 0);
    set16(h, o.ext, h->n - o.ext - 2);
    size_t hs = h->n - o.hs - 3;
    h->b[o.hs] = (uint8_t)(hs >> 16);
    set16(h, o.hs + 1, hs & 0xffff);
    set16(h, o.rec, h->n - o.rec - 2);
    return o;
}

static void built_hellos(void **state)
{
    (void)state;
    hello h;
    build(&h, "Video.Example-1.test");
    check_prefixes(h.b, h.n, SV_SNIFF_FOUND, "video.example-1.test");
    build(&h, NULL);
    check_prefixes(h.b, h.n, SV_SNIFF_NONE, NULL);
    /* bytes after the record (the next flight) change nothing */
    build(&h, "a.test");
    h.b[h.n++] = 0x17;
    check_prefixes(h.b, h.n, SV_SNIFF_FOUND, "a.test");
    char longest[254];
    memset(longest, 'a', 253);
    longest[253] = '\0';
    build(&h, longest);
    check_prefixes(h.b, h.n, SV_SNIFF_FOUND, longest);
}

static sv_sniff_result whole(const hello *h)
{
    char name[SV_SNIFF_NAME_CAP];
    return sv_sniff(h->b, h->n, name);
}

static void malformed_hellos(void **state)
{
    (void)state;
    hello h;
    offsets o = build(&h, "x.test");
    h.b[1] = 2; /* record version 2.x */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    h.b[o.hs - 1] = 2; /* a ServerHello */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    set16(&h, o.rec, 3); /* record shorter than a handshake header */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    set16(&h, o.rec, 16385); /* longer than a record may be */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    h.b[o.hs] = 1; /* handshake longer than its record (spans records) */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    h.b[o.sid] = 33; /* session id over 32 bytes */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    set16(&h, o.ext, 0x7fff); /* extensions past the handshake */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    set16(&h, o.sni_ext, 0x7fff); /* an extension past the extensions */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    set16(&h, o.sni_list, 0x0100); /* server name list past its extension */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    set16(&h, o.sni_name, 0x0100); /* host_name past the list */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    o = build(&h, "x.test");
    set16(&h, o.sni_name, 0); /* empty name */
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    build(&h, "bad name.test");
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    build(&h, "...");
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    char toolong[255];
    memset(toolong, 'b', 254);
    toolong[254] = '\0';
    build(&h, toolong);
    assert_int_equal(whole(&h), SV_SNIFF_NONE);
    uint8_t seed[4096];
    size_t n = load("tls-bad-reclen", seed, sizeof seed);
    char name[SV_SNIFF_NAME_CAP];
    assert_int_equal(sv_sniff(seed, n, name), SV_SNIFF_NONE);
}

/* ---- HTTP/1 ---------------------------------------------------------------------------------- */

static void http_is(const char *req, sv_sniff_result want, const char *name)
{
    check_prefixes((const uint8_t *)req, strlen(req), want, name);
}

static void http_requests(void **state)
{
    (void)state;
    http_is("GET / HTTP/1.1\r\nHost: Blocked.Test\r\n\r\n", SV_SNIFF_FOUND, "blocked.test");
    http_is("POST /x?a=b HTTP/1.0\r\nContent-Length: 0\r\nhost:\t a.b.test:8080 \r\n\r\n",
            SV_SNIFF_FOUND, "a.b.test");
    http_is("CONNECT c.test:443 HTTP/1.1\nHOST: c.test:443\n\n", SV_SNIFF_FOUND, "c.test");
    http_is("GET / HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n", SV_SNIFF_FOUND, "127.0.0.1");
    http_is("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("GET / HTTP/1.1\r\nHost: a.test:80x\r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("GET / HTTP/1.1\r\nHost: a.test:\r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("GET / HTTP/1.1\r\nHost: \r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("GET / HTTP/1.1\r\nAccept: */*\r\n\r\nHost: late.test\r\n", SV_SNIFF_NONE, NULL);
    http_is("GET / HTTP/1.1\r\nno colon\r\nHost: a.test\r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("GET / HTTP/2.0\r\nHost: a.test\r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("get / HTTP/1.1\r\nHost: a.test\r\n\r\n", SV_SNIFF_NONE, NULL);
    http_is("GETX / HTTP/1.1\r\n", SV_SNIFF_NONE, NULL);
    http_is("SSH-2.0-OpenSSH_9.2\r\n", SV_SNIFF_NONE, NULL);
    char name[SV_SNIFF_NAME_CAP];
    assert_int_equal(sv_sniff((const uint8_t *)"", 0, name), SV_SNIFF_NEED_MORE);
    /* a header section that has not ended yet waits */
    const char *part = "GET / HTTP/1.1\r\nAccept: */*\r\n";
    assert_int_equal(sv_sniff((const uint8_t *)part, strlen(part), name), SV_SNIFF_NEED_MORE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(real_clients),
        cmocka_unit_test(built_hellos),
        cmocka_unit_test(malformed_hellos),
        cmocka_unit_test(http_requests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
