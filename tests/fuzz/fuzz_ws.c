/*
 * Fuzz harness: the WebSocket server layer (supervisor/transport/ws.c) in a transport chain,
 * fed arbitrary client bytes (issue 9). Input: byte 0 picks the path the layer serves ("/ws",
 * or "/ws" with Host "node.test") and the split pattern; the rest is what a client sends after
 * TCP. Seeds in fuzz_ws.in: upgrade requests (v2ray's capture, early data, wrong path, wrong
 * Host, plain HTTP, a TLS hello), followed by masked frames, fragments, pings, a Close, bad
 * frames and an oversized length.
 * Checks: never a crash; the same bytes up, bytes down, status and error whether the input
 * comes whole or split; pending output within SV_WS_OUT_MAX plus a control frame; a refused
 * session passes up exactly the bytes it was given; bytes come up only after the upgrade or a
 * refusal; an error is sticky.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/transport/ws.h"
#include "tests/fuzz/fuzz.h"

typedef struct run {
    uint8_t *up, *down;
    size_t up_len, down_len, cap;
    uint8_t buf[1500]; /* small on purpose: the top layer's output is cut often */
    int rc;
    unsigned status;
} run;

static uint8_t *alloc_cb(void *ctx, size_t *cap)
{
    run *r = ctx;
    *cap = sizeof r->buf;
    return r->buf;
}

static bool deliver_cb(void *ctx, uint8_t *p, size_t n)
{
    run *r = ctx;
    FUZZ_CHECK(n > 0 && n <= sizeof r->buf && p == r->buf);
    FUZZ_CHECK(r->up_len + n <= r->cap);
    memcpy(r->up + r->up_len, p, n);
    r->up_len += n;
    return true;
}

static void take_down(sv_chain *ch, run *r)
{
    size_t len;
    FUZZ_CHECK(sv_chain_pump(ch) == 0);
    const uint8_t *p = sv_chain_out_peek(ch, &len);
    FUZZ_CHECK(len <= SV_WS_OUT_MAX + 256);
    /* the down stream is bounded by the 101 answer plus one control frame per 6 input bytes */
    if (r->down_len + len > r->cap * 24 + 4096)
        abort();
    if (len > 0)
        memcpy(r->down + r->down_len, p, len);
    r->down_len += len;
    sv_chain_out_consume(ch, len);
}

static void drive(const sv_ws_conf *wc, const uint8_t *p, size_t n, size_t step, run *r)
{
    static uint8_t stage[SV_CHAIN_STAGE_BYTES];
    sv_layer_conf conf[1] = {{&sv_ws_layer_ops, wc}};
    sv_chain ch;
    FUZZ_CHECK(sv_chain_open(&ch, conf, 1) == 0);
    memset(r, 0, sizeof *r);
    r->cap = n + 16;
    r->up = malloc(r->cap);
    r->down = malloc(r->cap * 24 + 4096);
    FUZZ_CHECK(r->up != NULL && r->down != NULL);
    size_t off = 0;
    while (off < n) {
        size_t k = step == 0 || step > n - off ? n - off : step;
        unsigned before = sv_chain_status(&ch);
        int rc = sv_chain_unwrap(&ch, p + off, k, stage, alloc_cb, deliver_cb, r);
        off += k;
        take_down(&ch, r);
        if (!(before & SV_LAYER_UP) && !(sv_chain_status(&ch) & SV_LAYER_UP))
            FUZZ_CHECK(r->up_len == 0 || rc < 0); /* nothing up during the handshake */
        if (rc < 0) {
            r->rc = rc;
            FUZZ_CHECK(sv_chain_unwrap(&ch, p, n, stage, alloc_cb, deliver_cb, r) < 0);
            break;
        }
    }
    r->status = sv_chain_status(&ch);
    if (r->rc == 0 && (r->status & SV_LAYER_REFUSED))
        FUZZ_CHECK(r->up_len == n && memcmp(r->up, p, n) == 0);
    if (r->rc == 0 && (r->status & SV_LAYER_UP) && !(r->status & SV_LAYER_REFUSED)) {
        /* a wrap after the upgrade frames the bytes (unless our side has ended) */
        ssize_t a = sv_chain_wrap(&ch, (const uint8_t *)"xyz", 3);
        FUZZ_CHECK(a == 3);
        take_down(&ch, r);
    }
    sv_chain_free(&ch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sv_ws_conf *plain, *hosted;
    if (plain == NULL) {
        plain = sv_ws_conf_new("/ws?ed=2048", NULL);
        hosted = sv_ws_conf_new("/ws", "node.test");
        FUZZ_CHECK(plain != NULL && hosted != NULL);
    }
    if (size < 1)
        return 0;
    const sv_ws_conf *wc = data[0] & 1 ? hosted : plain;
    static const size_t steps[] = {1, 2, 3, 7, 64, 1000};
    size_t step = steps[(data[0] >> 1) % 6];
    run whole, split;
    drive(wc, data + 1, size - 1, 0, &whole);
    drive(wc, data + 1, size - 1, step, &split);
    FUZZ_CHECK(whole.rc == split.rc && whole.status == split.status);
    FUZZ_CHECK(whole.up_len == split.up_len && memcmp(whole.up, split.up, whole.up_len) == 0);
    FUZZ_CHECK(whole.down_len == split.down_len &&
               memcmp(whole.down, split.down, whole.down_len) == 0);
    free(whole.up);
    free(whole.down);
    free(split.up);
    free(split.down);
    return 0;
}
