/*
 * Test helper for t-ss2022-clients.sh: BLAKE3 derive_key over hex key material, through
 * katana's own supervisor/crypto/blake3.c (checked on the official vectors by test_blake3).
 * Usage: b3derive CONTEXT HEX_MATERIAL OUT_LEN → the derived key in hex on stdout;
 *        b3derive --hash HEX OUT_LEN → the plain hash.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/crypto/blake3.h"

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    size_t n = strlen(argv[2]) / 2, out_len = (size_t)atoi(argv[3]);
    unsigned char in[256], out[64];
    if (n > sizeof in || out_len == 0 || out_len > sizeof out)
        return 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(argv[2] + 2 * i, "%2x", &v) != 1)
            return 2;
        in[i] = (unsigned char)v;
    }
    if (strcmp(argv[1], "--hash") == 0)
        sv_blake3_hash(in, n, out, out_len);
    else
        sv_blake3_derive_key(argv[1], in, n, out, out_len);
    for (size_t i = 0; i < out_len; i++)
        printf("%02x", out[i]);
    printf("\n");
    return 0;
}
