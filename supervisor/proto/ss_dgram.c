/*
 * Shadowsocks AEAD UDP on the datagram seam (dgram.h): an adapter over the sv_ss_udp_* API of
 * shadowsocks.h, with the keyring of the stream core's credential table (ss_ops.h).
 */
#include "config.h"

#include <errno.h>

#include "supervisor/proto/shadowsocks.h"
#include "supervisor/proto/ss_dgram.h"
#include "supervisor/proto/ss_ops.h"

_Static_assert(SV_SS_SALT_MAX + SV_DEST_WIRE_MAX + SV_SS_TAG <= SV_DGRAM_OVERHEAD_MAX,
               "a Shadowsocks reply's overhead must fit the runtime's room");

static int ssd_open(const void *creds, int64_t now, sv_dgram_guide *guide, uint8_t *pkt,
                    size_t n, sv_dgram_in *out, sv_aead *ctx)
{
    (void)now;
    sv_ss_guide g = sv_ss_guide_make(-1, NULL, 0);
    if (guide != NULL)
        g = sv_ss_guide_make(guide->hint, guide->order, guide->limit);
    out->user = -1;
    ssize_t plen = sv_ss_udp_open_guided(sv_ss_creds_ring(creds), &g, pkt, n, &out->user,
                                         &out->dest, &out->payload, ctx);
    if (guide != NULL)
        guide->trials = g.trials;
    if (plen < 0)
        return (int)plen;
    out->len = (size_t)plen;
    out->dest.network = SV_NET_UDP;
    return 0;
}

static ssize_t ssd_seal(void *session, const void *creds, int user, int64_t now,
                        const sv_dest *from, const uint8_t *payload, size_t n, uint8_t *out,
                        size_t cap, sv_aead *ctx, void (*rng)(uint8_t *buf, size_t n))
{
    (void)session, (void)now;
    const sv_ss_keyring *ring = sv_ss_creds_ring(creds);
    if (user < 0 || (size_t)user >= ring->n)
        return -EINVAL;
    return sv_ss_udp_seal_ctx(ring->cipher, ring->keys[user], from, payload, n, out, cap, rng,
                              ctx);
}

const sv_dgram_ops sv_shadowsocks_dgram_ops = {
    .name = "shadowsocks",
    .session_size = 0,
    .overhead = SV_SS_SALT_MAX + SV_DEST_WIRE_MAX + SV_SS_TAG,
    .open = ssd_open,
    .scan = sv_ss_creds_scan,
    .seal = ssd_seal,
};
