/*
 * The credential table of the proxy inbounds that take a user name and a password (SOCKS5's
 * RFC 1929 sub-negotiation, HTTP's Proxy-Authorization: Basic): both are the user's secret, the
 * panel uuid (PROTOCOLS-3.md §4.1: Xboard-Node sets user = pass = uuid for socks and http).
 */
#ifndef SV_PROTO_USERPASS_H
#define SV_PROTO_USERPASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "supervisor/supervisor.h"

/** Longest user name or password a client may send (RFC 1929: one length byte). */
#define SV_USERPASS_FIELD_MAX 255

typedef struct sv_userpass sv_userpass;

/**
 * Build the table of @p users: each user's secret is both its name and its password. With
 * @p no_auth, a client that offers no credentials is admitted as the set's one user
 * (sv_userpass_anonymous); the set must then hold exactly one user.
 * @return 0 with *@p out set (free with sv_userpass_free), -ENOMEM, or -EINVAL with @p err
 *         naming the user set and the users (an empty secret, a secret longer than
 *         SV_USERPASS_FIELD_MAX, two users with the same secret, more than SV_USERS_MAX users,
 *         no_auth without exactly one user).
 */
int sv_userpass_new(const sv_user_set *users, bool no_auth, sv_userpass **out, sv_error *err);

/** The user a client without credentials is admitted as: 0 when the table was made with
 *  no_auth, else -1 (such a client is refused). */
int sv_userpass_anonymous(const sv_userpass *t);

/** Free a table from sv_userpass_new (NULL is fine); the secrets are wiped. */
void sv_userpass_free(sv_userpass *t);

/**
 * The user whose name is @p user (@p ulen bytes) and whose password is @p pass (@p plen bytes),
 * the two compared in constant time once the name was found.
 * @return the user's index in the set the table was built from, or -1 (unknown name, wrong
 *         password, a NULL table).
 */
int sv_userpass_lookup(const sv_userpass *t, const uint8_t *user, size_t ulen,
                       const uint8_t *pass, size_t plen);

/** How many users the table holds (0 for NULL). */
size_t sv_userpass_count(const sv_userpass *t);

#endif
