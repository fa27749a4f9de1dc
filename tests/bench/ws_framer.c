/*
 * ws_framer: CPU cost of unframing client WebSocket data (masked binary frames) with wslay's
 * frame API against katana's WebSocket layer (supervisor/transport/ws.c), issue 9: "wslay
 * unless the benchmark shows it costing more than 5% CPU s/GB over a framer of our own".
 * Not built by make (wslay is not a dependency); by hand from the source tree, after configure:
 *   cc -O2 -I. -Ibuild -include build/config.h tests/bench/ws_framer.c \
 *      supervisor/transport/ws.c supervisor/transport/chain.c -lwslay -lcrypto -o ws_framer
 *   ./ws_framer [FRAME_BYTES]
 * Both read the same 64 MiB of frames in 64 KiB reads (as a TCP read lands) and copy the
 * payload into a 64 KiB buffer (where the protocol above reads it); prints CPU s/GB each.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>

#include <wslay/wslay.h>

#include "supervisor/transport/ws.h"

#define READ_SIZE 65536

static const uint8_t *g_wire;
static size_t g_len, g_pos, g_read_end;
static uint8_t g_out[READ_SIZE];

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* wslay pulls from the current 64 KiB read */
static ssize_t recv_cb(uint8_t *buf, size_t len, int flags, void *u)
{
    (void)flags, (void)u;
    size_t m = g_read_end - g_pos;
    if (m == 0)
        return -1;
    if (m > len)
        m = len;
    memcpy(buf, g_wire + g_pos, m);
    g_pos += m;
    return (ssize_t)m;
}

static ssize_t send_cb(const uint8_t *d, size_t l, int f, void *u)
{
    (void)d, (void)f, (void)u;
    return (ssize_t)l;
}

static int mask_cb(uint8_t *b, size_t l, void *u)
{
    (void)u;
    memset(b, 7, l);
    return 0;
}

static uint8_t *alloc_cb(void *ctx, size_t *cap)
{
    (void)ctx;
    *cap = sizeof g_out;
    return g_out;
}

static bool deliver_cb(void *ctx, uint8_t *p, size_t n)
{
    (void)p;
    *(size_t *)ctx += n;
    return true;
}

int main(int argc, char **argv)
{
    size_t frame = argc > 1 ? (size_t)atol(argv[1]) : 8192, nframes = (64u << 20) / frame;
    size_t hdr = frame < 126 ? 6 : frame <= 0xFFFF ? 8 : 14;
    g_len = nframes * (hdr + frame);
    uint8_t *wire = malloc(g_len);
    if (wire == NULL || frame == 0)
        return 1;
    size_t at = 0;
    static const uint8_t key[4] = {0x11, 0x22, 0x33, 0x44};
    for (size_t f = 0; f < nframes; f++) {
        wire[at++] = 0x82;
        if (frame < 126) {
            wire[at++] = (uint8_t)(0x80 | frame);
        } else if (frame <= 0xFFFF) {
            wire[at++] = 0x80 | 126;
            wire[at++] = (uint8_t)(frame >> 8);
            wire[at++] = (uint8_t)frame;
        } else {
            wire[at++] = 0x80 | 127;
            for (int i = 0; i < 8; i++)
                wire[at++] = (uint8_t)((uint64_t)frame >> (56 - 8 * i));
        }
        memcpy(wire + at, key, 4);
        at += 4;
        for (size_t i = 0; i < frame; i++)
            wire[at + i] = (uint8_t)(i * 7) ^ key[i % 4];
        at += frame;
    }
    g_wire = wire;
    double gb = (double)nframes * (double)frame / 1e9;
    int reps = 8;

    struct wslay_frame_callbacks cb = {send_cb, recv_cb, mask_cb};
    size_t got = 0;
    double t0 = cpu_now();
    for (int r = 0; r < reps; r++) {
        wslay_frame_context_ptr ctx;
        if (wslay_frame_context_init(&ctx, &cb, NULL) != 0)
            return 1;
        size_t w = 0;
        for (g_pos = 0; g_pos < g_len;) {
            g_read_end = g_pos + READ_SIZE < g_len ? g_pos + READ_SIZE : g_len;
            for (;;) {
                struct wslay_frame_iocb io;
                ssize_t n = wslay_frame_recv(ctx, &io);
                if (n < 0)
                    break;
                if (w + io.data_length > sizeof g_out)
                    w = 0;
                memcpy(g_out + w, io.data, io.data_length);
                w += io.data_length;
                got += io.data_length;
            }
        }
        wslay_frame_context_free(ctx);
    }
    double t_wslay = cpu_now() - t0;

    sv_ws_conf *conf = sv_ws_conf_new("/ws", NULL);
    sv_layer_conf lc = {&sv_ws_layer_ops, conf};
    static uint8_t stage[SV_CHAIN_STAGE_BYTES];
    static const char req[] = "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: "
                              "Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                              "Sec-WebSocket-Version: 13\r\n\r\n";
    size_t ours = 0;
    t0 = cpu_now();
    for (int r = 0; r < reps; r++) {
        sv_chain ch;
        if (conf == NULL || sv_chain_open(&ch, &lc, 1) != 0)
            return 1;
        size_t dummy = 0;
        sv_chain_unwrap(&ch, (const uint8_t *)req, sizeof req - 1, stage, alloc_cb, deliver_cb,
                        &dummy);
        for (size_t pos = 0; pos < g_len; pos += READ_SIZE) {
            size_t n = g_len - pos < READ_SIZE ? g_len - pos : READ_SIZE;
            if (sv_chain_unwrap(&ch, wire + pos, n, stage, alloc_cb, deliver_cb, &ours) != 0)
                return 1;
        }
        sv_chain_free(&ch);
    }
    double t_ours = cpu_now() - t0;
    printf("frames of %zu bytes, %d x %.3f GB\n", frame, reps, gb);
    printf("wslay_frame_recv: %.3f CPU s/GB (%zu bytes)\n", t_wslay / (gb * reps), got);
    printf("katana ws layer:  %.3f CPU s/GB (%zu bytes)\n", t_ours / (gb * reps), ours);
    sv_ws_conf_free(conf);
    free(wire);
    return 0;
}
