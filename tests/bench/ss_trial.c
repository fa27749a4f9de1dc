/*
 * Microbenchmark (issue 13, `make bench`): the cost of Shadowsocks AEAD trial decryption per
 * candidate key, before and after the salt's HKDF half is computed once (sv_ss_kdf) and 16 keys'
 * subkeys are derived together (sv_ss_kdf_derive_many), and a whole first chunk's
 * authentication of the last user of 1, 1 000 and 10 000 (no hint: a never-seen client; a right
 * hint: a returning one). Prints ns per key and us per connection, in CPU time
 * of this process (a shared host's other load changes them less than wall time).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "supervisor/proto/shadowsocks.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); /* CPU time: the host may be shared */
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A client's first bytes: salt, sealed length (7), sealed address 127.0.0.1:80. */
static size_t first_chunk(enum sv_ss_cipher ci, const char *password, unsigned salt_seed,
                          uint8_t *w)
{
    size_t sl = sv_ss_key_len(ci);
    uint8_t master[SV_SS_KEY_MAX], sub[SV_SS_KEY_MAX];
    for (size_t i = 0; i < sl; i++)
        w[i] = (uint8_t)(salt_seed * 131 + i * 7);
    sv_ss_password_to_key(ci, password, master);
    sv_ss_subkey(master, sl, w, sub);
    sv_aead a = {0};
    sv_aead_init(&a, ci, sub, true);
    uint8_t *p = w + sl;
    p[0] = 0;
    p[1] = 7;
    sv_aead_seal(&a, p, 2);
    memcpy(p + 18, "\x01\x7f\x00\x00\x01\x00\x50", 7);
    sv_aead_seal(&a, p + 18, 7);
    sv_aead_deinit(&a);
    return sl + 18 + 7 + 16;
}

int main(void)
{
    const enum sv_ss_cipher ci = SV_SS_AES_256_GCM;
    uint8_t key[32], salt[32], out[32];
    for (int i = 0; i < 32; i++) {
        key[i] = (uint8_t)(i * 5);
        salt[i] = (uint8_t)(i * 3 + 1);
    }
    const int n_keys = 100000;
    double t0 = now_s();
    for (int i = 0; i < n_keys; i++) {
        key[0] = (uint8_t)i;
        sv_ss_subkey(key, 32, salt, out);
    }
    double per_old = (now_s() - t0) / n_keys;
    t0 = now_s();
    sv_ss_kdf kdf;
    sv_ss_kdf_init(&kdf, salt, 32);
    for (int i = 0; i < n_keys; i++) {
        key[0] = (uint8_t)i;
        sv_ss_kdf_derive(&kdf, key, out);
    }
    double per_new = (now_s() - t0) / n_keys;
    uint8_t lane_keys[SV_SS_KDF_LANES][32], lane_out[SV_SS_KDF_LANES][SV_SS_KDF_MAX];
    const uint8_t *lane_in[SV_SS_KDF_LANES];
    for (int j = 0; j < SV_SS_KDF_LANES; j++) {
        memcpy(lane_keys[j], key, sizeof key);
        lane_keys[j][1] = (uint8_t)j;
        lane_in[j] = lane_keys[j];
    }
    t0 = now_s();
    for (int i = 0; i < n_keys / SV_SS_KDF_LANES; i++) {
        lane_keys[0][0] = (uint8_t)i;
        sv_ss_kdf_derive_many(&kdf, lane_in, SV_SS_KDF_LANES, lane_out);
    }
    double per_lanes = (now_s() - t0) / (n_keys / SV_SS_KDF_LANES * SV_SS_KDF_LANES);
    printf("HKDF-SHA1 subkey per candidate key: EVP_KDF (before) %.0f ns, salt state reused "
           "%.0f ns, %d keys in vector lanes %.0f ns: x%.1f\n", per_old * 1e9, per_new * 1e9,
           SV_SS_KDF_LANES, per_lanes * 1e9, per_old / per_lanes);

    static const size_t sizes[] = {1, 1000, 10000};
    printf("%-7s %22s %22s %10s\n", "users", "never-seen (no hint)", "returning (hint)", "keys/s");
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        char (*names)[24] = calloc(n, sizeof *names);
        const char **pw = calloc(n, sizeof *pw);
        if (names == NULL || pw == NULL)
            return 1;
        for (size_t i = 0; i < n; i++) {
            snprintf(names[i], sizeof names[i], "bench-user-%zu", i);
            pw[i] = names[i];
        }
        sv_ss_keyring ring;
        if (sv_ss_keyring_init(&ring, ci, pw, n) != 0)
            return 1;
        enum { POOL = 64 };
        uint8_t pool[POOL][128];
        size_t len = 0;
        for (unsigned r = 0; r < POOL; r++)
            len = first_chunk(ci, pw[n - 1], r, pool[r]);
        double lat[2];
        for (int hinted = 0; hinted < 2; hinted++) {
            int rounds = hinted ? 20000 : (int)(n >= 1000 ? 20 : 2000);
            double t = now_s();
            for (int r = 0; r < rounds; r++) {
                uint8_t w[128];
                memcpy(w, pool[r % POOL], len);
                sv_ss_tcp c = {0};
                sv_ss_tcp_init(&c, ci);
                c.guide.hint = hinted ? (int)(n - 1) : -1;
                sv_ss_out o;
                ssize_t got = sv_ss_tcp_feed(&c, &ring, NULL, w, len, &o);
                if (got <= 0 || c.user != (int)(n - 1)) {
                    fprintf(stderr, "trial failed: %zd\n", got);
                    return 1;
                }
                sv_ss_tcp_deinit(&c);
            }
            lat[hinted] = (now_s() - t) / rounds;
        }
        printf("%-7zu %19.1f us %19.1f us %10.0f\n", n, lat[0] * 1e6, lat[1] * 1e6,
               (double)n / lat[0]);
        sv_ss_keyring_deinit(&ring);
        free(names);
        free(pw);
    }
    return 0;
}
