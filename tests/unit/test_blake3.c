/*
 * Unit tests: BLAKE3 (supervisor/crypto/blake3.c) on every case of tests/unit/vectors/blake3.json
 * (the official test-vector inputs, byte i = i mod 251; hash with 64 bytes of extended output,
 * keyed_hash, derive_key) and its Shadowsocks 2022 session-subkey examples (PROTOCOLS.md §3.1).
 * Each case is hashed whole and byte at a time, and the state is finalized mid-way and resumed.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "supervisor/crypto/blake3.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

static json_t *g_vec;

static int load_vectors(void **state)
{
    (void)state;
    char path[1024];
    const char *top = getenv("KATANA_TOP_SRCDIR");
    snprintf(path, sizeof path, "%s/tests/unit/vectors/blake3.json", top ? top : TOP_SRCDIR);
    json_error_t err;
    g_vec = json_load_file(path, 0, &err);
    if (g_vec == NULL)
        fprintf(stderr, "%s: %s\n", path, err.text);
    return g_vec != NULL && json_array_size(json_object_get(g_vec, "cases")) == 7 ? 0 : -1;
}

static int free_vectors(void **state)
{
    (void)state;
    json_decref(g_vec);
    return 0;
}

static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
    size_t n = strlen(s) / 2;
    assert_true(n <= cap);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
    return n;
}

static void expect_hex(const uint8_t *got, size_t n, const char *want_hex)
{
    uint8_t want[128];
    assert_int_equal(unhex(want_hex, want, sizeof want), n);
    assert_memory_equal(got, want, n);
}

enum mode { HASH, KEYED, DERIVE };

static void start(sv_blake3 *h, enum mode m)
{
    if (m == HASH)
        sv_blake3_init(h);
    else if (m == KEYED)
        sv_blake3_init_keyed(h, (const uint8_t *)json_string_value(
                                    json_object_get(g_vec, "keyed_hash_key")));
    else
        sv_blake3_init_derive_key(h,
                                  json_string_value(json_object_get(g_vec, "derive_key_context")));
}

/* Hash @p in whole, byte at a time, and in 1000-byte steps with a finalize between them. */
static void check_mode(enum mode m, const uint8_t *in, size_t n, const char *want, size_t out_len)
{
    uint8_t out[64];
    sv_blake3 h;
    start(&h, m);
    sv_blake3_update(&h, in, n);
    sv_blake3_final(&h, out, out_len);
    expect_hex(out, out_len, want);

    start(&h, m);
    for (size_t i = 0; i < n; i++)
        sv_blake3_update(&h, in + i, 1);
    memset(out, 0, sizeof out);
    sv_blake3_final(&h, out, out_len);
    expect_hex(out, out_len, want);

    start(&h, m);
    for (size_t off = 0; off < n; off += 1000) {
        uint8_t tmp[64];
        sv_blake3_final(&h, tmp, sizeof tmp); /* must not disturb the state */
        sv_blake3_update(&h, in + off, n - off < 1000 ? n - off : 1000);
    }
    memset(out, 0, sizeof out);
    sv_blake3_final(&h, out, out_len);
    expect_hex(out, out_len, want);
}

static void test_official_vectors(void **state)
{
    (void)state;
    assert_string_equal(json_string_value(json_object_get(g_vec, "input_pattern")),
                        "byte[i] = i % 251");
    const json_t *cases = json_object_get(g_vec, "cases");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        size_t n = (size_t)json_integer_value(json_object_get(c, "input_len"));
        uint8_t *in = malloc(n ? n : 1);
        assert_non_null(in);
        for (size_t j = 0; j < n; j++)
            in[j] = (uint8_t)(j % 251);
        check_mode(HASH, in, n, json_string_value(json_object_get(c, "hash")), 32);
        check_mode(HASH, in, n, json_string_value(json_object_get(c, "hash_64_bytes_xof")), 64);
        check_mode(KEYED, in, n, json_string_value(json_object_get(c, "keyed_hash")), 32);
        check_mode(DERIVE, in, n, json_string_value(json_object_get(c, "derive_key")), 32);
        /* a shorter output is a prefix of the longer one */
        uint8_t one[1], full[32];
        sv_blake3_hash(in, n, one, 1);
        sv_blake3_hash(in, n, full, 32);
        assert_int_equal(one[0], full[0]);
        free(in);
    }
}

static void test_ss2022_session_subkeys(void **state)
{
    (void)state;
    const json_t *ex = json_object_get(g_vec, "ss2022_session_subkey_examples");
    const char *ctx = json_string_value(json_object_get(ex, "context"));
    assert_string_equal(ctx, "shadowsocks 2022 session subkey");
    const json_t *cases = json_object_get(ex, "cases");
    assert_int_equal(json_array_size(cases), 2);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        uint8_t material[64], out[32];
        size_t n = unhex(json_string_value(json_object_get(c, "key_material_hex")), material,
                         sizeof material);
        const char *want = json_string_value(json_object_get(c, "session_subkey_hex"));
        sv_blake3_derive_key(ctx, material, n, out, strlen(want) / 2);
        expect_hex(out, strlen(want) / 2, want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official_vectors),
        cmocka_unit_test(test_ss2022_session_subkeys),
    };
    return cmocka_run_group_tests(tests, load_vectors, free_vectors);
}
