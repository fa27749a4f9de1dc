/*
 * `katana keygen KIND`: the keys and ids a node's settings need, from OpenSSL's random
 * generator (RAND_bytes) and its X25519 (see cli.h; katana(8) keygen, docs/operations.md).
 *   x25519 | reality [--private KEY]  REALITY pair, base64url without padding (PROTOCOLS-2.md
 *                                     §1.1; Xray's `xray x25519`, sing-box's reality-keypair)
 *   short-id [--len N]                N random bytes in hex (a REALITY short id, §1.1)
 *   ss2022 CIPHER                     a Shadowsocks 2022 key, base64 (PROTOCOLS.md §3.1)
 *   wireguard                         X25519 pair in standard base64 (WireGuard's `wg genkey`)
 *   uuid                              random UUID, version 4 (RFC 9562 §5.4)
 * Private keys are wiped from memory after they are printed.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "agent/cli.h"
#include "supervisor/transport/reality.h"
#include "supervisor/util/closest.h"

#define KEY_LEN 32         /* an X25519 key */
#define B64_MAX 64         /* base64 of a 32-byte key with padding and NUL, with room */
#define SHORT_ID_MAX 8     /* a REALITY short id: at most 8 bytes (16 hex digits) */

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* ------------------------------------------------------------------------------------------ */
/* encodings and keys                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Base64 of @p n bytes (RFC 4648 §4 with '=' padding; @p url: §5's alphabet, no padding) into
 * @p out, which has room for 4 * ((n + 2) / 3) + 1 bytes. */
static void b64_encode(const uint8_t *in, size_t n, bool url, char *out)
{
    const char *abc = url ? b64_url : b64_std;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        size_t left = n - i;
        if (left > 1)
            v |= (uint32_t)in[i + 1] << 8;
        if (left > 2)
            v |= in[i + 2];
        out[o++] = abc[v >> 18 & 63];
        out[o++] = abc[v >> 12 & 63];
        if (left > 1)
            out[o++] = abc[v >> 6 & 63];
        else if (!url)
            out[o++] = '=';
        if (left > 2)
            out[o++] = abc[v & 63];
        else if (!url)
            out[o++] = '=';
    }
    out[o] = '\0';
}

/* RFC 7748 §5 clamping, as Xray's x25519 and WireGuard print their private keys. */
static void clamp(uint8_t k[KEY_LEN])
{
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
}

/* @p n random bytes from OpenSSL's generator; false (reported) when it fails. */
static bool random_bytes(uint8_t *out, size_t n)
{
    if (RAND_bytes(out, (int)n) == 1)
        return true;
    fputs("katana keygen: the random generator failed\n", stderr);
    return false;
}

/* The X25519 public key of private key @p priv (X25519(priv, 9), RFC 7748 §6.1). */
static bool x25519_public(const uint8_t priv[KEY_LEN], uint8_t pub[KEY_LEN])
{
    size_t len = KEY_LEN;
    EVP_PKEY *k = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, KEY_LEN);
    bool ok = k != NULL && EVP_PKEY_get_raw_public_key(k, pub, &len) == 1 && len == KEY_LEN;
    EVP_PKEY_free(k);
    if (!ok)
        fputs("katana keygen: X25519 failed (OpenSSL)\n", stderr);
    return ok;
}

/* A new clamped private key, or @p given decoded and clamped, and its public key. */
static bool x25519_pair(const uint8_t *given, uint8_t priv[KEY_LEN], uint8_t pub[KEY_LEN])
{
    if (given != NULL)
        memcpy(priv, given, KEY_LEN);
    else if (!random_bytes(priv, KEY_LEN))
        return false;
    clamp(priv);
    return x25519_public(priv, pub);
}

/* ------------------------------------------------------------------------------------------ */
/* the kinds                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Options of one kind: getopt_long over @p argv (argv[0] the kind); @p on gets each option.
 * No positional argument but @p n_pos ones. 0, or AG_CLI_USAGE (reported). */
static int kind_args(int argc, char **argv, const char *shorts, const struct option *longs,
                     int n_pos, int (*on)(int ch, const char *arg, void *ctx), void *ctx)
{
    int ch;
    opterr = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
        int rc = ch == '?' || ch == ':' ? ag_cli_bad_option("keygen", ch, argv, longs)
                                        : on(ch, optarg, ctx);
        if (rc != 0)
            return rc;
    }
    if (argc - optind > n_pos)
        return ag_cli_usage_error("keygen", "unexpected argument '%s'", argv[optind + n_pos]);
    if (argc - optind < n_pos)
        return ag_cli_usage_error("keygen", "%s needs a CIPHER (2022-blake3-aes-128-gcm, "
                                  "2022-blake3-aes-256-gcm or 2022-blake3-chacha20-poly1305)",
                                  argv[0]);
    return 0;
}

