/*
 * Fuzz harness: TLS server session (supervisor/transport/tls.c) fed arbitrary client bytes.
 * Input: byte 0 picks the split pattern, the rest is what a client sends. The seeds in
 * fuzz_tls_server.in are ClientHellos captured from OpenSSL 3 clients (TLS 1.3, TLS 1.2 only,
 * SNI + ALPN), whole client flights, an HTTP request, cut, corrupted or oversized hellos; they
 * were written by a throwaway program driving an OpenSSL client against this layer, plus one
 * input libFuzzer found (hello-length-huge-split: the same outcome whole and split).
 * Checks: never a crash; feed consumes at most what it was given; buffered input stays within
 * SV_TLS_IN_MAX and pending output within a handshake flight; an error is terminal and sticky;
 * the same outcome (error, established) whether the input comes whole or in pieces.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/transport/tls.h"
#include "tests/fuzz/fuzz.h"

/* The server's first flight with a self-signed P-256 certificate is about 1.2 KB; any pending
 * output above this is growth the client caused. */
#define OUT_BOUND 8192

static sv_tls_ctx *fuzz_ctx(void)
{
    static sv_tls_ctx *ctx; /* built once per process: key generation is slow */
    if (ctx == NULL) {
        static const char *const alpn[] = {"h2", "http/1.1"};
        sv_tls_config cfg = {.mode = SV_TLS_CERT_SELF, .server_name = "fuzz.example.test",
                             .alpn = alpn, .alpn_count = 2};
        sv_error err = {0};
        FUZZ_CHECK(sv_tls_ctx_new(&cfg, &ctx, &err) == 0);
    }
    return ctx;
}

typedef struct outcome {
    int err;
    bool established, peer_closed;
} outcome;

static void drain(sv_tls_session *s)
{
    uint8_t out[4096];
    FUZZ_CHECK(sv_tls_out_pending(s) <= OUT_BOUND);
    while (sv_tls_take_out(s, out, sizeof out) > 0)
        ;
    FUZZ_CHECK(sv_tls_out_pending(s) == 0);
}

/* Feed @p wire in pieces of at most @p piece bytes, reading and draining after each. */
static outcome run(const uint8_t *wire, size_t n, size_t piece, uint32_t seed)
{
    sv_tls_session *s;
    FUZZ_CHECK(sv_tls_session_new(fuzz_ctx(), &s) == 0);
    size_t at = 0;
    int err = 0;
    while (at < n && err == 0) {
        seed = seed * 1103515245u + 12345u;
        size_t k = piece >= n ? n - at : 1 + (seed >> 8) % piece;
        k = k < n - at ? k : n - at;
        ssize_t r = sv_tls_feed(s, wire + at, k);
        if (r < 0) {
            err = (int)r;
            break;
        }
        FUZZ_CHECK((size_t)r <= k);
        at += (size_t)r;
        FUZZ_CHECK(sv_tls_buffered(s) <= SV_TLS_IN_MAX + OUT_BOUND);
        uint8_t plain[4096];
        ssize_t got;
        while ((got = sv_tls_read(s, plain, sizeof plain)) > 0)
            FUZZ_CHECK((size_t)got <= sizeof plain);
        if (got < 0)
            err = (int)got;
        drain(s);
        FUZZ_CHECK(sv_tls_buffered(s) <= SV_TLS_IN_MAX);
        if (r == 0 && err == 0) /* full and nothing to read: only possible if established */
            FUZZ_CHECK(sv_tls_is_established(s) || sv_tls_is_peer_closed(s));
        if (r == 0 && err == 0 && sv_tls_is_peer_closed(s))
            break;
    }
    if (err != 0) {
        FUZZ_CHECK(err == -EPROTO || err == -EMSGSIZE);
        FUZZ_CHECK(sv_tls_error(s) == err);
        FUZZ_CHECK(sv_tls_feed(s, wire, n) == err);
        FUZZ_CHECK(sv_tls_write(s, wire, n) == err);
        drain(s);
        FUZZ_CHECK(sv_tls_buffered(s) <= SV_TLS_IN_MAX);
    } else if (!sv_tls_is_established(s)) {
        FUZZ_CHECK(sv_tls_write(s, wire, n) == -ENOTCONN);
        FUZZ_CHECK(sv_tls_shutdown(s) == -ENOTCONN);
    }
    outcome o = {err, sv_tls_is_established(s), sv_tls_is_peer_closed(s)};
    sv_tls_session_free(s);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t pieces[] = {1, 2, 5, 64, 1000, 20000};
    size_t piece = pieces[data[0] % 6];
    const uint8_t *wire = data + 1;
    size_t n = size - 1;
    outcome whole = run(wire, n, n + 1, 0);
    outcome split = run(wire, n, piece, data[0]);
    FUZZ_CHECK(whole.err == split.err);
    FUZZ_CHECK(whole.established == split.established);
    FUZZ_CHECK(whole.peer_closed == split.peer_closed);
    return 0;
}
