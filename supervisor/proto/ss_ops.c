/*
 * Shadowsocks AEAD on the protocol-core seam (proto.h): an adapter over the sv_ss_tcp API of
 * shadowsocks.h. The runtime's hot path stays as it was: chunks are decrypted in place in the
 * buffer given to feed(), and frame() seals a whole remote read with sv_ss_tcp_seal_to().
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proto/ss_ops.h"

typedef struct ss_creds {
    sv_ss_keyring ring;
    sv_replay *replay; /**< the inbound's salt filter (borrowed; set by attach_replay) */
} ss_creds;

/* ss_creds_new(), copying the unchanged users' keys from @p was. */
static int ss_creds_new_from(const sv_inbound_spec *in, const sv_user_set *users,
                             const void *was, const int *from, void **out, sv_error *err)
{
    size_t n = users != NULL ? users->n_users : 0;
    ss_creds *c = calloc(1, sizeof *c);
    const char **pw = calloc(n ? n : 1, sizeof *pw);
    if (c == NULL || pw == NULL) {
        free(c);
        free(pw);
        return sv_error_set(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        pw[i] = users->users[i].secret;
    int rc = sv_ss_keyring_init_from(&c->ring, in->ss_cipher, pw, n,
                                     was != NULL ? &((const ss_creds *)was)->ring : NULL, from);
    free(pw);
    if (rc != 0) {
        free(c);
        if (rc == -EIO)
            return sv_error_set(err, rc,
                                "inbound %s: cannot derive Shadowsocks keys: MD5 is not available "
                                "in OpenSSL (provider configuration)",
                                in->tag);
        if (rc == -EINVAL)
            return sv_error_set(err, rc, "inbound %s: unknown Shadowsocks cipher", in->tag);
        return sv_error_set(err, rc, "out of memory");
    }
    *out = c;
    return 0;
}

static int ss_creds_new(const sv_inbound_spec *in, const sv_user_set *users, void **out,
                        sv_error *err)
{
    return ss_creds_new_from(in, users, NULL, NULL, out, err);
}

static void ss_creds_free(void *creds)
{
    ss_creds *c = creds;
    if (c == NULL)
        return;
    sv_ss_keyring_deinit(&c->ring);
    free(c);
}

static void ss_attach_replay(void *creds, sv_replay *filter) { ((ss_creds *)creds)->replay = filter; }

static int ss_init(void *state, const sv_inbound_spec *in)
{
    return sv_ss_tcp_init(state, in->ss_cipher);
}

static void ss_deinit(void *state) { sv_ss_tcp_deinit(state); }

static void ss_set_guide(void *state, int hint, struct sv_order *order, unsigned limit)
{
    ((sv_ss_tcp *)state)->guide = sv_ss_guide_make(hint, order, limit);
}

static int ss_scan(const void *creds, const uint8_t *in, size_t n, unsigned *trials)
{
    return sv_ss_scan(&((const ss_creds *)creds)->ring, in, n, trials);
}

static void ss_scan_result(void *state, int user) { sv_ss_tcp_scan_result(state, user); }

/* A scan's answer waits for the next feed (the runtime feeds the kept bytes again at once). */
static bool ss_more(const void *state)
{
    const sv_ss_tcp *c = state;
    return c->scanned && c->state == SV_SS_AUTH;
}

/* One sv_ss_tcp_feed() call per chunk until the input needs more bytes or fx is nearly full
 * (one call can give three effects: authenticated, open and data). */
static ssize_t ss_feed(void *state, const void *creds, uint8_t *p, size_t n, sv_effects *fx)
{
    sv_ss_tcp *c = state;
    const ss_creds *k = creds;
    size_t off = 0;
    fx->n = 0;
    while (off < n && fx->n + 3 <= SV_EFFECTS_MAX) {
        sv_ss_out out = {0};
        enum sv_ss_state before = c->state;
        ssize_t r = sv_ss_tcp_feed(c, &k->ring, k->replay, p + off, n - off, &out);
        if (r == -EAGAIN) { /* the first guesses missed; a scan off the loop */
            sv_effect *e = sv_effects_push(fx, SV_FX_SCAN);
            e->data = p + off;
            e->len = sv_ss_key_len(c->cipher) + 2 + SV_SS_TAG;
            e->trials = c->guide.trials;
            break;
        }
        if (r < 0) {
            sv_effect *e = sv_effects_push(fx, SV_FX_ERROR);
            e->error = (int)r;
            e->policy = before == SV_SS_RELAY ? SV_PROBE_CLOSE : SV_PROBE_DRAIN;
            e->trials = before == SV_SS_AUTH ? c->guide.trials : 0;
            return r;
        }
        if (r == 0)
            break;
        off += (size_t)r;
        if (out.authenticated) {
            sv_effect *e = sv_effects_push(fx, SV_FX_AUTHENTICATED);
            e->principal = c->user;
            e->trials = c->guide.trials;
        }
        if (out.open) {
            sv_effect *e = sv_effects_push(fx, SV_FX_OPEN);
            e->dest = out.dest;
            e->dest.network = SV_NET_TCP;
        }
        if (out.len > 0) {
            sv_effect *e = sv_effects_push(fx, SV_FX_TO_OUTBOUND);
            e->data = out.data;
            e->len = out.len;
        }
    }
    return (ssize_t)off;
}

static ssize_t ss_frame(void *state, const void *creds, uint32_t stream, const uint8_t *in,
                        size_t len, uint8_t *out, size_t cap)
{
    (void)stream;
    return sv_ss_tcp_seal_to(state, &((const ss_creds *)creds)->ring, in, len, out, cap);
}

static size_t ss_frame_max(size_t len) { return SV_SS_SEALED_MAX(len); }

static const sv_proto_ext_reload ss_reload = {.creds_new_from = ss_creds_new_from};
static const sv_proto_ext_replay ss_replay = {.attach_replay = ss_attach_replay};
static const sv_proto_ext_guide ss_guide = {
    .set_guide = ss_set_guide,
    .scan = ss_scan,
    .scan_result = ss_scan_result,
};
static const sv_proto_ext_backlog ss_backlog = {.more = ss_more};

const sv_proto_ops sv_shadowsocks_ops = {
    .name = "shadowsocks",
    .creds_new = ss_creds_new,
    .creds_free = ss_creds_free,
    .state_size = sizeof(sv_ss_tcp),
    .init = ss_init,
    .deinit = ss_deinit,
    .feed = ss_feed,
    .carry_max = SV_SS_SALT_MAX + SV_SS_NEED_MAX,
    .frame = ss_frame,
    .frame_max = ss_frame_max,
    .ext =
        {
            [SV_PROTO_CAP_RELOAD] = &ss_reload,
            [SV_PROTO_CAP_REPLAY] = &ss_replay,
            [SV_PROTO_CAP_GUIDE] = &ss_guide,
            [SV_PROTO_CAP_BACKLOG] = &ss_backlog,
        },
};

const sv_ss_keyring *sv_ss_creds_ring(const void *creds) { return &((const ss_creds *)creds)->ring; }

int sv_ss_creds_scan(const void *creds, const uint8_t *in, size_t n, unsigned *trials)
{
    return ss_scan(creds, in, n, trials);
}

sv_replay *sv_ss_creds_replay(const void *creds) { return ((const ss_creds *)creds)->replay; }