static int no_options(int ch, const char *arg, void *ctx)
{
    (void)ch, (void)arg, (void)ctx;
    return 0;
}

typedef struct x25519_opts {
    uint8_t given[KEY_LEN];
    bool has_given;
} x25519_opts;

static int on_x25519(int ch, const char *arg, void *ctx)
{
    x25519_opts *o = ctx;
    (void)ch; /* 'i' (--private, -i) */
    if (sv_reality_parse_key(arg, o->given) != 0)
        return ag_cli_usage_error("keygen", "--private: expected an X25519 private key, 43 "
                                  "base64url characters");
    o->has_given = true;
    return 0;
}

/* x25519, reality: the REALITY pair (PROTOCOLS-2.md §1.1), new or from --private KEY. */
static int keygen_x25519(int argc, char **argv)
{
    static const struct option longs[] = {{"private", required_argument, NULL, 'i'},
                                          {NULL, 0, NULL, 0}};
    x25519_opts o = {.has_given = false};
    int rc = kind_args(argc, argv, ":i:", longs, 0, on_x25519, &o);
    uint8_t priv[KEY_LEN], pub[KEY_LEN];
    char priv_text[B64_MAX], pub_text[B64_MAX];
    if (rc == 0 && !x25519_pair(o.has_given ? o.given : NULL, priv, pub))
        rc = 1;
    if (rc == 0) {
        b64_encode(priv, KEY_LEN, true, priv_text);
        b64_encode(pub, KEY_LEN, true, pub_text);
        printf("private_key (server, katana config): %s\n"
               "public_key (clients: Xray publicKey/password, sing-box public_key): %s\n",
               priv_text, pub_text);
    }
    OPENSSL_cleanse(priv, sizeof priv);
    OPENSSL_cleanse(priv_text, sizeof priv_text);
    OPENSSL_cleanse(&o, sizeof o);
    return rc;
}

static int on_short_id(int ch, const char *arg, void *ctx)
{
    int *len = ctx;
    char *end;
    (void)ch; /* 'n' (--len) */
    long v = strtol(arg, &end, 10);
    if (end == arg || *end != '\0' || v < 1 || v > SHORT_ID_MAX)
        return ag_cli_usage_error("keygen", "--len '%s': a short id is 1 to 8 bytes", arg);
    *len = (int)v;
    return 0;
}

/* short-id: N random bytes as 2N lowercase hex digits (a REALITY short id, §1.1). */
static int keygen_short_id(int argc, char **argv)
{
    static const struct option longs[] = {{"len", required_argument, NULL, 'n'},
                                          {NULL, 0, NULL, 0}};
    int len = SHORT_ID_MAX;
    int rc = kind_args(argc, argv, ":", longs, 0, on_short_id, &len);
    uint8_t id[SHORT_ID_MAX];
    if (rc != 0)
        return rc;
    if (!random_bytes(id, (size_t)len))
        return 1;
    for (int i = 0; i < len; i++)
        printf("%02x", id[i]);
    putchar('\n');
    return 0;
}

/* ss2022 CIPHER: a key of the method's length in standard base64 (PROTOCOLS.md §3.1). */
static int keygen_ss2022(int argc, char **argv)
{
    static const char *const ciphers[] = {"2022-blake3-aes-128-gcm", "2022-blake3-aes-256-gcm",
                                          "2022-blake3-chacha20-poly1305"};
    static const size_t lens[] = {16, 32, 32};
    int rc = kind_args(argc, argv, ":", NULL, 1, no_options, NULL);
    if (rc != 0)
        return rc;
    const char *name = argv[optind];
    size_t n = sizeof ciphers / sizeof ciphers[0], i = 0;
    while (i < n && strcmp(ciphers[i], name) != 0)
        i++;
    if (i == n) {
        const char *near = sv_closest(name, ciphers, n);
        return ag_cli_usage_error("keygen", "unknown ss2022 cipher '%s'%s%s%s: expected "
                                  "2022-blake3-aes-128-gcm, 2022-blake3-aes-256-gcm or "
                                  "2022-blake3-chacha20-poly1305", name,
                                  near != NULL ? " (did you mean '" : "",
                                  near != NULL ? near : "", near != NULL ? "'?)" : "");
    }
    uint8_t key[32];
    char text[B64_MAX];
    if (!random_bytes(key, lens[i]))
        return 1;
    b64_encode(key, lens[i], false, text);
    puts(text);
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(text, sizeof text);
    return 0;
}

