/*
 * Fuzz harness: the HTTPUpgrade server layer (supervisor/transport/httpupgrade.c) in a transport
 * chain, fed arbitrary client bytes (issue 10, PROTOCOLS-2.md §4). Input: byte 0 picks the
 * configuration ("/up" with any Host, or "/up" with Host "node.test") and the split pattern; the
 * rest is what a client sends after TCP. Seeds in fuzz_httpupgrade.in: Xray's request with early
 * data, sing-box's, wrong path, wrong Host, a WebSocket request, plain HTTP, a TLS hello.
 * Checks: never a crash; the same bytes up, bytes down and status whether the input comes whole
 * or split; nothing comes up before the upgrade or a refusal; an upgraded session passes up
 * exactly the bytes after the request and answers exactly the 101 of §4.2; a refused one passes
 * up every byte it was given and answers nothing; a wrap after the upgrade goes down as it is.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/transport/httpupgrade.h"
#include "supervisor/transport/ws.h"
#include "tests/fuzz/fuzz.h"

static const char k_101[] = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                            "Upgrade: websocket\r\n\r\n";

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
    FUZZ_CHECK(r->down_len + len <= r->cap + sizeof k_101);
    if (len > 0)
        memcpy(r->down + r->down_len, p, len);
    r->down_len += len;
    sv_chain_out_consume(ch, len);
}

static void drive(const sv_ws_conf *wc, const uint8_t *p, size_t n, size_t step, run *r)
{
    static uint8_t stage[SV_CHAIN_STAGE_BYTES];
    sv_layer_conf conf[1] = {{&sv_httpupgrade_layer_ops, wc}};
    sv_chain ch;
    FUZZ_CHECK(sv_chain_open(&ch, conf, 1) == 0);
    memset(r, 0, sizeof *r);
    r->cap = n + 16;
    r->up = malloc(r->cap);
    r->down = malloc(r->cap + sizeof k_101);
    FUZZ_CHECK(r->up != NULL && r->down != NULL);
    size_t off = 0;
    while (off < n) {
        size_t k = step == 0 || step > n - off ? n - off : step;
        int rc = sv_chain_unwrap(&ch, p + off, k, stage, alloc_cb, deliver_cb, r);
        off += k;
        take_down(&ch, r);
        if (!(sv_chain_status(&ch) & SV_LAYER_UP))
            FUZZ_CHECK(r->up_len == 0 && r->down_len == 0); /* nothing during the handshake */
        if (rc < 0) {
            r->rc = rc;
            break;
        }
    }
    r->status = sv_chain_status(&ch);
    FUZZ_CHECK(r->rc == 0); /* the layer fails only when memory runs out */
    if (r->status & SV_LAYER_REFUSED) {
        FUZZ_CHECK(r->up_len == n && memcmp(r->up, p, n) == 0 && r->down_len == 0);
    } else if (r->status & SV_LAYER_UP) {
        FUZZ_CHECK(r->down_len == sizeof k_101 - 1 && memcmp(r->down, k_101, r->down_len) == 0);
        const uint8_t *e = memmem(p, n, "\r\n\r\n", 4);
        FUZZ_CHECK(e != NULL);
        size_t head = (size_t)(e - p) + 4;
        FUZZ_CHECK(r->up_len == n - head && memcmp(r->up, p + head, r->up_len) == 0);
        FUZZ_CHECK(sv_chain_wrap(&ch, (const uint8_t *)"xyz", 3) == 3);
        take_down(&ch, r);
        FUZZ_CHECK(memcmp(r->down + r->down_len - 3, "xyz", 3) == 0);
    }
    sv_chain_free(&ch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sv_ws_conf *plain, *hosted;
    if (plain == NULL) {
        plain = sv_ws_conf_new("/up?ed=2048", NULL);
        hosted = sv_ws_conf_new("/up", "node.test");
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