/* wireguard: an X25519 pair in standard base64 with padding, the private key clamped. */
static int keygen_wireguard(int argc, char **argv)
{
    int rc = kind_args(argc, argv, ":", NULL, 0, no_options, NULL);
    uint8_t priv[KEY_LEN], pub[KEY_LEN];
    char priv_text[B64_MAX], pub_text[B64_MAX];
    if (rc == 0 && !x25519_pair(NULL, priv, pub))
        rc = 1;
    if (rc == 0) {
        b64_encode(priv, KEY_LEN, false, priv_text);
        b64_encode(pub, KEY_LEN, false, pub_text);
        printf("private_key: %s\npublic_key: %s\n", priv_text, pub_text);
    }
    OPENSSL_cleanse(priv, sizeof priv);
    OPENSSL_cleanse(priv_text, sizeof priv_text);
    return rc;
}

/* uuid: 16 random bytes with version 4 and variant 10 (RFC 9562 §5.4), lowercase 8-4-4-4-12. */
static int keygen_uuid(int argc, char **argv)
{
    int rc = kind_args(argc, argv, ":", NULL, 0, no_options, NULL);
    uint8_t u[16];
    if (rc != 0)
        return rc;
    if (!random_bytes(u, sizeof u))
        return 1;
    u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);
    u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
    for (int i = 0; i < 16; i++)
        printf("%02x%s", u[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
    putchar('\n');
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the command                                                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct keygen_kind {
    const char *name;
    int (*main)(int argc, char **argv); /* argv[0] is the kind */
} keygen_kind;

static const keygen_kind kinds[] = {
    {"x25519", keygen_x25519},       {"reality", keygen_x25519}, {"short-id", keygen_short_id},
    {"ss2022", keygen_ss2022},       {"wireguard", keygen_wireguard}, {"uuid", keygen_uuid},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])
#define KIND_LIST "x25519, reality, short-id, ss2022, wireguard or uuid"

int ag_keygen_main(int argc, char **argv)
{
    if (argc < 2)
        return ag_cli_usage_error("keygen", "a KIND is required: " KIND_LIST);
    const char *names[N_KINDS];
    for (size_t i = 0; i < N_KINDS; i++) {
        if (strcmp(kinds[i].name, argv[1]) == 0)
            return kinds[i].main(argc - 1, argv + 1);
        names[i] = kinds[i].name;
    }
    if (argv[1][0] == '-')
        return ag_cli_usage_error("keygen", "a KIND is required before '%s': " KIND_LIST,
                                  argv[1]);
    const char *near = sv_closest(argv[1], names, N_KINDS);
    return ag_cli_usage_error("keygen", "unknown kind '%s'%s%s%s: expected " KIND_LIST, argv[1],
                              near != NULL ? " (did you mean '" : "", near != NULL ? near : "",
                              near != NULL ? "'?)" : "");
}

const ag_cli_cmd ag_cli_keygen = {
    .name = "keygen", .main = ag_keygen_main,
    .summary = "print new keys and ids: REALITY, Shadowsocks 2022, WireGuard, UUID",
    .usage = "keygen x25519|reality [--private KEY]\n"
             "keygen short-id [--len N]\n"
             "keygen ss2022 CIPHER\n"
             "keygen wireguard|uuid",
    .help =
    "Print a new random key or id (OpenSSL's random generator), one per line:\n"
    "  x25519, reality  a REALITY key pair, base64url without padding (as 'xray x25519'):\n"
    "                   private_key for the node's tls_settings (the panel's node or a local\n"
    "                   panel's node body), public_key for the clients (Xray publicKey or\n"
    "                   password, sing-box public_key)\n"
    "    -i, --private KEY  the pair of this private key instead of a new one (as\n"
    "                   'xray x25519 -i KEY'); the private key is printed clamped\n"
    "  short-id         a REALITY short id: random bytes in hex\n"
    "    --len N        N bytes, 1 to 8 (default 8: 16 hex digits)\n"
    "  ss2022 CIPHER    a Shadowsocks 2022 key (a node's server_key, a client's PSK), standard\n"
    "                   base64 of 16 bytes for 2022-blake3-aes-128-gcm, of 32 for\n"
    "                   2022-blake3-aes-256-gcm and 2022-blake3-chacha20-poly1305\n"
    "  wireguard        a WireGuard key pair, standard base64 (the private key clamped)\n"
    "  uuid             a random UUID (version 4): a user's uuid\n\n"
    "Examples:\n"
    "  katana keygen reality\n"
    "  katana keygen short-id --len 4\n"
    "  katana keygen ss2022 2022-blake3-aes-256-gcm\n",
};
